package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/broker/kafka"
	couriernats "github.com/courier-go/courier/broker/nats"
)

// The consumers section's brokers: where its instances share the keys of
// the topic, each readied fresh for one measurement and removed after it.

// consBroker is a broker of the consumers section.
type consBroker struct {
	name  string // as in -consumers-brokers; keys the results
	label string // as printed in tables
	// open readies a fresh destination on the broker for one measurement
	// of env.
	open func(b *Bench, ctx context.Context, env *Env, s consSettings) (*consTarget, error)
}

// consBrokers are the section's brokers, in the order of its table.
var consBrokers = []consBroker{
	{name: "nats", label: "NATS JetStream, current server (Partitions)", open: (*Bench).natsConsTarget},
	{name: "kafka", label: "Kafka (kfake, in-process fake; consumer group)", open: (*Bench).kafkaConsTarget},
	{name: "amqp", label: "RabbitMQ (Partitions)", open: (*Bench).amqpConsTarget},
}

// consBrokerNames are the names of consBrokers, the -consumers-brokers
// default.
var consBrokerNames = func() []string {
	names := make([]string, len(consBrokers))
	for i, br := range consBrokers {
		names[i] = br.name
	}
	return names
}()

// consBrokerByName returns the consBroker named name.
func consBrokerByName(name string) (consBroker, error) {
	for _, br := range consBrokers {
		if br.name == name {
			return br, nil
		}
	}
	return consBroker{}, fmt.Errorf("unknown broker %q (want %s)", name, strings.Join(consBrokerNames, ", "))
}

// The instances' group timing: each announces itself every consHeartbeat,
// and one unheard of for consTimeout loses its partitions (Kafka: the
// session timeout and heartbeat interval). Shorter than the libraries'
// defaults (1 s and 5 s) so that a measurement's instances share the
// partitions out within a second or two; no instance is frozen or killed
// here.
const (
	consHeartbeat = 250 * time.Millisecond
	consTimeout   = 2 * time.Second
	// consConsumer names the consumer (NATS consumer, Kafka group, inbox
	// consumer) whose instances share the keys.
	consConsumer = "bench"
)

// consTarget is one measurement's broker side.
type consTarget struct {
	// pub publishes the messages.
	pub broker.Publisher
	// spec is how an instance subscribes (consSpec.subscribe).
	spec consSpec
	// ready waits until the broker holds n messages for the instances
	// (NATS: sourced into the partition stream); nil: a publish that was
	// acknowledged is enough.
	ready func(ctx context.Context, n int) error
	// cpu reads the broker's CPU; nil: not read.
	cpu cpuProbe
	// inProcess: the broker runs in this process (kfake), whose CPU the
	// bench process's counts.
	inProcess bool
	// close removes what open made, once the instances are gone.
	close func()
}

// consLogger logs the instances' warnings and errors to stderr.
var consLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// natsConsTarget makes a stream (couriernats.EnsureStream) on the current
// nats-server the bench starts, with keys as the subjects' last token
// (KeySubjects); each instance's subscriber shares the keys with
// SubscriberConfig.Partitions, whose partition stream the first one makes.
func (b *Bench) natsConsTarget(ctx context.Context, env *Env, s consSettings) (*consTarget, error) {
	g, err := b.startedNATS(ctx, 1)
	if err != nil {
		return nil, err
	}
	mapping := couriernats.Config{SubjectPrefix: env.Prefix, KeySubjects: true}
	stream := strings.ToUpper("BENCH_CONSUMERS_" + env.token)
	spec := consSpec{Kind: "nats", URL: g.url, Stream: stream, Prefix: env.Prefix, Partitions: s.partitions, Heartbeat: s.heartbeat, Timeout: s.timeout}
	parts := couriernats.PartitionStream(stream, consConsumer)
	nc, err := couriernats.Connect(g.url)
	if err != nil {
		return nil, err
	}
	if err := couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: stream}); err != nil {
		nc.Close()
		return nil, err
	}
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &consTarget{
		pub:  pub,
		spec: spec,
		ready: func(ctx context.Context, n int) error {
			err := waitFor(ctx, time.Minute, 10*time.Millisecond, func() (bool, error) {
				held, err := streamCount(ctx, nc, parts)
				return held >= uint64(n), err
			})
			if err != nil {
				return fmt.Errorf("partition stream %s: %w", parts, err)
			}
			return nil
		},
		cpu: g.probe,
		close: func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				logf("warning: delete streams %s and %s: %v", parts, stream, err)
				return
			}
			for _, name := range []string{parts, stream} { // the sourcing stream first
				if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
					logf("warning: delete stream %s: %v", name, err)
				}
			}
		},
	}, nil
}

