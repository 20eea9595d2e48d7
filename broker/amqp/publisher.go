package amqp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/cloudevents"
)

// ErrUnroutable is wrapped by the error Publish returns for a message that
// no queue took: RabbitMQ returned it (mandatory flag) because no binding
// of the exchange matches its routing key. The broker is up; the message
// goes nowhere until an operator binds a queue or the topic is corrected,
// so the failure counts against the message's attempts (it is neither
// broker.ErrUnavailable nor broker.ErrRejected).
var ErrUnroutable = errors.New("amqp: no queue is bound to the routing key")

// connectionLost reports whether err is the connection's failure (a reset,
// a closed pipe, an end of stream) rather than the client refusing what it
// was asked to send: writing to a connection the broker has just dropped
// fails so before the channel knows it is closed.
func connectionLost(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.ErrClosedPipe) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, amqp091.ErrClosed)
}

// ErrNacked is wrapped by the error Publish returns for a message RabbitMQ
// answered with a negative confirm (basic.nack). It counts against the
// message.
var ErrNacked = errors.New("amqp: the broker refused the message (nack)")

// ErrNoExchange is wrapped by the error Publish returns when the exchange
// does not exist (RabbitMQ closed the channel with 404 NOT_FOUND). It counts
// against the message: declaring the exchange lets it through.
var ErrNoExchange = errors.New("amqp: the exchange does not exist")

// PublisherConfig tunes a Publisher.
type PublisherConfig struct {
	Config
	// Channels is how many channels in confirm mode the Publisher keeps,
	// each publishing one batch at a time. Default 2 (the relay's default
	// concurrency).
	Channels int
	// ConfirmTimeout bounds one Publish call, from the first message sent
	// to the last confirm. Messages not confirmed by then fail with
	// broker.ErrUnavailable. Default 10s.
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

// publishing converts a message to the AMQP message Publish sends, with its
// CloudEvents attributes when the Publisher has them on.
func (p *Publisher) publishing(m *courier.Message) amqp091.Publishing {
	pub := Publishing(m)
	if ce := p.cfg.CloudEvents; ce != nil {
		for _, a := range ce.Attributes(cloudevents.PrefixAMQP, m) {
			pub.Headers[a.Name] = a.Value
		}
	}
	return pub
}

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
// invalid configuration.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	cfg.Config = cfg.Config.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Channels <= 0 {
		cfg.Channels = 2
	}
	if cfg.ConfirmTimeout <= 0 {
		cfg.ConfirmTimeout = 10 * time.Second
	}
	if cfg.CloudEvents != nil {
		if err := cfg.CloudEvents.Check("amqp: PublisherConfig.CloudEvents"); err != nil {
			return nil, err
		}
		cfg.CloudEvents = cfg.CloudEvents.Clone()
	}
	if cfg.MaxMessageSize < 0 {
		return nil, fmt.Errorf("amqp: PublisherConfig.MaxMessageSize is %d: use 0 (learned) or the broker's max_message_size", cfg.MaxMessageSize)
	}
	if _, err := amqp091.ParseURI(cfg.URL); err != nil {
		return nil, fmt.Errorf("amqp: Config.URL: %w", err)
	}
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

