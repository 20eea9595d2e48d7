// Package amqp publishes Courier messages to RabbitMQ and consumes them,
// over AMQP 0-9-1 (github.com/rabbitmq/amqp091-go).
//
// # Topology
//
// Messages go to one durable topic exchange (Config.Exchange, default
// "courier") with routing key RoutingKeyPrefix+Topic. Consumers read from
// durable quorum queues bound to the exchange; [EnsureTopology] declares the
// exchange, a queue and its bindings:
//
//	cfg, _ := amqp.ParseURL("amqp://guest:guest@127.0.0.1:5672/?exchange=courier")
//	err := amqp.EnsureTopology(ctx, cfg, amqp.Topology{Queue: "billing", Topics: []string{"orders"}})
//	pub, err := amqp.NewPublisher(ctx, amqp.PublisherConfig{Config: cfg})
//	sub, err := amqp.NewSubscriber(ctx, amqp.SubscriberConfig{Config: cfg, Queue: "billing"})
//
// # Message mapping
//
// A message becomes a persistent AMQP message (delivery mode 2) with its
// payload as body and these properties and headers:
//
//	message-id           property: the message id (UUID)
//	type                 property: message type
//	content-type         property: payload media type
//	timestamp            property: OccurredAt, to the second
//	Courier-Key          header: ordering key
//	Courier-Version      header: schema version
//	Courier-Occurred-At  header: RFC 3339 time, to the nanosecond
//
// plus the message's own headers (trace context, correlation id, …) as
// string headers. [broker.Raw] carries the properties as the headers
// Message-Id, Type and Content-Type, so a parked delivery decodes again from
// its Raw alone. The headers RabbitMQ adds to deliveries (x-delivery-count,
// x-death, x-first-death-*, x-last-death-*, x-received-from) are not copied
// into decoded messages.
//
// # CloudEvents
//
// With PublisherConfig.CloudEvents set, a message also carries the
// CloudEvents attributes of the AMQP binding's binary content mode as
// headers (cloudEvents:id, cloudEvents:source, cloudEvents:type, …; the
// content-type property is datacontenttype; see package broker/cloudevents),
// next to Courier's headers, which stay. The binding allows the prefixes
// "cloudEvents:" and "cloudEvents_"; Courier writes the first, which the
// CloudEvents Go SDK reads, and Decode reads both: it leaves the attributes
// out of a decoded message's headers, and decodes a message that carries
// CloudEvents attributes instead of Courier's headers (see
// cloudevents.Decode).
//
// RabbitMQ does not deduplicate: a message the relay publishes twice (its
// confirm was lost to a connection drop) is delivered twice, and the inbox
// recognises the second copy by its message id.
//
// # Publishing
//
// The [Publisher] publishes a batch on a channel in confirm mode with the
// mandatory flag, every message in flight at once, then waits for all the
// confirms. Outcomes (see broker.Publisher):
//
//   - ack: the message is in every queue its routing key reaches; for quorum
//     queues that means a majority of their replicas wrote it to disk.
//   - basic.return then ack: no queue is bound to the routing key, so the
//     message went nowhere. It fails with an error wrapping [ErrUnroutable]
//     that names the exchange and routing key and says to bind a queue; it
//     counts against the message (an operator can bind one in time).
//   - nack: RabbitMQ refused the message (a queue at its x-max-length with
//     x-overflow=reject-publish, or an internal error of a queue). It counts
//     against the message and names the routing key.
//   - channel closed with 404 NOT_FOUND (the exchange does not exist) or 403
//     ACCESS_REFUSED (the user may not write to it): counts against the
//     message and names the exchange and the fix.
//   - channel closed with 406 PRECONDITION_FAILED "message size … is larger
//     than configured max size …" (RabbitMQ's max_message_size, 128 MiB by
//     default in 3.x, 16 MiB in 4.x): wraps broker.ErrRejected, so the relay
//     makes the message a dead letter at once. RabbitMQ says so by closing
//     the channel, under the messages after it in the batch (they fail as
//     broker.ErrUnavailable and are retried); the Publisher then remembers
//     the limit and refuses larger messages before sending them. Set
//     PublisherConfig.MaxMessageSize to the broker's limit to have that from
//     the start.
//   - everything else (connection refused or lost, channel closed for any
//     other reason, a confirm that does not come within ConfirmTimeout or
//     before ctx ends, publishing blocked by a memory or disk alarm) wraps
//     broker.ErrUnavailable: an outage never produces dead letters.
//
// NewPublisher does not connect; the first Publish does (Publisher.Connect
// connects at once, to report a wrong URL or credentials at start-up).
// After a connection loss the next Publish dials again, spaced by
// Config.Backoff: a Publish inside the backoff window fails at once with
// broker.ErrUnavailable instead of waiting. A confirm that does not come in
// time drops the connection too (unless RabbitMQ said it blocks publishing),
// since a connection whose peer went silent is only noticed after two
// missed heartbeats. Calls into the client that wait for the broker's
// answer (opening a channel) are not bounded by ctx, only by the
// connection's heartbeat.
//
// # Consuming
//
// A [Subscriber] consumes one queue with manual acknowledgements and a
// prefetch window (QoS). The inbox consumer acknowledges a delivery after
// its transaction committed, so a crash in between brings the message again
// and the inbox skips it. Delivery.Attempt is the quorum queue's
// x-delivery-count plus one (classic queues only say whether a message was
// redelivered: 2 then). Retry holds the delivery for the delay and then
// rejects it with requeue, so it comes again at once to some consumer of
// the queue: the delay is kept by this process, not by RabbitMQ, it holds
// one prefetch slot meanwhile, and it is cut short when the subscriber
// closes or its connection drops (the message then comes back at once).
// Extend does nothing: RabbitMQ keeps an unacknowledged delivery with its
// consumer until the channel closes, or until consumer_timeout (30 minutes
// by default) closes the channel. Drop acknowledges the delivery: the inbox
// consumer has parked the message in its own store, and a second dead
// letter in RabbitMQ would only be replayed twice.
//
// After a connection loss Next reconnects, spaced by Config.Backoff, and
// resumes consuming; deliveries taken before the loss are redelivered.
//
// # Per-key order
//
// A queue delivers in order, but several consumers of one queue (or a
// prefetch window with Retry) interleave a key's messages. For per-key
// order declare the queue with Topology.SingleActiveConsumer: RabbitMQ then
// delivers to one consumer at a time and fails over to the next when it
// goes away, and run the inbox consumer with KeepOrder.
//
// # Dead letters
//
// Courier's own dead letters live in its database: the relay parks what
// RabbitMQ refuses, and the inbox consumer parks what its handler keeps
// failing. RabbitMQ's dead-lettering is a second, independent mechanism;
// [Topology] sets it up when asked:
//
//   - x-dead-letter-exchange (Topology.DeadLetterExchange) and
//     x-dead-letter-routing-key (Topology.DeadLetterRoutingKey): where a
//     quorum queue sends a message it gives up on.
//   - x-delivery-limit (Topology.DeliveryLimit): how many times a quorum
//     queue redelivers a message before giving up on it. RabbitMQ 3.x has
//     no limit unless one is set; RabbitMQ 4.x sets 20 by default. Without
//     a dead-letter exchange a message over the limit is DELETED. Set it
//     above the inbox consumer's MaxDeliveries (and count the redeliveries
//     that connection drops cause), so that the inbox parks a failing
//     message before RabbitMQ drops or dead-letters it.
//
// Drop acknowledges, so messages the inbox parks never reach the
// dead-letter exchange; what arrives there is what a delivery limit or a
// message TTL (x-message-ttl) removed.
package amqp

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/internal/redact"
)