// closingSubscriber is a subscriber that also closes its connection.
type closingSubscriber struct {
	broker.Subscriber
	also func()
}

// Close implements broker.Subscriber.
func (c closingSubscriber) Close() error {
	err := c.Subscriber.Close()
	c.also()
	return err
}

// SharesKeys implements broker.KeySharer.
func (c closingSubscriber) SharesKeys() bool { return broker.SharesKeys(c.Subscriber) }

// Partitions implements broker.KeySharer.
func (c closingSubscriber) Partitions() []int { return partitionsOf(c.Subscriber) }

// partitionsOf returns the partitions sub consumes now, nil when it shares
// no keys.
func partitionsOf(sub broker.Subscriber) []int {
	if k, ok := sub.(broker.KeySharer); ok {
		return k.Partitions()
	}
	return nil
}

// kafkaConsTarget starts a fresh kfake cluster in this process (one broker,
// in memory) with a topic of s.partitions partitions; the instances are
// members of one consumer group, which shares the partitions among them.
func (b *Bench) kafkaConsTarget(_ context.Context, _ *Env, s consSettings) (*consTarget, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(s.partitions), Topic), kfake.GroupMinSessionTimeout(s.timeout))
	if err != nil {
		return nil, fmt.Errorf("start kfake: %w", err)
	}
	cfg, err := kafka.ParseURL("kafka://" + strings.Join(c.ListenAddrs(), ","))
	if err != nil {
		c.Close()
		return nil, err
	}
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Config: cfg})
	if err != nil {
		c.Close()
		return nil, err
	}
	return &consTarget{
		pub:       pub,
		spec:      consSpec{Kind: "kafka", Brokers: cfg.Brokers, Partitions: s.partitions, Heartbeat: s.heartbeat, Timeout: s.timeout},
		inProcess: true,
		close: func() {
			pub.Close()
			c.Close()
		},
	}, nil
}

// amqpConsTarget declares, on the -amqp server, a fresh exchange and the
// partitions of a fresh queue (amqp.EnsureTopology with Partitions: a
// consistent-hash exchange feeding s.partitions quorum queues with a
// single active consumer); each instance's subscriber shares them with
// SubscriberConfig.Partitions. An unreachable server, or one without the
// consistent-hash plugin, is errNotMeasured.
func (b *Bench) amqpConsTarget(ctx context.Context, env *Env, s consSettings) (*consTarget, error) {
	if b.cfg.amqpURL == "" {
		return nil, errNotMeasured{"no RabbitMQ URL (-amqp is empty)"}
	}
	exchange, queue := "bench_consumers_"+env.token, "bench_consumers_"+env.token+"_q"
	u, err := url.Parse(b.cfg.amqpURL)
	if err != nil {
		return nil, errNotMeasured{fmt.Sprintf("-amqp is not a URL: %v", err)}
	}
	q := u.Query()
	q.Set("exchange", exchange)
	u.RawQuery = q.Encode()
	cfg, err := amqp.ParseURL(u.String())
	if err != nil {
		return nil, errNotMeasured{fmt.Sprintf("-amqp: %v", err)}
	}
	cleanup := func() { deleteAMQPPartitions(cfg, exchange, queue, s.partitions) }
	topo := amqp.Topology{Queue: queue, Topics: []string{Topic}, Partitions: s.partitions}
	if err := amqp.EnsureTopology(ctx, cfg, topo); err != nil {
		cleanup()
		return nil, errNotMeasured{fmt.Sprintf("cannot declare the partitions on RabbitMQ: %v", err)}
	}
	pub, err := amqp.NewPublisher(amqp.PublisherConfig{Config: cfg})
	if err != nil {
		cleanup()
		return nil, err
	}
	return &consTarget{
		pub:  pub,
		spec: consSpec{Kind: "amqp", URL: u.String(), Queue: queue, Partitions: s.partitions, Heartbeat: s.heartbeat, Timeout: s.timeout},
		cpu:  pidProbe(findOldestProcess("beam.smp")),
		close: func() {
			_ = pub.Close()
			cleanup()
		},
	}, nil
}