// Publish implements broker.Publisher. It sends every message on one
// channel with the mandatory flag, then waits for all the confirms; the
// package documentation lists how each outcome is reported.
func (p *Publisher) Publish(ctx context.Context, msgs []courier.Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	fail := func(err error) []error {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	var s *session
	select {
	case s = <-p.pool:
	case <-ctx.Done():
		return fail(broker.Unavailable(fmt.Errorf("amqp: waiting for a free channel: %w", ctx.Err())))
	}
	defer func() { p.pool <- s }()
	if reason := p.blocked.Load(); reason != nil {
		// A blocked connection answers nothing, not even channel.open.
		return fail(broker.Unavailable(fmt.Errorf("amqp: RabbitMQ blocks publishing on this connection (%s): a memory or disk alarm is raised; free memory or disk on the broker", *reason)))
	}
	if err := p.open(s); err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ConfirmTimeout)
	defer cancel()

	returned := make(map[string]amqp091.Return)
	returns := s.returns
	take := func(r amqp091.Return, ok bool) {
		if !ok {
			returns = nil // closed with the channel
			return
		}
		returned[r.MessageId] = r
	}
	drain := func() {
		for returns != nil {
			select {
			case r, ok := <-returns:
				take(r, ok)
			default:
				return
			}
		}
	}

	confs := make([]*amqp091.DeferredConfirmation, len(msgs))
	exchange := p.cfg.Exchange
	var sendErr error // the channel failed: the rest is not sent
	for i := range msgs {
		m := &msgs[i]
		if limit := p.maxSize.Load(); limit > 0 && int64(len(m.Payload)) > limit {
			errs[i] = p.tooLarge(m, limit, nil)
			continue
		}
		if sendErr != nil {
			errs[i] = p.unconfirmed(s, m, sendErr)
			continue
		}
		c, err := s.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, p.cfg.RoutingKey(m.Topic), true, false, p.publishing(m))
		if err != nil {
			var ae *amqp091.Error
			if !errors.As(err, &ae) && !connectionLost(err) && !s.ch.IsClosed() && ctx.Err() == nil {
				// The client refused it before sending (invalid headers).
				errs[i] = broker.Rejected(fmt.Errorf("amqp: routing key %q: %w: check the message's header names and values", p.cfg.RoutingKey(m.Topic), err))
				continue
			}
			sendErr = err
			errs[i] = p.unconfirmed(s, m, err)
			continue
		}
		confs[i] = c
		drain()
	}

	timedOut := false
	for i, c := range confs {
		if c == nil {
			continue
		}
		m := &msgs[i]
	wait:
		for {
			select {
			case <-c.Done():
				break wait
			case r, ok := <-returns:
				take(r, ok)
			case <-ctx.Done():
				break wait
			}
		}
		select {
		case <-c.Done():
		default:
			timedOut = true
			errs[i] = broker.Unavailable(fmt.Errorf("amqp: routing key %q: no confirm from RabbitMQ within the publish's time (%w)", p.cfg.RoutingKey(m.Topic), ctx.Err()))
			continue
		}
		// A basic.return comes before the confirm of its message.
		drain()
		switch {
		case c.Acked():
			if r, ok := returned[m.ID.String()]; ok {
				errs[i] = fmt.Errorf("%w: exchange %q, routing key %q (topic %q): RabbitMQ returned the message (%d %s): bind a queue to the routing key (EnsureTopology with the topic) or check the message's topic",
					ErrUnroutable, r.Exchange, r.RoutingKey, m.Topic, r.ReplyCode, r.ReplyText)
			}
		case s.ch.IsClosed():
			errs[i] = p.unconfirmed(s, m, amqp091.ErrClosed)
		default:
			errs[i] = fmt.Errorf("%w: exchange %q, routing key %q: a queue it routes to refused it (a queue at its x-max-length with x-overflow=reject-publish, or a queue in trouble): let its consumers drain it or raise its limit",
				ErrNacked, exchange, p.cfg.RoutingKey(m.Topic))
		}
	}
	switch {
	case timedOut && p.blocked.Load() == nil:
		p.abandon(s.conn)
		p.discard(s)
	case timedOut || s.ch.IsClosed():
		p.discard(s)
	}
	return errs
}

// maxSizeText matches RabbitMQ's refusal of a message over max_message_size.
var maxSizeText = regexp.MustCompile(`message size (\d+) is larger than configured max size (\d+)`)

// unconfirmed classifies the failure of m, sent or not, on a channel that
// failed with err or closed.
func (p *Publisher) unconfirmed(s *session, m *courier.Message, err error) error {
	key := p.cfg.RoutingKey(m.Topic)
	reason := s.closeReason()
	if reason == nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return broker.Unavailable(fmt.Errorf("amqp: routing key %q: not sent: %w", key, err))
		}
		return broker.Unavailable(fmt.Errorf("amqp: routing key %q: channel closed before the confirm: %w", key, err))
	}
	switch {
	case reason.Code == amqp091.NotFound && strings.Contains(reason.Reason, "exchange"):
		return fmt.Errorf("%w: %q (%s): declare it (EnsureTopology) or correct Config.Exchange", ErrNoExchange, p.cfg.Exchange, reason.Reason)
	case reason.Code == amqp091.AccessRefused:
		return fmt.Errorf("amqp: exchange %q: RabbitMQ refused access (%s): grant the user write permission on the exchange", p.cfg.Exchange, reason.Reason)
	case reason.Code == amqp091.PreconditionFailed:
		if sm := maxSizeText.FindStringSubmatch(reason.Reason); sm != nil {
			limit, _ := strconv.ParseInt(sm[2], 10, 64)
			if limit > 0 {
				p.maxSize.Store(limit)
				if int64(len(m.Payload)) > limit {
					return p.tooLarge(m, limit, reason)
				}
			}
			return broker.Unavailable(fmt.Errorf("amqp: routing key %q: not confirmed: another message of the batch was too large and RabbitMQ closed the channel (%s)", key, reason.Reason))
		}
	}
	return broker.Unavailable(fmt.Errorf("amqp: routing key %q: channel closed before the confirm: %w", key, reason))
}

// tooLarge is the permanent refusal of a message over RabbitMQ's
// max_message_size.
func (p *Publisher) tooLarge(m *courier.Message, limit int64, reason *amqp091.Error) error {
	why := "learned from RabbitMQ's refusal of an earlier message"
	switch {
	case reason != nil:
		why = reason.Reason
	case limit == p.cfg.MaxMessageSize:
		why = "PublisherConfig.MaxMessageSize"
	}
	return broker.Rejected(fmt.Errorf("amqp: routing key %q: the payload is %d bytes, over RabbitMQ's max_message_size of %d bytes (%s): shrink the payload (store large data elsewhere and send a reference) or raise max_message_size in rabbitmq.conf, then replay the dead letter",
		p.cfg.RoutingKey(m.Topic), len(m.Payload), limit, why))
}