// Header names Courier sets on every AMQP message.
const (
	HeaderKey        = "Courier-Key"
	HeaderVersion    = "Courier-Version"
	HeaderOccurredAt = "Courier-Occurred-At"
)

// Names under which [broker.Raw] carries AMQP properties, so that Decode
// reads a message from its Raw alone.
const (
	RawMessageID   = "Message-Id"
	RawType        = "Type"
	RawContentType = "Content-Type"
)

// DefaultExchange is the exchange Config uses unless told otherwise.
const DefaultExchange = "courier"

// Features says what RabbitMQ, through this package, gives Courier. It is
// the one place these properties are stated; the conformance test and the
// documentation follow it.
var Features = struct {
	// Dedup: RabbitMQ does not drop a message published twice.
	Dedup bool
	// PerKeyOrder: a queue delivers one publisher's messages in publish
	// order to a single (active) consumer.
	PerKeyOrder bool
	// AttemptsSurviveClose: a quorum queue counts deliveries itself
	// (x-delivery-count), so Attempt goes on counting on another
	// subscriber.
	AttemptsSurviveClose bool
	// RedeliversWhileOpen: RabbitMQ redelivers an unacknowledged delivery
	// only when its channel closes (or consumer_timeout, 30 minutes by
	// default, closes it).
	RedeliversWhileOpen bool
	// OversizeRejected: a message over max_message_size is refused for
	// good (broker.ErrRejected).
	OversizeRejected bool
	// UnroutableFails: a message no queue takes fails (mandatory flag and
	// basic.return) instead of being acknowledged and lost.
	UnroutableFails bool
	// BrokerDelay: RabbitMQ does not delay a redelivery; Retry waits in
	// the consumer's process.
	BrokerDelay bool
	// Extend: RabbitMQ has no per-delivery deadline to extend.
	Extend bool
}{
	Dedup:                false,
	PerKeyOrder:          true,
	AttemptsSurviveClose: true,
	RedeliversWhileOpen:  false,
	OversizeRejected:     true,
	UnroutableFails:      true,
	BrokerDelay:          false,
	Extend:               false,
}

