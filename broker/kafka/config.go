package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/internal/redact"
	"github.com/courier-go/courier/internal/setting"
)

// DefaultPort is the port of a broker address given without one.
const DefaultPort = "9092"

// The defaults of the zero fields of PublisherConfig and SubscriberConfig.
const (
	// DefaultAckTimeout is the default PublisherConfig.AckTimeout.
	DefaultAckTimeout = 30 * time.Second
	// DefaultMaxMessageBytes is the default PublisherConfig.MaxMessageBytes:
	// franz-go's default batch size, just under Kafka's default
	// message.max.bytes (1,048,588), so that with Kafka's defaults the
	// client refuses a record too large before the broker would.
	DefaultMaxMessageBytes = 1_000_012
	// DefaultPrefetch is the default SubscriberConfig.Prefetch.
	DefaultPrefetch = 100
)

// maxMessageBytes is the largest batch franz-go produces (its
// ProducerBatchMaxBytes takes an int32; Kafka's own limits are below).
const maxMessageBytes = 1 << 30

// clientID names Courier's clients to the cluster.
const clientID = "courier"

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

// Validate returns an error naming the field when c names no cluster.
func (c Config) Validate() error {
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

// PublisherConfig tunes a Publisher. Zero fields take the defaults given;
// negative ones are refused.
type PublisherConfig struct {
	Config
	// AckTimeout bounds the wait of one Publish call for Kafka's
	// acknowledgements; messages without one by then fail with
	// broker.ErrUnavailable (the client may still deliver them later: the
	// relay publishes them again, and consumers' inboxes drop the
	// duplicate). It is also franz-go's RecordDeliveryTimeout. Default
	// DefaultAckTimeout (30s).
	AckTimeout time.Duration
	// MaxMessageBytes caps the size of a record batch in bytes, hence of
	// one record, before compression: franz-go's ProducerBatchMaxBytes, at
	// most 1 GiB. Set it at or below the smallest max.message.bytes of the
	// topics published to, so that Kafka never refuses a batch as too
	// large (see Publisher.Publish). Default DefaultMaxMessageBytes
	// (1,000,012).
	MaxMessageBytes int
	// Options are more franz-go options (TLS, SASL, client id, …), applied
	// after Courier's. Leave the producer's acks and idempotence at their
	// defaults: the relay's guarantees rest on them. Default none.
	Options []kgo.Opt
	// CloudEvents, if set, adds the CloudEvents attributes of the binary
	// content mode to every record, next to Courier's headers (see the
	// package documentation). Its Source is required. Default nil: off.
	CloudEvents *cloudevents.Config
}

func (c *PublisherConfig) setDefaults() {
	setting.Default(&c.AckTimeout, DefaultAckTimeout)
	setting.Default(&c.MaxMessageBytes, DefaultMaxMessageBytes)
}

func (c *PublisherConfig) validate() error {
	err := setting.First(
		c.Config.Validate(),
		setting.Positive("kafka: PublisherConfig.AckTimeout", c.AckTimeout, DefaultAckTimeout),
		setting.Positive("kafka: PublisherConfig.MaxMessageBytes", c.MaxMessageBytes, DefaultMaxMessageBytes),
	)
	switch {
	case err != nil:
		return err
	case c.MaxMessageBytes > maxMessageBytes:
		return fmt.Errorf("kafka: PublisherConfig.MaxMessageBytes is %d: use at most %d (and at most the topics' max.message.bytes)", c.MaxMessageBytes, maxMessageBytes)
	case c.CloudEvents != nil:
		return c.CloudEvents.Check("kafka: PublisherConfig.CloudEvents")
	}
	return nil
}

// Validate reports whether NewPublisher would accept c: nil, or the error
// it would return, naming the field and the fix. Zero fields take their
// defaults first, as in NewPublisher.
func (c PublisherConfig) Validate() error {
	c.setDefaults()
	return c.validate()
}

// SubscriberConfig describes a member of a consumer group. Zero fields take
// the defaults given; negative ones are refused.
type SubscriberConfig struct {
	Config
	// Group is the consumer group, shared by every instance of one
	// consuming service so that they split the partitions. Required.
	Group string
	// Topics are the message topics to receive (TopicPrefix is added).
	// Required.
	Topics []string
	// Prefetch caps the records fetched but not yet handed out by Next.
	// Default DefaultPrefetch (100).
	Prefetch int
	// Logger receives fetch and commit errors. Default slog.Default().
	Logger *slog.Logger
	// Options are more franz-go options (TLS, SASL, session timeout, …),
	// applied after Courier's. Do not enable auto-commit: the Subscriber
	// commits offsets itself, only for acknowledged records. Default none.
	Options []kgo.Opt
}

func (c *SubscriberConfig) setDefaults() {
	setting.Default(&c.Prefetch, DefaultPrefetch)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *SubscriberConfig) validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	switch {
	case c.Group == "":
		return errors.New("kafka: SubscriberConfig.Group is empty: name the consuming service, e.g. \"billing\"")
	case len(c.Topics) == 0:
		return errors.New("kafka: SubscriberConfig.Topics is empty: list the message topics to receive, e.g. []string{\"orders\"}")
	}
	return setting.Positive("kafka: SubscriberConfig.Prefetch", c.Prefetch, DefaultPrefetch)
}

// Validate reports whether NewSubscriber would accept c: nil, or the error
// it would return, naming the field and the fix. Zero fields take their
// defaults first, as in NewSubscriber.
func (c SubscriberConfig) Validate() error {
	c.setDefaults()
	return c.validate()
}

// TopicConfig describes a topic EnsureTopic creates. Zero fields take the
// cluster's defaults; negative ones are refused.
type TopicConfig struct {
	// Partitions of the topic: the most members of one consumer group
	// that receive at once. Default 0: the cluster's num.partitions.
	Partitions int
	// ReplicationFactor is how many brokers keep each partition. Default
	// 0: the cluster's default.replication.factor. Use 3 in production,
	// with min.insync.replicas=2 in Configs (see Durability in the package
	// documentation).
	ReplicationFactor int
	// Configs are topic settings such as "min.insync.replicas" or
	// "max.message.bytes". Default none: the cluster's.
	Configs map[string]string
}

// Validate returns an error naming the field when EnsureTopic would refuse
// c: a negative or out-of-range partition count or replication factor.
func (c TopicConfig) Validate() error {
	switch {
	case c.Partitions < 0 || c.Partitions > math.MaxInt32:
		return fmt.Errorf("kafka: TopicConfig.Partitions is %d: use 1 or more, or 0 for the cluster's num.partitions", c.Partitions)
	case c.ReplicationFactor < 0 || c.ReplicationFactor > math.MaxInt16:
		return fmt.Errorf("kafka: TopicConfig.ReplicationFactor is %d: use 1 or more (3 in production), or 0 for the cluster's default.replication.factor", c.ReplicationFactor)
	}
	return nil
}
