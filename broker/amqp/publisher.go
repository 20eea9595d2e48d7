package amqp

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/courier-go/courier/broker"
)

// ErrUnroutable is wrapped by the error Publish returns for a message that
// no queue took: RabbitMQ returned it (mandatory flag) because no binding
// of the exchange matches its routing key. The broker is up; the message
// goes nowhere until an operator binds a queue or the topic is corrected,
// so the failure counts against the message's attempts (it is neither
// broker.ErrUnavailable nor broker.ErrRejected).
var ErrUnroutable = errors.New("amqp: no queue is bound to the routing key")

// ErrNacked is wrapped by the error Publish returns for a message RabbitMQ
// answered with a negative confirm (basic.nack). It counts against the
// message.
var ErrNacked = errors.New("amqp: the broker refused the message (nack)")

// ErrNoExchange is wrapped by the error Publish returns when the exchange
// does not exist (RabbitMQ closed the channel with 404 NOT_FOUND). It counts
// against the message: declaring the exchange lets it through.
var ErrNoExchange = errors.New("amqp: the exchange does not exist")

// returnsBuffer is the capacity of each channel's basic.return listener.
// amqp091-go drops a return its listener has not taken within 5s; Publish
// takes them while it publishes and waits, so a return never waits long.
const returnsBuffer = 1024

// Publisher publishes messages to a RabbitMQ exchange with publisher
// confirms and the mandatory flag. It is safe for concurrent use: each
// Publish call takes one of its channels. Close it when done.
type Publisher struct {
	cfg  PublisherConfig
	pool chan *session

	mu       sync.Mutex
	conn     *amqp091.Connection
	closed   bool
	failures int       // dials failed in a row
	nextDial time.Time // no dial before
	lastErr  error     // the last dial's error

	blocked atomic.Pointer[string] // the reason RabbitMQ blocks publishing, nil when it does not
	maxSize atomic.Int64           // RabbitMQ's max_message_size, once learned
	wg      sync.WaitGroup         // watchers and background channel closes
}

var _ broker.Publisher = (*Publisher)(nil)

// session is one channel in confirm mode.
type session struct {
	conn    *amqp091.Connection // the connection ch is on
	ch      *amqp091.Channel
	returns chan amqp091.Return
	closes  chan *amqp091.Error
	reason  *amqp091.Error // why the channel closed, once known
}

// NewPublisher returns a Publisher. It does not connect: the first Publish
// does, so a relay can start while the broker is down. Call Connect to
// find out at once whether the URL and credentials work. It fails on an
// invalid configuration (see PublisherConfig.Validate).
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.CloudEvents = cfg.CloudEvents.Clone()
	p := &Publisher{cfg: cfg, pool: make(chan *session, cfg.Channels)}
	p.maxSize.Store(cfg.MaxMessageSize)
	for range cfg.Channels {
		p.pool <- &session{}
	}
	return p, nil
}

// Connect connects now unless connected, and returns why it cannot: the
// broker is unreachable (wrapping broker.ErrUnavailable), the credentials
// are refused, the vhost does not exist. Publish connects by itself; a
// program calls Connect at start-up to report a wrong URL at once.
func (p *Publisher) Connect() error {
	p.mu.Lock()
	p.nextDial = time.Time{} // now, whatever the backoff says
	p.mu.Unlock()
	_, err := p.connection()
	return err
}

// Close closes the connection, waiting at most DialTimeout for the broker
// to agree, and waits for the Publisher's goroutines. Publish must not be
// called after Close.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	conn := p.conn
	p.mu.Unlock()
	var err error
	if conn != nil && !conn.IsClosed() {
		err = conn.CloseDeadline(time.Now().Add(p.cfg.DialTimeout))
	}
	p.wg.Wait()
	return err
}

// connection returns the live connection, dialling when there is none and
// the backoff allows it.
func (p *Publisher) connection() (*amqp091.Connection, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, broker.Unavailable(errors.New("amqp: publisher closed"))
	}
	if p.conn != nil && !p.conn.IsClosed() {
		return p.conn, nil
	}
	if wait := time.Until(p.nextDial); wait > 0 {
		return nil, broker.Unavailable(fmt.Errorf("amqp: reconnecting in %s: %w", wait.Round(time.Millisecond), p.lastErr))
	}
	conn, err := p.cfg.dial()
	if err != nil {
		p.failures++
		p.nextDial = time.Now().Add(p.cfg.Backoff.Delay(p.failures))
		p.lastErr = err
		return nil, broker.Unavailable(err)
	}
	p.failures, p.conn = 0, conn
	p.blocked.Store(nil)
	blocks := conn.NotifyBlocked(make(chan amqp091.Blocking, 4))
	p.wg.Go(func() {
		// Ends when the connection closes: amqp091-go closes blocks.
		for b := range blocks {
			if b.Active {
				reason := b.Reason
				p.blocked.Store(&reason)
			} else {
				p.blocked.Store(nil)
			}
		}
	})
	return conn, nil
}

// open makes s a live channel in confirm mode.
func (p *Publisher) open(s *session) error {
	conn, err := p.connection()
	if err != nil {
		p.discard(s)
		return err
	}
	if s.ch != nil && !s.ch.IsClosed() && s.conn == conn {
		return nil
	}
	p.discard(s)
	ch, err := conn.Channel()
	if err != nil {
		return broker.Unavailable(fmt.Errorf("amqp: open channel: %w", err))
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return broker.Unavailable(fmt.Errorf("amqp: confirm mode: %w", err))
	}
	s.conn, s.ch = conn, ch
	s.reason = nil
	s.closes = ch.NotifyClose(make(chan *amqp091.Error, 1))
	s.returns = ch.NotifyReturn(make(chan amqp091.Return, returnsBuffer))
	return nil
}

// discard closes s's channel in the background: confirms or returns may
// still be due on it, and it must not serve another batch.
func (p *Publisher) discard(s *session) {
	ch, returns := s.ch, s.returns
	s.ch = nil
	if ch == nil || ch.IsClosed() {
		return
	}
	p.wg.Go(func() {
		for range returns { // closed with the channel
		}
	})
	p.wg.Go(func() { _ = ch.Close() })
}

// abandon closes conn in the background, within DialTimeout, and makes the
// next Publish dial a new connection: a confirm did not come, and a
// connection whose peer went silent takes the heartbeat's time to close by
// itself, during which opening a channel on it would hang.
func (p *Publisher) abandon(conn *amqp091.Connection) {
	p.mu.Lock()
	if p.conn == conn {
		p.conn = nil
	}
	p.mu.Unlock()
	p.wg.Go(func() { _ = conn.CloseDeadline(time.Now().Add(p.cfg.DialTimeout)) })
}

// closeReason returns why s's channel closed, nil if it did not or the
// reason is unknown. amqp091-go marks the channel closed before it hands
// out the reason, so it waits a little for it.
func (s *session) closeReason() *amqp091.Error {
	if s.reason != nil || s.closes == nil || s.ch == nil || !s.ch.IsClosed() {
		return s.reason
	}
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case e, ok := <-s.closes:
		if ok {
			s.reason = e
		}
	case <-t.C:
	}
	s.closes = nil // asked once: not again for this channel
	return s.reason
}
