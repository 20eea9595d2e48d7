package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// SubscriberConfig describes a durable JetStream consumer.
type SubscriberConfig struct {
	Config
	// Stream to consume from. Default DefaultStream.
	Stream string
	// Consumer is the durable consumer's name, shared by every instance of
	// one consuming service so they split the messages. Required.
	Consumer string
	// Topics to receive; empty means every topic under the subject prefix.
	// More than one topic needs nats-server 2.10 or later.
	Topics []string
	// AckWait is how long the server waits for an acknowledgement (or an
	// Extend) before redelivering. Default 30s.
	AckWait time.Duration
	// MaxAckPending caps unacknowledged deliveries across all instances.
	// Default 1000. 1 keeps a subscription's messages strictly in stream
	// order even when the server crashes with deliveries in flight (they
	// are redelivered before anything newer), at the cost of one message at
	// a time.
	MaxAckPending int
	// Prefetch is how many messages each instance pulls ahead. Default 100.
	Prefetch int
}

// Subscriber receives messages from a durable JetStream pull consumer, which
// it creates or updates. Acknowledgements are explicit. Safe for concurrent
// use.
type Subscriber struct {
	cfg  SubscriberConfig
	iter jetstream.MessagesContext
}

var _ broker.Subscriber = (*Subscriber)(nil)

// NewSubscriber creates or updates the durable consumer and starts pulling.
func NewSubscriber(ctx context.Context, nc *natsgo.Conn, cfg SubscriberConfig) (*Subscriber, error) {
	if cfg.Consumer == "" {
		return nil, errors.New("nats: SubscriberConfig.Consumer is empty: name the consuming service, e.g. \"billing\"")
	}
	if cfg.Stream == "" {
		cfg.Stream = DefaultStream
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.MaxAckPending <= 0 {
		cfg.MaxAckPending = 1000
	}
	if cfg.Prefetch <= 0 {
		cfg.Prefetch = 100
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	cc := jetstream.ConsumerConfig{
		Durable:       cfg.Consumer,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxAckPending: cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	switch len(cfg.Topics) {
	case 0:
		cc.FilterSubject = cfg.Subjects()
	case 1:
		cc.FilterSubject = cfg.Subject(cfg.Topics[0])
	default:
		for _, t := range cfg.Topics {
			cc.FilterSubjects = append(cc.FilterSubjects, cfg.Subject(t))
		}
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, cfg.Stream, cc)
	if err != nil {
		return nil, fmt.Errorf("nats: consumer %s on stream %s: %w", cfg.Consumer, cfg.Stream, err)
	}
	// Heartbeats every 2s (nats.go's default is half the pull's 30s
	// expiry): a pull whose consumer leader died or was cut off goes
	// unanswered, and the client only pulls again after two missed
	// heartbeats, so deliveries stopped for 30s after each consumer leader
	// change in a cluster; now for 4s.
	iter, err := cons.Messages(jetstream.PullMaxMessages(cfg.Prefetch), jetstream.PullHeartbeat(2*time.Second))
	if err != nil {
		return nil, fmt.Errorf("nats: pull from consumer %s: %w", cfg.Consumer, err)
	}
	return &Subscriber{cfg: cfg, iter: iter}, nil
}

// Next implements broker.Subscriber.
func (s *Subscriber) Next(ctx context.Context) (broker.Delivery, error) {
	m, err := s.iter.Next(jetstream.NextContext(ctx))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("nats: next message: %w", err)
	}
	return &delivery{m: m}, nil
}

// Decode implements broker.Subscriber.
func (s *Subscriber) Decode(raw broker.Raw) (courier.Message, error) {
	return s.cfg.FromNATS(&natsgo.Msg{Subject: raw.Subject, Header: natsgo.Header(raw.Headers), Data: raw.Data})
}

// Close implements broker.Subscriber.
func (s *Subscriber) Close() error {
	s.iter.Stop()
	return nil
}

type delivery struct {
	m jetstream.Msg
}

func (d *delivery) Raw() broker.Raw {
	return broker.Raw{Subject: d.m.Subject(), Headers: d.m.Headers(), Data: d.m.Data()}
}

func (d *delivery) Attempt() int {
	md, err := d.m.Metadata()
	if err != nil {
		return 1
	}
	return int(md.NumDelivered)
}

// Ack does not wait for the server's confirmation: if the ack is lost, the
// message comes again and the inbox skips it as a duplicate.
func (d *delivery) Ack(context.Context) error { return d.m.Ack() }

func (d *delivery) Retry(_ context.Context, delay time.Duration) error {
	return d.m.NakWithDelay(delay)
}

func (d *delivery) Extend(context.Context) error { return d.m.InProgress() }

func (d *delivery) Drop(context.Context) error { return d.m.Term() }
