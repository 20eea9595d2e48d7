// Package kafka publishes Courier messages to Apache Kafka and consumes them
// through a consumer group, with github.com/twmb/franz-go.
//
// A message becomes a Kafka record on topic TopicPrefix+Topic whose key is
// the message's key and whose value is its payload, with these headers:
//
//	Courier-Id           message id (the inbox's deduplication id)
//	Courier-Key          ordering key (also the record key)
//	Courier-Type         message type
//	Courier-Version      schema version
//	Courier-Occurred-At  RFC 3339 time
//	Content-Type         payload media type
//
// plus the message's own headers (trace context, correlation id, …). The
// record's timestamp is the time of publication, not OccurredAt, so that a
// replayed dead letter is not at once older than the topic's retention.
//
// # CloudEvents
//
// With PublisherConfig.CloudEvents set, a record also carries the
// CloudEvents attributes of the Kafka binding's binary content mode (ce_id,
// ce_source, ce_type, ce_subject, … and content-type; see package
// broker/cloudevents), next to Courier's headers, which stay. FromRaw
// leaves those attributes out of a decoded message's headers, and decodes a
// record that carries CloudEvents attributes instead of Courier's headers
// (see cloudevents.Decode; the record key stands in for a missing
// ce_subject).
//
// # Partitions and order
//
// Records are partitioned by franz-go's default partitioner, which hashes a
// record key with murmur2 exactly as the Java client does: a key lands on the
// same partition whichever client produced it, and the messages of one key
// keep their order within it. The producer is franz-go's default: acks=all
// and idempotent, so a retry inside the client neither duplicates nor
// reorders records. Adding partitions to a topic moves keys to other
// partitions; order holds again only for messages published after the
// change.
//
// The Publisher is a broker.OrderKeeper: the relay hands it a key's whole
// run of messages in one call instead of one per round trip. Publish buffers
// every record of a call before the client sends any (manual flushing, one
// call at a time), so a batch Kafka refuses fails all the later records of
// its partition in the call, and those are reported not stored: nothing of
// a key is stored after a message of it that failed.
//
// # Features
//
// What the conformance suite (package broker/brokertest) checks of this
// package, declared in its TestConformance:
//
//   - No deduplication by message id: Kafka's idempotent producer removes
//     the duplicates of its own retries, not a message the relay publishes
//     again after a crash. Consumers use the inbox, which does.
//   - Per-key order from one publisher (see above), also pipelined: many
//     messages of a key in one call (broker.OrderKeeper).
//   - A message larger than MaxMessageBytes is refused for good
//     (broker.ErrRejected).
//   - An unacknowledged delivery comes again after its subscriber closes, or
//     after a rebalance moved its partition; Attempt is counted by the
//     Subscriber, in memory, so it starts again at 1 in a new Subscriber.
//
// # Errors
//
// Publish sorts Kafka's answers as package broker asks (see
// Publisher.Publish for each case): an unreachable cluster, timeouts and
// Kafka's retriable errors wrap broker.ErrUnavailable; a record Kafka
// refuses for what it is (too large, invalid, an invalid topic name) wraps
// broker.ErrRejected; a topic that does not exist wraps ErrNoTopic and
// counts against the message, since an operator may create it.
//
// # Durability
//
// With acks=all Kafka acknowledges a record once every in-sync replica has
// it in memory; Kafka does not fsync before acknowledging and relies on
// replication instead. Run topics with replication.factor=3 and
// min.insync.replicas=2 so that an acknowledged record survives the loss of
// a broker; with one replica an acknowledged record can be lost in a power
// failure (the outbox row is marked published by then).
package kafka

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/internal/redact"
)

// Header names Courier sets on every record.
const (
	HeaderID          = "Courier-Id"
	HeaderKey         = "Courier-Key"
	HeaderType        = "Courier-Type"
	HeaderVersion     = "Courier-Version"
	HeaderOccurredAt  = "Courier-Occurred-At"
	HeaderContentType = "Content-Type"
)

// DefaultPort is the port of a broker address given without one.
const DefaultPort = "9092"

