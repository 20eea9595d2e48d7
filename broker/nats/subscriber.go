package nats

import (
	"context"
	"fmt"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/internal/group"
)

// pullHeartbeat is how often the server signals a pending pull is alive
// (see NewSubscriber).
const pullHeartbeat = 2 * time.Second

// Subscriber receives messages from a durable JetStream pull consumer, which
// it creates or updates; or, with SubscriberConfig.Partitions, from the
// partitions of the consumer's keys that this instance holds (see the
// package documentation, Key partitions). Acknowledgements are explicit.
// Safe for concurrent use.
type Subscriber struct {
	cfg   SubscriberConfig
	iter  jetstream.MessagesContext // without Partitions
	parts *partitions               // with Partitions
}

var (
	_ broker.Subscriber = (*Subscriber)(nil)
	_ broker.KeySharer  = (*Subscriber)(nil)
)

// NewSubscriber creates or updates the durable consumer and starts pulling.
// It fails without touching the server when cfg is invalid (see
// SubscriberConfig.Validate).
func NewSubscriber(ctx context.Context, nc *natsgo.Conn, cfg SubscriberConfig) (*Subscriber, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	if cfg.Partitions > 0 {
		parts, err := startPartitions(ctx, nc, js, cfg)
		if err != nil {
			return nil, err
		}
		return &Subscriber{cfg: cfg, parts: parts}, nil
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
		cc.FilterSubject = cfg.Filter(cfg.Topics[0])
	default:
		for _, t := range cfg.Topics {
			cc.FilterSubjects = append(cc.FilterSubjects, cfg.Filter(t))
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
	iter, err := cons.Messages(jetstream.PullMaxMessages(cfg.Prefetch), jetstream.PullHeartbeat(pullHeartbeat))
	if err != nil {
		return nil, fmt.Errorf("nats: pull from consumer %s: %w", cfg.Consumer, err)
	}
	return &Subscriber{cfg: cfg, iter: iter}, nil
}

// Next implements broker.Subscriber.
func (s *Subscriber) Next(ctx context.Context) (broker.Delivery, error) {
	if s.parts != nil {
		return s.parts.next(ctx)
	}
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

// Close implements broker.Subscriber. With Partitions, it gives up the
// partitions this instance holds at once, without waiting for deliveries
// still unsettled (they go, with the rest not acknowledged, to the
// instances that take the partitions over), and tells the others it
// leaves. Close it after the inbox consumer's Run returned.
func (s *Subscriber) Close() error {
	if s.parts != nil {
		s.parts.close()
		return nil
	}
	s.iter.Stop()
	return nil
}

// SharesKeys implements broker.KeySharer: whether SubscriberConfig.Partitions
// is set.
func (s *Subscriber) SharesKeys() bool { return s.parts != nil }

// Member returns this instance's id in its consumer's group, with
// Partitions; "" without.
func (s *Subscriber) Member() string {
	if s.parts == nil {
		return ""
	}
	return s.parts.group.Member()
}

// Partitions returns the partitions this instance consumes now, with
// Partitions; nil without.
func (s *Subscriber) Partitions() []int {
	if s.parts == nil {
		return nil
	}
	return s.parts.group.Owned()
}

type delivery struct {
	m       jetstream.Msg
	subject string        // the message's subject, when it differs from m's (a partition's)
	ticket  *group.Ticket // of its partition's pump, if any
}

func (d *delivery) Raw() broker.Raw {
	subject := d.subject
	if subject == "" {
		subject = d.m.Subject()
	}
	return broker.Raw{Subject: subject, Headers: d.m.Headers(), Data: d.m.Data()}
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
func (d *delivery) Ack(context.Context) error {
	defer d.ticket.Settle()
	return d.m.Ack()
}

func (d *delivery) Retry(_ context.Context, delay time.Duration) error {
	defer d.ticket.Settle()
	return d.m.NakWithDelay(delay)
}

func (d *delivery) Extend(context.Context) error { return d.m.InProgress() }

func (d *delivery) Drop(context.Context) error {
	defer d.ticket.Settle()
	return d.m.Term()
}