// Config says where the broker is and how topics map to routing keys.
type Config struct {
	// URL is the amqp:// or amqps:// URL of the broker, vhost included,
	// without Courier's options ([ParseURL] takes them out). Required.
	URL string
	// Exchange is the topic exchange messages are published to. Default
	// DefaultExchange ("courier").
	Exchange string
	// RoutingKeyPrefix is prepended to a message's topic to form its
	// routing key. Default "": the routing key is the topic.
	RoutingKeyPrefix string
	// DialTimeout bounds connecting and the AMQP handshake. Default 5s;
	// the URL's connection_timeout parameter (milliseconds) wins.
	DialTimeout time.Duration
	// Heartbeat is the AMQP heartbeat interval: a connection silent for two
	// of them counts as lost. Default 10s.
	Heartbeat time.Duration
	// Backoff spaces reconnection attempts after a connection loss.
	// Default 100ms doubling to 5s, jitter 0.2.
	Backoff courier.Backoff
}

// ParseURL reads a Config from an amqp:// or amqps:// URL. Query
// parameters exchange (default "courier") and prefix (the routing key
// prefix, default none) are Courier's and are removed from Config.URL; the
// others (heartbeat, connection_timeout, …) are amqp091-go's and stay:
//
//	amqp://guest:guest@127.0.0.1:5672/?exchange=events&prefix=shop.
func ParseURL(s string) (Config, error) {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = fmt.Errorf("%q: %w", redact.URL(s), ue.Err) // not the URL as it is: it may hold a password
		}
		return Config{}, fmt.Errorf("amqp: URL: %w", err)
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return Config{}, fmt.Errorf("amqp: URL scheme is %q: use amqp:// or amqps://, such as amqp://guest:guest@127.0.0.1:5672/", u.Scheme)
	}
	q := u.Query()
	cfg := Config{Exchange: q.Get("exchange"), RoutingKeyPrefix: q.Get("prefix")}
	q.Del("exchange")
	q.Del("prefix")
	u.RawQuery = q.Encode()
	cfg.URL = u.String()
	if _, err := amqp091.ParseURI(cfg.URL); err != nil {
		return Config{}, fmt.Errorf("amqp: URL: %w", err)
	}
	return cfg.withDefaults(), nil
}

