package amqp

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/internal/group"
	"github.com/courier-go/courier/internal/redact"
	"github.com/courier-go/courier/internal/setting"
)

// The defaults of the zero fields of Config, PublisherConfig and
// SubscriberConfig.
const (
	DefaultExchange       = "courier"
	DefaultDialTimeout    = 5 * time.Second
	DefaultHeartbeat      = 10 * time.Second
	DefaultBackoffInitial = 100 * time.Millisecond
	DefaultBackoffMax     = 5 * time.Second
	DefaultBackoffJitter  = 0.2
	DefaultChannels       = 2
	DefaultConfirmTimeout = 10 * time.Second
	DefaultPrefetch       = 100
)

// Config says where the broker is and how topics map to routing keys. Zero
// fields take the defaults given; negative ones are refused.
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
	// DialTimeout bounds connecting and the AMQP handshake. Default
	// DefaultDialTimeout (5s); the URL's connection_timeout parameter
	// (milliseconds) wins.
	DialTimeout time.Duration
	// Heartbeat is the AMQP heartbeat interval: a connection silent for two
	// of them counts as lost. It counts in whole seconds (the broker's
	// unit), so at least 1s. Default DefaultHeartbeat (10s); with
	// SubscriberConfig.Partitions, half of MemberTimeout. ParseURL reads
	// it from the URL's heartbeat parameter; URL itself must not hold one.
	Heartbeat time.Duration
	// Backoff spaces reconnection attempts after a connection loss. Each
	// zero field takes its default: DefaultBackoffInitial (100ms),
	// DefaultBackoffMax (5s, or Initial when that is longer),
	// DefaultBackoffJitter (0.2).
	Backoff courier.Backoff
}

// ParseURL reads a Config from an amqp:// or amqps:// URL. Query
// parameters exchange (default "courier"), prefix (the routing key prefix,
// default none) and heartbeat (Config.Heartbeat in seconds, at least 1)
// are Courier's and are removed from Config.URL; the others
// (connection_timeout, …) are amqp091-go's and stay:
//
//	amqp://guest:guest@127.0.0.1:5672/?exchange=events&prefix=shop.&heartbeat=2
//
// The Config's other fields have their defaults, except Heartbeat without
// the parameter: it stays 0, so that what uses the Config takes its own
// default (a subscriber with Partitions beats more often than a
// publisher).
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
	if q.Has("heartbeat") {
		n, err := strconv.ParseUint(q.Get("heartbeat"), 10, 16)
		if err != nil || n == 0 {
			return Config{}, fmt.Errorf("amqp: URL: heartbeat %q: use whole seconds from 1 (0 would turn heartbeats off, and a broker or consumer that hangs would go unnoticed), or leave it out for the default", q.Get("heartbeat"))
		}
		cfg.Heartbeat = time.Duration(n) * time.Second
	}
	q.Del("exchange")
	q.Del("prefix")
	q.Del("heartbeat")
	u.RawQuery = q.Encode()
	cfg.URL = u.String()
	if _, err := amqp091.ParseURI(cfg.URL); err != nil {
		return Config{}, fmt.Errorf("amqp: URL: %w", err)
	}
	heartbeat := cfg.Heartbeat
	cfg.setDefaults()
	cfg.Heartbeat = heartbeat // its user's default, unless the URL said
	return cfg, nil
}

func (c *Config) setDefaults() {
	setting.Default(&c.Exchange, DefaultExchange)
	setting.Default(&c.DialTimeout, DefaultDialTimeout)
	setting.Default(&c.Heartbeat, DefaultHeartbeat)
	c.Backoff = c.Backoff.Or(courier.Backoff{Initial: DefaultBackoffInitial, Max: max(DefaultBackoffMax, c.Backoff.Initial), Jitter: DefaultBackoffJitter})
}