// consSpec is how an instance subscribes to a measurement's destination:
// what the bench's own instances do, and what an instance in a child
// process (the handover section's) is told to do the same.
type consSpec struct {
	Kind       string            `json:"kind"`              // nats, kafka or amqp
	URL        string            `json:"url,omitempty"`     // the NATS server; the RabbitMQ URL with its exchange
	Brokers    []string          `json:"brokers,omitempty"` // Kafka's
	Stream     string            `json:"stream,omitempty"`  // NATS
	Prefix     string            `json:"prefix,omitempty"`  // NATS subjects'
	Queue      string            `json:"queue,omitempty"`   // RabbitMQ's partitions
	Partitions int               `json:"partitions"`
	Heartbeat  time.Duration     `json:"heartbeat"` // the instances' group timing (Kafka: heartbeat interval and session timeout)
	Timeout    time.Duration     `json:"timeout"`
	Dial       map[string]string `json:"dial,omitempty"` // broker addresses reached through others (proxies) instead
}

// addrs returns the host:port addresses an instance connects to.
func (sp consSpec) addrs() ([]string, error) {
	if sp.Kind == "kafka" {
		return sp.Brokers, nil
	}
	u, err := url.Parse(sp.URL)
	if err != nil {
		return nil, err
	}
	return []string{u.Host}, nil
}

// via returns raw with its host replaced as Dial says.
func (sp consSpec) via(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || sp.Dial[u.Host] == "" {
		return raw
	}
	u.Host = sp.Dial[u.Host]
	return u.String()
}

// subscribe returns a new instance's subscriber, on a connection of its
// own that closing the subscriber closes.
func (sp consSpec) subscribe(ctx context.Context) (broker.Subscriber, error) {
	switch sp.Kind {
	case "nats":
		nc, err := couriernats.Connect(sp.via(sp.URL))
		if err != nil {
			return nil, err
		}
		sub, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{
			Config: couriernats.Config{SubjectPrefix: sp.Prefix, KeySubjects: true}, Stream: sp.Stream, Consumer: consConsumer,
			Topics: []string{Topic}, Partitions: sp.Partitions, MemberHeartbeat: sp.Heartbeat, MemberTimeout: sp.Timeout, Logger: consLogger,
		})
		if err != nil {
			nc.Close()
			return nil, err
		}
		return closingSubscriber{sub, nc.Close}, nil
	case "kafka":
		var d net.Dialer
		return kafka.NewSubscriber(ctx, kafka.SubscriberConfig{Config: kafka.Config{Brokers: sp.Brokers}, Group: consConsumer, Topics: []string{Topic},
			Logger: consLogger, Options: []kgo.Opt{kgo.SessionTimeout(sp.Timeout), kgo.HeartbeatInterval(sp.Heartbeat),
				kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
					return d.DialContext(ctx, network, cmp.Or(sp.Dial[host], host))
				})}})
	case "amqp":
		cfg, err := amqp.ParseURL(sp.via(sp.URL))
		if err != nil {
			return nil, err
		}
		return amqp.NewSubscriber(ctx, amqp.SubscriberConfig{Config: cfg, Queue: sp.Queue, Partitions: sp.Partitions,
			MemberHeartbeat: sp.Heartbeat, MemberTimeout: sp.Timeout, Logger: consLogger})
	}
	return nil, fmt.Errorf("unknown broker kind %q", sp.Kind)
}

// deleteAMQPPartitions deletes what a measurement declared on RabbitMQ:
// the partition queues, the consistent-hash exchange, the instances'
// members exchange and the exchange.
func deleteAMQPPartitions(cfg amqp.Config, exchange, queue string, partitions int) {
	conn, err := amqp091.Dial(cfg.URL)
	if err != nil {
		logf("warning: delete RabbitMQ queues and exchanges of %s: %v", queue, err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		logf("warning: delete RabbitMQ queues and exchanges of %s: %v", queue, err)
		return
	}
	defer ch.Close()
	var errs []error
	for p := range partitions {
		_, err := ch.QueueDelete(amqp.PartitionQueue(queue, p), false, false, false)
		errs = append(errs, err)
	}
	for _, x := range []string{amqp.PartitionExchange(queue), amqp.MembersExchange(queue), exchange} {
		errs = append(errs, ch.ExchangeDelete(x, false, false))
	}
	if err := errors.Join(errs...); err != nil {
		logf("warning: delete RabbitMQ queues and exchanges of %s: %v", queue, err)
	}
}
