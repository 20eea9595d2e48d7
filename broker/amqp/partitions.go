package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/internal/group"
)

// partitions is a Subscriber's share of its consumer's key partitions
// (SubscriberConfig.Partitions).
//
// Each partition is a quorum queue with a single active consumer. Taking a
// partition opens a channel and consumes its queue: RabbitMQ delivers to
// this instance once the partition's previous consumer is gone, and to it
// alone. Giving a partition up waits for the deliveries handed out to be
// settled, then closes the channel, so that RabbitMQ returns what is left
// unacknowledged to the head of the queue, for the next consumer. The
// instances announce themselves on a fanout exchange, each listening
// through an exclusive queue of its own.
type partitions struct {
	cfg    SubscriberConfig
	log    *slog.Logger
	group  *group.Group
	out    chan *delivery // what the partitions held received, in order
	cancel context.CancelFunc
	done   chan struct{} // closed when the group has stopped

	mu       sync.Mutex
	conn     *amqp091.Connection
	beats    *amqp091.Channel // publishes and hears the group's beats
	held     map[int]*held
	failures int       // connection attempts failed in a row
	nextDial time.Time // no attempt before
}

// held is a partition an instance consumes.
type held struct {
	ch   *amqp091.Channel
	pump *group.Pump
}

// startPartitions checks the partition queues, joins the consumer's group
// and starts taking its share of the partitions.
func startPartitions(ctx context.Context, cfg SubscriberConfig) (*partitions, error) {
	p := &partitions{cfg: cfg, out: make(chan *delivery), held: make(map[int]*held), done: make(chan struct{})}
	g, err := group.New(cfg.groupConfig(), p.announce, p)
	if err != nil {
		return nil, err
	}
	p.group = g
	p.log = cfg.Logger.With("queue", cfg.Queue, "member", g.Member())
	if err := p.checkQueues(); err != nil {
		return nil, err
	}
	// The broker answered the check; a loss of the consuming connection
	// now is what a loss later is: the group's next announcement connects
	// again (Config.Backoff), so a broker that falls silent for a moment
	// while the instance starts does not end it.
	if beforeFirstConnect != nil {
		beforeFirstConnect()
	}
	p.mu.Lock()
	_, err = p.connectLocked()
	p.mu.Unlock()
	if err != nil && !errors.Is(err, broker.ErrUnavailable) {
		return nil, err
	}
	if err != nil {
		p.log.Warn("amqp: connecting to consume failed; the next announcement tries again", "error", err)
	}
	if err := ctx.Err(); err != nil {
		p.closeConn()
		return nil, err
	}
	gctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go func() {
		defer close(p.done)
		_ = g.Run(gctx)
		p.closeConn()
	}()
	p.log.Info("amqp: sharing the consumer's keys", "partitions", cfg.Partitions)
	return p, nil
}

// beforeFirstConnect, when set (by tests), runs in startPartitions
// between the check of the queues and the first connection to consume.
var beforeFirstConnect func()

// checkQueues fails unless the partition queues of the configured count
// exist, and no more: instances that disagree with the topology would
// leave some queues unconsumed.
func (p *partitions) checkQueues() error {
	// A short session: it takes the default heartbeat, not the consuming
	// connection's short one (which tells RabbitMQ of a frozen instance),
	// so that a broker slow to answer for a few seconds does not end it.
	cfg := p.cfg.Config
	cfg.Heartbeat = DefaultHeartbeat
	conn, err := cfg.dial()
	if err != nil {
		return broker.Unavailable(err)
	}
	defer conn.Close()
	exists := func(q string) (bool, error) {
		ch, err := conn.Channel()
		if err != nil {
			return false, broker.Unavailable(fmt.Errorf("amqp: open channel: %w", err))
		}
		defer ch.Close()
		_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
		var ae *amqp091.Error
		if errors.As(err, &ae) && ae.Code == amqp091.NotFound {
			return false, nil
		}
		return err == nil, err
	}
	last := PartitionQueue(p.cfg.Queue, p.cfg.Partitions-1)
	switch ok, err := exists(last); {
	case err != nil:
		return fmt.Errorf("amqp: look up queue %s: %w", last, err)
	case !ok:
		return fmt.Errorf("amqp: queue %s does not exist: declare the %d partition queues of %s with EnsureTopology (Topology.Partitions %d), or use the number of partitions they were declared with",
			last, p.cfg.Partitions, p.cfg.Queue, p.cfg.Partitions)
	}
	extra := PartitionQueue(p.cfg.Queue, p.cfg.Partitions)
	switch ok, err := exists(extra); {
	case err != nil:
		return fmt.Errorf("amqp: look up queue %s: %w", extra, err)
	case ok:
		return fmt.Errorf("amqp: queue %s exists: the partitions of %s were declared more than %d; use the number they were declared with in SubscriberConfig.Partitions",
			extra, p.cfg.Queue, p.cfg.Partitions)
	}
	return nil
}

// connectLocked returns the connection, connecting when there is none: it
// declares the group's exchange and starts hearing it. Attempts after a
// failure wait for Config.Backoff. p.mu is held.
func (p *partitions) connectLocked() (*amqp091.Connection, error) {
	if p.conn != nil && !p.conn.IsClosed() {
		return p.conn, nil
	}
	for part, h := range p.held {
		h.pump.MarkLost() // their channels went with the connection
		p.log.Info("amqp: partition lost with the connection", "partition", part)
	}
	if time.Now().Before(p.nextDial) {
		return nil, broker.Unavailable(errors.New("amqp: reconnecting later (Config.Backoff)"))
	}
	conn, beats, err := p.dial()
	if err != nil {
		p.failures++
		p.nextDial = time.Now().Add(p.cfg.Backoff.Delay(p.failures))
		return nil, err
	}
	p.failures, p.conn, p.beats = 0, conn, beats
	return conn, nil
}

