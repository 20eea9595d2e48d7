package nats

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/internal/group"
	"github.com/courier-go/courier/internal/setting"
)

// The defaults of the zero fields of Config, PublisherConfig,
// SubscriberConfig and StreamConfig.
const (
	DefaultSubjectPrefix = "courier."
	DefaultStream        = "COURIER"
	DefaultAckTimeout    = 5 * time.Second
	DefaultMaxPending    = 16384
	DefaultMaxBatches    = 16
	DefaultBatchTime     = 4 * time.Millisecond
	DefaultAckWait       = 30 * time.Second
	DefaultMaxAckPending = 1000
	DefaultPrefetch      = 100
	DefaultDuplicates    = 2 * time.Minute
	// DefaultMemberHeartbeat and DefaultMemberTimeout are
	// SubscriberConfig's, for Partitions.
	DefaultMemberHeartbeat = group.DefaultHeartbeat
	DefaultMemberTimeout   = group.DefaultTimeout
)

// maxLookup bounds one lookup of the stream that binds a subject (see
// PublisherConfig.AckTimeout).
const maxLookup = time.Second

// Config maps topics to subjects. The zero value uses DefaultSubjectPrefix.
type Config struct {
	// SubjectPrefix is prepended to a message's topic to form its subject:
	// topic "orders" becomes "courier.orders" by default. Set NoPrefix to use
	// topics as subjects unchanged. Default DefaultSubjectPrefix
	// ("courier.").
	SubjectPrefix string
	// NoPrefix makes subjects equal to topics. Default false.
	NoPrefix bool
	// KeySubjects makes a message's key the last token of its subject:
	// topic "orders" and key "o-42" become "courier.orders.o-42" (see
	// KeyToken for keys that are not a subject token as they are). A
	// subscription can then share the keys among the instances of a
	// consumer (SubscriberConfig.Partitions), which partitions them by
	// that token. Publishers and subscribers of a stream must agree on it:
	// a subscriber with KeySubjects listens on "courier.orders.*", one
	// without on "courier.orders". The default stream, capturing
	// "courier.>", takes both. Default false.
	KeySubjects bool
}

func (c Config) prefix() string {
	if c.NoPrefix {
		return ""
	}
	if c.SubjectPrefix == "" {
		return DefaultSubjectPrefix
	}
	return c.SubjectPrefix
}

// Validate returns an error naming the field when c cannot map topics to
// valid subjects: a SubjectPrefix beside NoPrefix, or one holding white
// space or a wildcard (* or >), which would make every message's subject
// invalid and every message a dead letter.
func (c Config) Validate() error {
	switch {
	case c.NoPrefix && c.SubjectPrefix != "":
		return fmt.Errorf("nats: Config.SubjectPrefix is %q and NoPrefix is set: set one of them", c.SubjectPrefix)
	case strings.ContainsAny(c.SubjectPrefix, " \t\r\n*>"):
		return fmt.Errorf("nats: Config.SubjectPrefix %q holds white space or a wildcard: use dot-separated tokens such as \"shop.\"", c.SubjectPrefix)
	}
	return nil
}

// Subject returns the subject a topic is published on, without the key
// token KeySubjects adds (see MessageSubject).
func (c Config) Subject(topic string) string { return c.prefix() + topic }

// MessageSubject returns the subject a message of topic and key is
// published on: Subject(topic), followed by the key's token when
// KeySubjects is set.
func (c Config) MessageSubject(topic, key string) string {
	if !c.KeySubjects {
		return c.Subject(topic)
	}
	return c.Subject(topic) + "." + KeyToken(key)
}

// Filter returns the subject filter that receives every message of topic:
// Subject(topic), or Subject(topic)+".*" with KeySubjects.
func (c Config) Filter(topic string) string {
	if !c.KeySubjects {
		return c.Subject(topic)
	}
	return c.Subject(topic) + ".*"
}