func (c *Config) validate() error {
	if c.URL == "" {
		return errors.New("amqp: Config.URL is empty: set it to the broker's URL, such as amqp://guest:guest@127.0.0.1:5672/")
	}
	if err := setting.First(
		setting.Positive("amqp: Config.DialTimeout", c.DialTimeout, DefaultDialTimeout),
		setting.Positive("amqp: Config.Heartbeat", c.Heartbeat, DefaultHeartbeat),
	); err != nil {
		return err
	}
	if c.Heartbeat < time.Second {
		return fmt.Errorf("amqp: Config.Heartbeat is %s: RabbitMQ counts heartbeats in whole seconds, and under 1s the client takes the server's (60s by default): use 1s or more", c.Heartbeat)
	}
	if err := c.Backoff.Validate("amqp: Config.Backoff"); err != nil {
		return fmt.Errorf("%w (a zero field takes its default: %s..%s, jitter %g)", err, DefaultBackoffInitial, DefaultBackoffMax, DefaultBackoffJitter)
	}
	if _, err := amqp091.ParseURI(c.URL); err != nil {
		return fmt.Errorf("amqp: Config.URL: %w", err)
	}
	if u, err := url.Parse(c.URL); err == nil && u.Query().Has("heartbeat") {
		return errors.New("amqp: Config.URL holds a heartbeat parameter, which would win over Config.Heartbeat: set Config.Heartbeat instead (ParseURL moves the parameter there)")
	}
	return nil
}

// Validate reports whether c can connect: nil, or an error naming the
// field and the fix. Zero fields take their defaults first, as in
// NewPublisher, NewSubscriber and EnsureTopology.
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}

// RoutingKey returns the routing key a topic is published with.
func (c Config) RoutingKey(topic string) string { return c.RoutingKeyPrefix + topic }

// Topic returns the topic a routing key belongs to.
func (c Config) Topic(routingKey string) string {
	return strings.TrimPrefix(routingKey, c.RoutingKeyPrefix)
}

// PublisherConfig tunes a Publisher. Zero fields take the defaults given;
// negative ones are refused.
type PublisherConfig struct {
	Config
	// Channels is how many channels in confirm mode the Publisher keeps,
	// each publishing one batch at a time. Default DefaultChannels (2, the
	// relay's default concurrency).
	Channels int
	// ConfirmTimeout bounds one Publish call, from the first message sent
	// to the last confirm. Messages not confirmed by then fail with
	// broker.ErrUnavailable. Default DefaultConfirmTimeout (10s).
	ConfirmTimeout time.Duration
	// MaxMessageSize is the broker's max_message_size in bytes, if known:
	// a message whose payload is larger is refused for good before it is
	// sent (broker.ErrRejected), and the other messages of its batch go
	// through. Default 0: learned from the first message RabbitMQ refuses
	// for its size, which closes the channel under the rest of that batch
	// (they fail as broker.ErrUnavailable and are retried).
	MaxMessageSize int64
	// CloudEvents, if set, adds the CloudEvents attributes of the binary
	// content mode to every message, next to Courier's headers (see the
	// package documentation). Its Source is required. Default nil: off.
	CloudEvents *cloudevents.Config
}

func (c *PublisherConfig) setDefaults() {
	c.Config.setDefaults()
	setting.Default(&c.Channels, DefaultChannels)
	setting.Default(&c.ConfirmTimeout, DefaultConfirmTimeout)
}