// Config says where the cluster is and how topics are named.
type Config struct {
	// Brokers are seed addresses, host:port, of the cluster. Required.
	Brokers []string
	// TopicPrefix is prepended to a message's topic to form the Kafka
	// topic: with "shop." topic "orders" becomes "shop.orders". Default
	// none: the Kafka topic is the message's topic.
	TopicPrefix string
}

// ParseURL reads a Config from a URL of the form
//
//	kafka://host1:9092,host2:9092?topic_prefix=shop.
//
// Hosts without a port get DefaultPort. The only query parameter is
// topic_prefix; any other is an error naming it.
func ParseURL(rawURL string) (Config, error) {
	// url.Parse refuses several hosts with IPv6 literals, so the URL is
	// taken apart here: scheme, hosts, an optional path, the query.
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok || scheme != "kafka" {
		return Config{}, fmt.Errorf("kafka: URL %q: the scheme must be kafka:// followed by the brokers, e.g. kafka://host1:9092,host2:9092", redact.URL(rawURL))
	}
	rest, rawQuery, _ := strings.Cut(rest, "?")
	hosts, path, _ := strings.Cut(rest, "/")
	if path != "" {
		return Config{}, fmt.Errorf("kafka: URL %q has a path %q: Kafka URLs take none; set the topic prefix with ?topic_prefix=", redact.URL(rawURL), "/"+path)
	}
	var cfg Config
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), DefaultPort)
		}
		cfg.Brokers = append(cfg.Brokers, h)
	}
	if len(cfg.Brokers) == 0 {
		return Config{}, fmt.Errorf("kafka: URL %q names no broker: use kafka://host:9092", redact.URL(rawURL))
	}
	query, err := url.ParseQuery(rawQuery)
	if err != nil {
		return Config{}, fmt.Errorf("kafka: URL %q: query: %w", redact.URL(rawURL), err)
	}
	for k, v := range query {
		switch k {
		case "topic_prefix":
			cfg.TopicPrefix = v[len(v)-1]
		default:
			return Config{}, fmt.Errorf("kafka: URL %q: unknown parameter %q (known: topic_prefix)", redact.URL(rawURL), k)
		}
	}
	return cfg, nil
}

func (c Config) validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("kafka: Config.Brokers is empty: give the cluster's seed brokers, e.g. []string{\"localhost:9092\"} (or use ParseURL)")
	}
	return nil
}

// Topic returns the Kafka topic a message topic is published on.
func (c Config) Topic(topic string) string { return c.TopicPrefix + topic }

// MessageTopic returns the message topic of a Kafka topic.
func (c Config) MessageTopic(kafkaTopic string) string {
	return strings.TrimPrefix(kafkaTopic, c.TopicPrefix)
}

// ToRecord converts a message to a Kafka record.
func (c Config) ToRecord(m *courier.Message) *kgo.Record {
	h := make([]kgo.RecordHeader, 0, len(m.Headers)+6)
	add := func(k, v string) { h = append(h, kgo.RecordHeader{Key: k, Value: []byte(v)}) }
	add(HeaderID, m.ID.String())
	add(HeaderKey, m.Key)
	add(HeaderType, m.Type)
	add(HeaderVersion, strconv.Itoa(m.Version))
	add(HeaderOccurredAt, m.OccurredAt.UTC().Format(time.RFC3339Nano))
	add(HeaderContentType, m.ContentType)
	for k, v := range m.Headers {
		add(k, v)
	}
	return &kgo.Record{Topic: c.Topic(m.Topic), Key: []byte(m.Key), Value: m.Payload, Headers: h}
}

// ErrMalformed is returned (wrapped) by FromRaw for a record that lacks
// Courier's headers or carries invalid ones. It is courier.ErrMalformed.
var ErrMalformed = courier.ErrMalformed