// Subjects returns the wildcard that covers every topic: "courier.>" by
// default, ">" without a prefix.
func (c Config) Subjects() string { return c.prefix() + ">" }

// Topic returns the topic a subject belongs to (with KeySubjects, its last
// token, the key's, left out).
func (c Config) Topic(subject string) string {
	if c.KeySubjects {
		if i := strings.LastIndexByte(subject, '.'); i >= 0 {
			subject = subject[:i]
		}
	}
	return strings.TrimPrefix(subject, c.prefix())
}

// PublisherConfig tunes a Publisher. Zero fields take the defaults given;
// negative ones are refused.
type PublisherConfig struct {
	Config
	// AckTimeout bounds the wait for each acknowledgement. Default
	// DefaultAckTimeout (5s). A lookup of the stream that binds a subject
	// (see Publisher.Publish) is bounded by the smaller of AckTimeout and
	// 1s.
	AckTimeout time.Duration
	// MaxPending caps unacknowledged publishes on the connection, in
	// messages; Publish waits for room beyond it. Default
	// DefaultMaxPending (16384).
	MaxPending int
	// CloudEvents, if set, adds the CloudEvents attributes of the binary
	// content mode to every message, next to Courier's headers (see the
	// package documentation). Its Source is required. Default nil: off.
	CloudEvents *cloudevents.Config
	// MaxBatches caps the atomic batches the Publisher has open at once,
	// over all its Publish calls, each the run of one key (see
	// Publisher.KeepsKeyOrder). Default DefaultMaxBatches (16): a server
	// takes at most 50 open atomic batches per stream and 1,000 in all
	// unless configured otherwise, and the relays of a stream share them
	// (three relays take 48).
	MaxBatches int
	// BatchTime is what one atomic batch is taken to cost the server
	// until the Publisher has measured its own. Publish sends a call's
	// longest runs of one key's messages as atomic batches and every other
	// run in rounds (every key's next message at once, each waiting for
	// the acknowledgement of the one before), splitting them where the
	// batches' time plus the rounds' (the longest run left to them, a
	// round trip each) is least, both as measured on the Publisher's own
	// batches and rounds: one hot key's run of 1,000 goes as a batch, 10
	// keys of 100 each go as batches or in 100 rounds as the server and
	// the network make them cost (see Publisher.Publish). Default
	// DefaultBatchTime (4 ms: measured on nats-server 2.15.2, 3 to 6 ms
	// for a small batch on one node and on an R3 stream alike, while a
	// round trip took 0.15 to 0.4 ms on one node over loopback and about
	// 1 ms on R3).
	BatchTime time.Duration
	// NoAtomicBatches turns atomic batches off: KeepsKeyOrder reports
	// false, and the relay publishes a key's messages one round trip
	// apart, as it does on servers older than 2.12. Default false.
	NoAtomicBatches bool
}

func (c *PublisherConfig) setDefaults() {
	setting.Default(&c.AckTimeout, DefaultAckTimeout)
	setting.Default(&c.MaxPending, DefaultMaxPending)
	setting.Default(&c.MaxBatches, DefaultMaxBatches)
	setting.Default(&c.BatchTime, DefaultBatchTime)
}

func (c *PublisherConfig) validate() error {
	err := setting.First(
		c.Config.Validate(),
		setting.Positive("nats: PublisherConfig.AckTimeout", c.AckTimeout, DefaultAckTimeout),
		setting.Positive("nats: PublisherConfig.MaxPending", c.MaxPending, DefaultMaxPending),
		setting.Positive("nats: PublisherConfig.MaxBatches", c.MaxBatches, DefaultMaxBatches),
		setting.Positive("nats: PublisherConfig.BatchTime", c.BatchTime, DefaultBatchTime),
	)
	if err == nil && c.CloudEvents != nil {
		err = c.CloudEvents.Check("nats: PublisherConfig.CloudEvents")
	}
	return err
}

