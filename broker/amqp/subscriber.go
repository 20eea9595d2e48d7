package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/internal/group"
	"github.com/courier-go/courier/broker/wire"
)

// Subscriber consumes a queue with manual acknowledgements; or, with
// SubscriberConfig.Partitions, the partition queues this instance holds
// (see the package documentation, Key partitions). It reconnects after a
// connection loss (see Next). Safe for concurrent use; Close it when done.
type Subscriber struct {
	cfg   SubscriberConfig
	parts *partitions // with Partitions

	mu         sync.Mutex
	conn       *amqp091.Connection
	deliveries <-chan amqp091.Delivery
	closed     bool
	failures   int       // connection attempts failed in a row
	nextDial   time.Time // no attempt before

	timersMu sync.Mutex
	timers   map[*time.Timer]struct{} // pending Retry delays; nil once closed
}

var (
	_ broker.Subscriber = (*Subscriber)(nil)
	_ broker.KeySharer  = (*Subscriber)(nil)
)

// NewSubscriber connects and starts consuming cfg.Queue. It fails when cfg
// is invalid (see SubscriberConfig.Validate), the queue does not exist or
// the broker cannot be reached. With Partitions, once the broker has
// answered the check of the partition queues, a connection lost while the
// instance starts is one lost later: it connects again (Config.Backoff)
// instead of failing.
func NewSubscriber(ctx context.Context, cfg SubscriberConfig) (*Subscriber, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Subscriber{cfg: cfg, timers: make(map[*time.Timer]struct{})}
	if cfg.Partitions > 0 {
		parts, err := startPartitions(ctx, cfg)
		if err != nil {
			return nil, err
		}
		s.parts = parts
		return s, nil
	}
	if _, err := s.consume(ctx); err != nil {
		return nil, err
	}
	return s, nil
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
// Partitions; nil without. RabbitMQ delivers a partition's messages to it
// once the partition's previous consumer has gone.
func (s *Subscriber) Partitions() []int {
	if s.parts == nil {
		return nil
	}
	return s.parts.group.Owned()
}

// consume returns the current deliveries, connecting and starting the
// consumer when there are none. Attempts after a failure wait for
// Config.Backoff.
func (s *Subscriber) consume(ctx context.Context) (<-chan amqp091.Delivery, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.closed {
			return nil, errors.New("amqp: subscriber closed")
		}
		if s.deliveries != nil {
			return s.deliveries, nil
		}
		wait := time.Until(s.nextDial)
		if wait <= 0 {
			break
		}
		// Wait without the lock, so Close need not.
		s.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		s.mu.Lock()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	conn, dl, err := s.start()
	if err != nil {
		s.failures++
		s.nextDial = time.Now().Add(s.cfg.Backoff.Delay(s.failures))
		return nil, err
	}
	s.failures, s.conn, s.deliveries = 0, conn, dl
	return dl, nil
}

// start connects, sets the prefetch and starts consuming.
func (s *Subscriber) start() (*amqp091.Connection, <-chan amqp091.Delivery, error) {
	conn, err := s.cfg.dial()
	if err != nil {
		return nil, nil, broker.Unavailable(err)
	}
	fail := func(what string, err error) (*amqp091.Connection, <-chan amqp091.Delivery, error) {
		_ = conn.Close()
		var ae *amqp091.Error
		if errors.As(err, &ae) && ae.Code == amqp091.NotFound {
			return nil, nil, fmt.Errorf("amqp: %s: queue %q does not exist (%w): declare it with EnsureTopology", what, s.cfg.Queue, err)
		}
		if errors.As(err, &ae) && ae.Code == amqp091.AccessRefused {
			return nil, nil, fmt.Errorf("amqp: %s: queue %q: %w: grant the user read permission on it", what, s.cfg.Queue, err)
		}
		return nil, nil, broker.Unavailable(fmt.Errorf("amqp: %s: %w", what, err))
	}
	ch, err := conn.Channel()
	if err != nil {
		return fail("open channel", err)
	}
	if err := ch.Qos(s.cfg.Prefetch, 0, false); err != nil {
		return fail("set prefetch", err)
	}
	dl, err := ch.Consume(s.cfg.Queue, s.cfg.ConsumerTag, false, false, false, false, nil)
	if err != nil {
		return fail("consume "+s.cfg.Queue, err)
	}
	return conn, dl, nil
}

// lost forgets deliveries, which amqp091-go closed: the channel or the
// connection is gone, or the broker cancelled the consumer.
func (s *Subscriber) lost(dl <-chan amqp091.Delivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deliveries != dl {
		return // another Next got there first
	}
	if s.conn != nil {
		_ = s.conn.Close()
	}
	s.conn, s.deliveries = nil, nil
}

// Next implements broker.Subscriber. After a connection loss it connects
// again; when that fails it returns the error (wrapping
// broker.ErrUnavailable unless the queue is missing or access is refused),
// and the next call tries again after Config.Backoff.
func (s *Subscriber) Next(ctx context.Context) (broker.Delivery, error) {
	if s.parts != nil {
		d, err := s.parts.next(ctx)
		if err != nil {
			return nil, err
		}
		d.s = s
		return d, nil
	}
	for {
		dl, err := s.consume(ctx)
		if err != nil {
			return nil, err
		}
		select {
		case d, ok := <-dl:
			if !ok {
				s.lost(dl)
				continue
			}
			return &delivery{s: s, d: d}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Decode implements broker.Subscriber.
func (s *Subscriber) Decode(r broker.Raw) (courier.Message, error) { return s.cfg.Decode(r) }

// Close implements broker.Subscriber: it cancels pending Retry delays and
// closes the connection, so RabbitMQ requeues every unacknowledged
// delivery.
func (s *Subscriber) Close() error {
	s.timersMu.Lock()
	for t := range s.timers {
		t.Stop()
	}
	s.timers = nil
	s.timersMu.Unlock()
	if s.parts != nil {
		s.parts.close()
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var err error
	if s.conn != nil && !s.conn.IsClosed() {
		err = s.conn.Close()
	}
	s.conn, s.deliveries = nil, nil
	return err
}

// after runs f after d unless the subscriber closes first. It fails once
// the subscriber is closed.
func (s *Subscriber) after(d time.Duration, f func()) error {
	s.timersMu.Lock()
	defer s.timersMu.Unlock()
	if s.timers == nil {
		return errors.New("amqp: subscriber closed: the delivery comes back when its connection closes")
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		s.timersMu.Lock()
		_, live := s.timers[t]
		delete(s.timers, t)
		s.timersMu.Unlock()
		if live {
			f()
		}
	})
	s.timers[t] = struct{}{}
	return nil
}

// delivery is one AMQP delivery.
type delivery struct {
	s      *Subscriber
	d      amqp091.Delivery
	ticket *group.Ticket // of its partition's pump, if any
}

func (d *delivery) Raw() broker.Raw { return raw(&d.d) }

// Attempt is x-delivery-count+1 on quorum queues; elsewhere 2 for a
// redelivery and 1 otherwise.
func (d *delivery) Attempt() int {
	switch n := d.d.Headers[wire.HeaderDeliveryCount].(type) {
	case int64:
		return int(n) + 1
	case int32:
		return int(n) + 1
	case int:
		return n + 1
	}
	if d.d.Redelivered {
		return 2
	}
	return 1
}

func (d *delivery) Ack(context.Context) error {
	defer d.ticket.Settle()
	return d.d.Ack(false)
}

// Retry rejects the delivery with requeue after delay, holding it (and its
// prefetch slot) meanwhile; see the package documentation.
func (d *delivery) Retry(_ context.Context, delay time.Duration) error {
	if delay <= 0 {
		defer d.ticket.Settle()
		return d.d.Nack(false, true)
	}
	err := d.s.after(delay, func() {
		defer d.ticket.Settle()
		_ = d.d.Nack(false, true)
	})
	if err != nil {
		d.ticket.Settle()
	}
	return err
}

// Extend does nothing: RabbitMQ holds a delivery until its channel closes.
func (d *delivery) Extend(context.Context) error { return nil }

// Drop acknowledges the delivery: the consumer has parked the message.
func (d *delivery) Drop(context.Context) error {
	defer d.ticket.Settle()
	return d.d.Ack(false)
}