// Raw returns a record as a broker.Raw: the Kafka topic as Subject, the
// record headers (repeated names keep every value), the value as Data. A
// record without a Courier-Key header gets one from its record key, so that
// records of other producers decode with their key.
func Raw(r *kgo.Record) broker.Raw {
	h := make(map[string][]string, len(r.Headers)+1)
	for _, rh := range r.Headers {
		h[rh.Key] = append(h[rh.Key], string(rh.Value))
	}
	if _, ok := h[HeaderKey]; !ok && len(r.Key) > 0 {
		h[HeaderKey] = []string{string(r.Key)}
	}
	return broker.Raw{Subject: r.Topic, Headers: h, Data: r.Value}
}

// FromRaw converts a delivery back to a Courier message. It fails with an
// error wrapping ErrMalformed when a required header is missing or invalid.
// A record without Courier-Type that carries CloudEvents attributes
// (ce_specversion) is decoded from them (see cloudevents.Decode).
func (c Config) FromRaw(raw broker.Raw) (courier.Message, error) {
	m := courier.Message{Topic: c.MessageTopic(raw.Subject), Payload: raw.Data}
	get := func(k string) string {
		if vs := raw.Headers[k]; len(vs) > 0 {
			return vs[0]
		}
		return ""
	}
	ce := cloudevents.IsEvent(cloudevents.PrefixKafka, get)
	if ce && get(HeaderType) == "" {
		return c.fromEvent(raw, get)
	}
	bad := func(field string, err error) (courier.Message, error) {
		if err != nil {
			return courier.Message{}, fmt.Errorf("%w: header %s: %v", ErrMalformed, field, err)
		}
		return courier.Message{}, fmt.Errorf("%w: header %s is missing", ErrMalformed, field)
	}
	id := get(HeaderID)
	if id == "" {
		return bad(HeaderID, nil)
	}
	var err error
	if m.ID, err = uuid.Parse(id); err != nil {
		return bad(HeaderID, err)
	}
	if m.Key = get(HeaderKey); m.Key == "" {
		return bad(HeaderKey, nil)
	}
	if m.Type = get(HeaderType); m.Type == "" {
		return bad(HeaderType, nil)
	}
	if m.Version, err = strconv.Atoi(get(HeaderVersion)); err != nil {
		return bad(HeaderVersion, err)
	}
	if m.OccurredAt, err = time.Parse(time.RFC3339Nano, get(HeaderOccurredAt)); err != nil {
		return bad(HeaderOccurredAt, err)
	}
	m.ContentType = get(HeaderContentType)
	for k, vs := range raw.Headers {
		switch k {
		case HeaderID, HeaderKey, HeaderType, HeaderVersion, HeaderOccurredAt, HeaderContentType:
			continue
		}
		if ce && (k == cloudevents.ContentTypeHeader || cloudevents.Written(cloudevents.PrefixKafka, k)) {
			continue
		}
		if len(vs) > 0 {
			m.SetHeader(k, vs[0])
		}
	}
	return m, nil
}

// fromEvent decodes a record that carries CloudEvents attributes instead of
// Courier's headers. The record key (Courier-Key, see Raw) stands in for a
// missing ce_subject.
func (c Config) fromEvent(raw broker.Raw, get func(string) string) (courier.Message, error) {
	m, err := cloudevents.Decode(cloudevents.PrefixKafka, func(k string) string {
		if v := get(k); v != "" || k != cloudevents.PrefixKafka+cloudevents.AttrSubject {
			return v
		}
		return get(HeaderKey)
	})
	if err != nil {
		return courier.Message{}, err
	}
	m.Topic, m.Payload = c.MessageTopic(raw.Subject), raw.Data
	if m.ContentType = get(cloudevents.ContentTypeHeader); m.ContentType == "" {
		m.ContentType = get(HeaderContentType)
	}
	for k, vs := range raw.Headers {
		switch k {
		case HeaderID, HeaderKey, HeaderVersion, HeaderOccurredAt, HeaderContentType, cloudevents.ContentTypeHeader:
			continue
		}
		if len(vs) == 0 || cloudevents.Written(cloudevents.PrefixKafka, k) {
			continue
		}
		m.SetHeader(k, vs[0])
	}
	return m, nil
}