// Validate reports whether NewPublisher would accept c: nil, or the error
// it would return, naming the field and the fix. Zero fields take their
// defaults first, as in NewPublisher.
func (c PublisherConfig) Validate() error {
	c.setDefaults()
	return c.validate()
}

// SubscriberConfig describes a durable JetStream consumer. Zero fields take
// the defaults given; negative ones are refused.
type SubscriberConfig struct {
	Config
	// Stream to consume from. Default DefaultStream ("COURIER").
	Stream string
	// Consumer is the durable consumer's name, shared by every instance of
	// one consuming service so they split the messages. Required.
	Consumer string
	// Topics to receive; empty means every topic under the subject prefix.
	// More than one topic needs nats-server 2.10 or later.
	Topics []string
	// AckWait is how long the server waits for an acknowledgement (or an
	// Extend) before redelivering. Default DefaultAckWait (30s).
	AckWait time.Duration
	// MaxAckPending caps unacknowledged deliveries across all instances, in
	// messages. Default DefaultMaxAckPending (1000). 1 keeps a
	// subscription's messages strictly in stream order even when the
	// server crashes with deliveries in flight (they are redelivered
	// before anything newer), at the cost of one message at a time.
	MaxAckPending int
	// Prefetch is how many messages each instance pulls ahead (with
	// Partitions, from each partition it consumes). Default
	// DefaultPrefetch (100).
	Prefetch int
	// Partitions, when set, shares the keys among the instances of the
	// consumer: the subscription's messages are spread by key over this
	// many partitions, and each partition is consumed by one instance at
	// a time, which gets a key's messages in order; the partitions are
	// spread evenly over the instances alive and move when one joins,
	// leaves or falls silent (see MemberTimeout). With
	// inbox.ConsumerConfig.KeepOrder, a key's messages are then applied
	// in order across every instance. Make it at least the most instances
	// you will run (16 is a good start); every instance of the consumer
	// must use the same number. It needs Config.KeySubjects (on the
	// publishers too), Topics, and nats-server 2.10 or later. See the
	// package documentation (Key partitions). Default 0: every instance
	// takes any message of the durable consumer.
	Partitions int
	// MemberHeartbeat is how often an instance announces itself to the
	// others of its consumer, with Partitions. Default
	// DefaultMemberHeartbeat (1s).
	MemberHeartbeat time.Duration
	// MemberTimeout is how long an instance unheard of keeps its
	// partitions, with Partitions: a killed or frozen instance's
	// partitions move this long after its last announcement. At least
	// twice MemberHeartbeat. Default DefaultMemberTimeout (5s).
	MemberTimeout time.Duration
	// Logger receives the subscriber's logs (with Partitions: the
	// partitions it takes and gives up). Default: discard.
	Logger *slog.Logger
}

func (c *SubscriberConfig) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	setting.Default(&c.Stream, DefaultStream)
	setting.Default(&c.AckWait, DefaultAckWait)
	setting.Default(&c.MaxAckPending, DefaultMaxAckPending)
	setting.Default(&c.Prefetch, DefaultPrefetch)
	setting.Default(&c.MemberHeartbeat, DefaultMemberHeartbeat)
	setting.Default(&c.MemberTimeout, DefaultMemberTimeout)
}

func (c *SubscriberConfig) validate() error {
	if c.Consumer == "" {
		return errors.New("nats: SubscriberConfig.Consumer is empty: name the consuming service, e.g. \"billing\"")
	}
	if err := setting.First(
		c.Config.Validate(),
		setting.Positive("nats: SubscriberConfig.AckWait", c.AckWait, DefaultAckWait),
		setting.Positive("nats: SubscriberConfig.MaxAckPending", c.MaxAckPending, DefaultMaxAckPending),
		setting.Positive("nats: SubscriberConfig.Prefetch", c.Prefetch, DefaultPrefetch),
	); err != nil || c.Partitions == 0 {
		return err
	}
	if err := c.groupConfig().Check("nats: SubscriberConfig"); err != nil {
		return err
	}
	switch {
	case !c.KeySubjects:
		return errors.New("nats: SubscriberConfig.Partitions needs Config.KeySubjects, on this subscriber and on the publishers of its topics: the partitions are made from the key's subject token")
	case len(c.Topics) == 0:
		return errors.New("nats: SubscriberConfig.Partitions needs Topics: list the topics to receive, e.g. []string{\"orders\"}")
	}
	for _, t := range c.Topics {
		if strings.Contains(t, ">") {
			return fmt.Errorf("nats: SubscriberConfig.Topics holds %q: with Partitions, a topic may hold * wildcards but not >", t)
		}
	}
	return nil
}