func (c Config) withDefaults() Config {
	if c.Exchange == "" {
		c.Exchange = DefaultExchange
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 10 * time.Second
	}
	if c.Backoff.Initial <= 0 {
		c.Backoff.Initial = 100 * time.Millisecond
	}
	if c.Backoff.Max < c.Backoff.Initial {
		c.Backoff.Max = max(5*time.Second, c.Backoff.Initial)
	}
	if c.Backoff.Jitter <= 0 {
		c.Backoff.Jitter = 0.2
	}
	return c
}

func (c Config) validate() error {
	if c.URL == "" {
		return errors.New("amqp: Config.URL is empty: set it to the broker's URL, such as amqp://guest:guest@127.0.0.1:5672/")
	}
	return nil
}

// RoutingKey returns the routing key a topic is published with.
func (c Config) RoutingKey(topic string) string { return c.RoutingKeyPrefix + topic }

// Topic returns the topic a routing key belongs to.
func (c Config) Topic(routingKey string) string {
	return strings.TrimPrefix(routingKey, c.RoutingKeyPrefix)
}

// dial connects to the broker.
func (c Config) dial() (*amqp091.Connection, error) {
	timeout := c.DialTimeout
	if uri, err := amqp091.ParseURI(c.URL); err == nil && uri.ConnectionTimeout > 0 {
		timeout = time.Duration(uri.ConnectionTimeout) * time.Millisecond
	}
	conn, err := amqp091.DialConfig(c.URL, amqp091.Config{
		Heartbeat:  c.Heartbeat,
		Dial:       amqp091.DefaultDial(timeout),
		Properties: amqp091.Table{"connection_name": "courier"},
	})
	if err != nil {
		return nil, fmt.Errorf("amqp: connect to %s: %w", redact.URL(c.URL), err)
	}
	return conn, nil
}

// Publishing converts a message to the AMQP message Publish sends.
func Publishing(m *courier.Message) amqp091.Publishing {
	h := make(amqp091.Table, len(m.Headers)+3)
	for k, v := range m.Headers {
		h[k] = v
	}
	h[HeaderKey] = m.Key
	h[HeaderVersion] = strconv.Itoa(m.Version)
	h[HeaderOccurredAt] = m.OccurredAt.UTC().Format(time.RFC3339Nano)
	return amqp091.Publishing{
		Headers:      h,
		ContentType:  m.ContentType,
		DeliveryMode: amqp091.Persistent,
		MessageId:    m.ID.String(),
		Timestamp:    m.OccurredAt.UTC(),
		Type:         m.Type,
		Body:         m.Payload,
	}
}

// raw returns d as broker.Raw: its headers as strings, plus the message-id,
// type and content-type properties.
func raw(d *amqp091.Delivery) broker.Raw {
	h := make(map[string][]string, len(d.Headers)+3)
	for k, v := range d.Headers {
		h[k] = []string{headerString(v)}
	}
	if d.MessageId != "" {
		h[RawMessageID] = []string{d.MessageId}
	}
	if d.Type != "" {
		h[RawType] = []string{d.Type}
	}
	if d.ContentType != "" {
		h[RawContentType] = []string{d.ContentType}
	}
	return broker.Raw{Subject: d.RoutingKey, Headers: h, Data: d.Body}
}

// headerString renders an AMQP header value as text.
func headerString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano)
	default:
		return fmt.Sprint(v)
	}
}