// dial connects and starts hearing the group.
func (p *partitions) dial() (*amqp091.Connection, *amqp091.Channel, error) {
	conn, err := p.cfg.dial()
	if err != nil {
		return nil, nil, broker.Unavailable(err)
	}
	fail := func(what string, err error) (*amqp091.Connection, *amqp091.Channel, error) {
		_ = conn.Close()
		return nil, nil, broker.Unavailable(fmt.Errorf("amqp: %s: %w", what, err))
	}
	ch, err := conn.Channel()
	if err != nil {
		return fail("open channel", err)
	}
	mx := MembersExchange(p.cfg.Queue)
	if err := ch.ExchangeDeclare(mx, amqp091.ExchangeFanout, true, false, false, false, nil); err != nil {
		return fail("declare exchange "+mx, err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		return fail("declare a queue to hear the group", err)
	}
	if err := ch.QueueBind(q.Name, "", mx, false, nil); err != nil {
		return fail("bind a queue to "+mx, err)
	}
	heard, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return fail("hear the group on "+mx, err)
	}
	go func() {
		for d := range heard {
			p.group.Heard(d.Body)
		}
	}()
	return conn, ch, nil
}

// closeConn closes the connection, if any.
func (p *partitions) closeConn() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.conn, p.beats = nil, nil
}

// announce sends a beat of this member's to the group.
func (p *partitions) announce(ctx context.Context, b group.Beat) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.connectLocked(); err != nil {
		return err
	}
	return p.beats.PublishWithContext(ctx, MembersExchange(p.cfg.Queue), "", false, false, amqp091.Publishing{Body: b.Marshal()})
}

// next implements Subscriber.Next.
func (p *partitions) next(ctx context.Context) (*delivery, error) {
	select {
	case d := <-p.out:
		return d, nil
	case <-p.done:
		return nil, broker.Unavailable(errors.New("amqp: subscriber closed"))
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// close leaves the group: it gives up every partition held, tells the
// others and closes the connection.
func (p *partitions) close() {
	p.cancel()
	<-p.done
}

// Acquire implements group.Owner: it consumes the partition's queue on a
// channel of its own. RabbitMQ delivers to it once the partition's previous
// consumer has gone (single active consumer), so it need not wait here.
func (p *partitions) Acquire(_ context.Context, part int, _ func(string) bool) error {
	p.mu.Lock()
	h := p.held[part]
	p.mu.Unlock()
	if h != nil && !h.pump.Lost() {
		return nil
	}
	if h != nil {
		p.log.Info("amqp: partition lost; taking it again", "partition", part)
		p.stopPump(part, h)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	conn, err := p.connectLocked()
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return broker.Unavailable(fmt.Errorf("amqp: open channel: %w", err))
	}
	q := PartitionQueue(p.cfg.Queue, part)
	tag := p.cfg.ConsumerTag
	if tag == "" {
		tag = p.group.Member()
	}
	if err := ch.Qos(p.cfg.Prefetch, 0, false); err != nil {
		_ = ch.Close()
		return broker.Unavailable(fmt.Errorf("amqp: set prefetch: %w", err))
	}
	dl, err := ch.Consume(q, tag, false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return fmt.Errorf("amqp: consume %s: %w", q, err)
	}
	h = &held{ch: ch}
	h.pump = group.StartPump(p.receive(part, dl), func(d amqp091.Delivery, t *group.Ticket) *delivery {
		return &delivery{d: d, ticket: t}
	}, p.out)
	p.held[part] = h
	return nil
}

// receive returns what takes part's deliveries from dl for its pump.
func (p *partitions) receive(part int, dl <-chan amqp091.Delivery) func(stop <-chan struct{}) (amqp091.Delivery, error) {
	since, first := time.Now(), true
	return func(stop <-chan struct{}) (amqp091.Delivery, error) {
		select {
		case d, ok := <-dl:
			if !ok {
				return d, group.ErrLost // the channel closed under it
			}
			if first {
				// Until now another consumer was the queue's active one.
				p.log.Debug("amqp: partition delivering", "partition", part, "after", time.Since(since).Round(time.Millisecond))
				first = false
			}
			return d, nil
		case <-stop:
			return amqp091.Delivery{}, errStopped
		}
	}
}

// errStopped ends a partition's pump.
var errStopped = errors.New("amqp: partition given up")

// stopPump stops handing over h's deliveries and forgets h.
func (p *partitions) stopPump(part int, h *held) {
	h.pump.Stop()
	p.mu.Lock()
	if p.held[part] == h {
		delete(p.held, part)
	}
	p.mu.Unlock()
}

// Release implements group.Owner: it stops handing over part's deliveries,
// waits, with drain (at most MemberTimeout), for those handed out to be
// settled, and closes the partition's channel: RabbitMQ returns what is
// unacknowledged to the queue, ahead of the rest, and delivers to the
// partition's next consumer.
func (p *partitions) Release(ctx context.Context, part int, drain bool) {
	p.mu.Lock()
	h := p.held[part]
	p.mu.Unlock()
	if h == nil {
		return
	}
	p.stopPump(part, h)
	if drain {
		h.pump.Drain(ctx, p.cfg.MemberTimeout)
	}
	_ = h.ch.Close()
}