func (c *PublisherConfig) validate() error {
	if err := setting.First(
		c.Config.validate(),
		setting.Positive("amqp: PublisherConfig.Channels", c.Channels, DefaultChannels),
		setting.Positive("amqp: PublisherConfig.ConfirmTimeout", c.ConfirmTimeout, DefaultConfirmTimeout),
	); err != nil {
		return err
	}
	switch {
	case c.MaxMessageSize < 0:
		return fmt.Errorf("amqp: PublisherConfig.MaxMessageSize is %d: use 0 (learned) or the broker's max_message_size", c.MaxMessageSize)
	case c.CloudEvents != nil:
		return c.CloudEvents.Check("amqp: PublisherConfig.CloudEvents")
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

// SubscriberConfig describes a consumer of one queue. Zero fields take the
// defaults given; negative ones are refused.
type SubscriberConfig struct {
	Config
	// Queue to consume, declared beforehand (see EnsureTopology).
	// Required.
	Queue string
	// Prefetch is how many unacknowledged deliveries RabbitMQ hands this
	// subscriber ahead (QoS prefetch count). Default DefaultPrefetch (100).
	// Deliveries held by Retry count against it.
	Prefetch int
	// ConsumerTag names the consumer in RabbitMQ's management tools.
	// Default: one the server generates (with Partitions: the instance's
	// member id).
	ConsumerTag string
	// Partitions, when set, shares the keys among the instances of the
	// consumer: Queue's messages are spread by key over this many
	// partition queues (declared with Topology.Partitions, the same
	// number), each consumed by one instance at a time, which gets a key's
	// messages in order; the partitions are spread evenly over the
	// instances alive and move when one joins, leaves or falls silent (see
	// MemberTimeout). With inbox.ConsumerConfig.KeepOrder, a key's messages
	// are then applied in order across every instance. Prefetch applies to
	// each partition held. See the package documentation (Key partitions).
	// Default 0: consume Queue itself.
	Partitions int
	// MemberHeartbeat is how often an instance announces itself to the
	// others of its consumer, with Partitions. Default
	// DefaultMemberHeartbeat (1s).
	MemberHeartbeat time.Duration
	// MemberTimeout is how long an instance unheard of keeps its
	// partitions, with Partitions: a killed or frozen instance's
	// partitions move to the others this long after its last
	// announcement, and they receive them once RabbitMQ has closed its
	// connection (two missed Config.Heartbeats: with Partitions, Heartbeat
	// defaults to half of MemberTimeout, in whole seconds, at least 1s).
	// At least twice MemberHeartbeat. Default DefaultMemberTimeout (5s).
	MemberTimeout time.Duration
	// Logger receives the subscriber's logs (with Partitions: the
	// partitions it takes and gives up). Default: discard.
	Logger *slog.Logger
}

// DefaultMemberHeartbeat and DefaultMemberTimeout are SubscriberConfig's,
// for Partitions.
const (
	DefaultMemberHeartbeat = group.DefaultHeartbeat
	DefaultMemberTimeout   = group.DefaultTimeout
)

func (c *SubscriberConfig) setDefaults() {
	setting.Default(&c.MemberHeartbeat, DefaultMemberHeartbeat)
	setting.Default(&c.MemberTimeout, DefaultMemberTimeout)
	if c.Partitions > 0 {
		// RabbitMQ hands a dead instance's partitions on once it closed
		// the instance's connection, after two missed heartbeats: about
		// when the others notice it gone.
		setting.Default(&c.Heartbeat, max(time.Second, (c.MemberTimeout/2).Truncate(time.Second)))
	}
	c.Config.setDefaults()
	setting.Default(&c.Prefetch, DefaultPrefetch)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

func (c *SubscriberConfig) validate() error {
	if c.Queue == "" {
		return errors.New("amqp: SubscriberConfig.Queue is empty: name the queue to consume, declared with EnsureTopology")
	}
	if err := setting.First(
		c.Config.validate(),
		setting.Positive("amqp: SubscriberConfig.Prefetch", c.Prefetch, DefaultPrefetch),
	); err != nil || c.Partitions == 0 {
		return err
	}
	return c.groupConfig().Check("amqp: SubscriberConfig")
}

// groupConfig is the group of the consumer's instances, with Partitions.
func (c *SubscriberConfig) groupConfig() group.Config {
	return group.Config{Name: c.Queue, Partitions: c.Partitions, Heartbeat: c.MemberHeartbeat, Timeout: c.MemberTimeout, Logger: c.Logger}
}

// Validate reports whether NewSubscriber would accept c: nil, or the error
// it would return before connecting, naming the field and the fix. Zero
// fields take their defaults first, as in NewSubscriber.
func (c SubscriberConfig) Validate() error {
	c.setDefaults()
	return c.validate()
}