// brokerHeader reports whether name is a header RabbitMQ adds to a delivery
// (redelivery count, dead-lettering history, shovel or federation origin),
// not one the message was published with.
func brokerHeader(name string) bool {
	switch name {
	case "x-delivery-count", "x-death", "x-received-from":
		return true
	}
	return strings.HasPrefix(name, "x-first-death-") || strings.HasPrefix(name, "x-last-death-")
}

// ErrMalformed is returned (wrapped) by Decode for a delivery that lacks
// Courier's headers or carries invalid ones. It is courier.ErrMalformed.
var ErrMalformed = courier.ErrMalformed

// Decode converts a delivery's raw form back to a Courier message. It fails
// with an error wrapping ErrMalformed when a required header is missing or
// invalid.
// A delivery without Courier-Version that carries CloudEvents attributes
// (cloudEvents:specversion or cloudEvents_specversion) is decoded from
// them (see cloudevents.Decode).
func (c Config) Decode(r broker.Raw) (courier.Message, error) {
	get := func(name string) string {
		if vs := r.Headers[name]; len(vs) > 0 {
			return vs[0]
		}
		return ""
	}
	bad := func(field string, err error) (courier.Message, error) {
		if err != nil {
			return courier.Message{}, fmt.Errorf("%w: %s: %v", ErrMalformed, field, err)
		}
		return courier.Message{}, fmt.Errorf("%w: %s is missing", ErrMalformed, field)
	}
	var ce string // the CloudEvents prefix, if any
	for _, p := range []string{cloudevents.PrefixAMQP, cloudevents.PrefixAMQPUnderscore} {
		if cloudevents.IsEvent(p, get) {
			ce = p
			break
		}
	}
	if ce != "" && get(HeaderVersion) == "" {
		return c.fromEvent(r, ce, get)
	}
	m := courier.Message{Topic: c.Topic(r.Subject), Payload: r.Data}
	id := get(RawMessageID)
	if id == "" {
		return bad("property message-id", nil)
	}
	var err error
	if m.ID, err = uuid.Parse(id); err != nil {
		return bad("property message-id", err)
	}
	if m.Key = get(HeaderKey); m.Key == "" {
		return bad("header "+HeaderKey, nil)
	}
	if m.Type = get(RawType); m.Type == "" {
		return bad("property type", nil)
	}
	if m.Version, err = strconv.Atoi(get(HeaderVersion)); err != nil {
		return bad("header "+HeaderVersion, err)
	}
	if m.OccurredAt, err = time.Parse(time.RFC3339Nano, get(HeaderOccurredAt)); err != nil {
		return bad("header "+HeaderOccurredAt, err)
	}
	m.ContentType = get(RawContentType)
	for k, vs := range r.Headers {
		switch k {
		case RawMessageID, RawType, RawContentType, HeaderKey, HeaderVersion, HeaderOccurredAt:
			continue
		}
		if brokerHeader(k) || len(vs) == 0 || (ce != "" && cloudevents.Written(ce, k)) {
			continue
		}
		m.SetHeader(k, vs[0])
	}
	return m, nil
}

// fromEvent decodes a delivery that carries CloudEvents attributes (with
// prefix ce) instead of Courier's headers. The content type is the
// content-type property, else the datacontenttype attribute.
func (c Config) fromEvent(r broker.Raw, ce string, get func(string) string) (courier.Message, error) {
	m, err := cloudevents.Decode(ce, get)
	if err != nil {
		return courier.Message{}, err
	}
	m.Topic, m.Payload = c.Topic(r.Subject), r.Data
	if m.ContentType = get(RawContentType); m.ContentType == "" {
		m.ContentType = get(ce + cloudevents.AttrDataContentType)
	}
	for k, vs := range r.Headers {
		switch k {
		case RawMessageID, RawType, RawContentType, HeaderKey, HeaderOccurredAt:
			continue
		}
		if brokerHeader(k) || len(vs) == 0 || cloudevents.Written(ce, k) {
			continue
		}
		m.SetHeader(k, vs[0])
	}
	return m, nil
}