// groupConfig is the group of the consumer's instances, with Partitions.
func (c *SubscriberConfig) groupConfig() group.Config {
	return group.Config{Name: c.Consumer, Partitions: c.Partitions, Heartbeat: c.MemberHeartbeat, Timeout: c.MemberTimeout, Logger: c.Logger}
}

// Validate reports whether NewSubscriber would accept c: nil, or the error
// it would return, naming the field and the fix. Zero fields take their
// defaults first, as in NewSubscriber.
func (c SubscriberConfig) Validate() error {
	c.setDefaults()
	return c.validate()
}

// StreamConfig describes the stream EnsureStream creates. Zero fields take
// the defaults given; negative ones are refused.
type StreamConfig struct {
	// Name of the stream. Default DefaultStream ("COURIER").
	Name string
	// Description is the stream's description when EnsureStream creates
	// it (a program can mark the streams it made with it). Default none.
	Description string
	// Subjects the stream captures. Default: Config.Subjects() of the
	// publisher's subject mapping ("courier.>").
	Subjects []string
	// Duplicates is JetStream's deduplication window for Nats-Msg-Id.
	// Default DefaultDuplicates (2 minutes); make it longer than a relay's
	// lease so that a message re-published after a relay crash is dropped
	// as a duplicate.
	Duplicates time.Duration
	// MaxAge discards messages older than this. Default 0: kept until
	// other limits apply.
	MaxAge time.Duration
	// Memory stores the stream in memory instead of files. Default false.
	Memory bool
	// NoAtomicBatches leaves atomic batch publish off. By default a stream
	// created on nats-server 2.12 or later allows it (allow_atomic), so
	// that a Publisher sends a key's run of messages as atomic batches (see
	// Publisher.KeepsKeyOrder); older servers know no such setting and
	// their streams are created without it.
	NoAtomicBatches bool
	// Replicas is how many servers of a cluster hold the stream: 3 (or 5)
	// in production, so that an acknowledgement means a quorum stored the
	// message and the stream survives the loss of a server. Default 0: the
	// server's, 1; a single server takes only 1.
	Replicas int
}

func (c *StreamConfig) setDefaults(mapping Config) {
	setting.Default(&c.Name, DefaultStream)
	if len(c.Subjects) == 0 {
		c.Subjects = []string{mapping.Subjects()}
	}
	setting.Default(&c.Duplicates, DefaultDuplicates)
}

func (c *StreamConfig) validate() error {
	if err := setting.Positive("nats: StreamConfig.Duplicates", c.Duplicates, DefaultDuplicates); err != nil {
		return err
	}
	switch {
	case c.MaxAge < 0:
		return fmt.Errorf("nats: StreamConfig.MaxAge is %s: use 0 (no age limit) or more", c.MaxAge)
	case c.Replicas < 0:
		return fmt.Errorf("nats: StreamConfig.Replicas is %d: use 1 to 5, or 0 for the server's default (1)", c.Replicas)
	}
	return nil
}

// Validate reports whether EnsureStream would accept c with the subject
// mapping mapping: nil, or the error it would return, naming the field and
// the fix. Zero fields take their defaults first, as in EnsureStream.
func (c StreamConfig) Validate(mapping Config) error {
	if err := mapping.Validate(); err != nil {
		return err
	}
	c.setDefaults(mapping)
	return c.validate()
}
