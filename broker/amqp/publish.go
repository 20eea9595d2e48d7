package amqp

import (
	"context"
	"errors"
	"fmt"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

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
	if err := p.ready(s); err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ConfirmTimeout)
	defer cancel()
	rs := &returns{ch: s.returns, got: make(map[string]amqp091.Return)}
	confs := p.send(ctx, s, rs, msgs, errs)
	timedOut := p.confirm(ctx, s, rs, msgs, confs, errs)
	switch {
	case timedOut && p.blocked.Load() == nil:
		p.abandon(s.conn)
		p.discard(s)
	case timedOut || s.ch.IsClosed():
		p.discard(s)
	}
	return errs
}

// ready makes s a live channel in confirm mode, unless RabbitMQ blocks
// publishing on the connection: a blocked connection answers nothing, not
// even channel.open.
func (p *Publisher) ready(s *session) error {
	if reason := p.blocked.Load(); reason != nil {
		return broker.Unavailable(fmt.Errorf("amqp: RabbitMQ blocks publishing on this connection (%s): a memory or disk alarm is raised; free memory or disk on the broker", *reason))
	}
	return p.open(s)
}

// returns collects the basic.return messages of one Publish call's
// channel, by message id.
type returns struct {
	ch  <-chan amqp091.Return // nil once closed with the channel
	got map[string]amqp091.Return
}

func (r *returns) take(ret amqp091.Return, ok bool) {
	if !ok {
		r.ch = nil
		return
	}
	r.got[ret.MessageId] = ret
}

// drain takes the returns that have come, without waiting.
func (r *returns) drain() {
	for r.ch != nil {
		select {
		case ret, ok := <-r.ch:
			r.take(ret, ok)
		default:
			return
		}
	}
}

// await waits for confirm c, taking the returns that come meanwhile; false
// when ctx ended before c came.
func (r *returns) await(ctx context.Context, c *amqp091.DeferredConfirmation) bool {
	for {
		select {
		case <-c.Done():
			return true
		case ret, ok := <-r.ch:
			r.take(ret, ok)
		case <-ctx.Done():
			select {
			case <-c.Done():
				return true
			default:
				return false
			}
		}
	}
}

// send publishes msgs on s, each with the mandatory flag and a deferred
// confirm, and returns the confirms. A message not sent has no confirm and
// its error in errs: one over the known max_message_size, one the client
// refuses (invalid headers), and, once the channel failed, the rest.
func (p *Publisher) send(ctx context.Context, s *session, rs *returns, msgs []courier.Message, errs []error) []*amqp091.DeferredConfirmation {
	confs := make([]*amqp091.DeferredConfirmation, len(msgs))
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
		c, err := s.ch.PublishWithDeferredConfirmWithContext(ctx, p.cfg.Exchange, p.cfg.RoutingKey(m.Topic), true, false, publishing(m, p.cfg.CloudEvents))
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
		rs.drain()
	}
	return confs
}

// confirm waits for the confirm of each message sent and sets its outcome
// in errs; it reports whether a confirm did not come before ctx ended.
func (p *Publisher) confirm(ctx context.Context, s *session, rs *returns, msgs []courier.Message, confs []*amqp091.DeferredConfirmation, errs []error) (timedOut bool) {
	for i, c := range confs {
		if c == nil {
			continue
		}
		m := &msgs[i]
		if !rs.await(ctx, c) {
			timedOut = true
			errs[i] = broker.Unavailable(fmt.Errorf("amqp: routing key %q: no confirm from RabbitMQ within the publish's time (%w)", p.cfg.RoutingKey(m.Topic), ctx.Err()))
			continue
		}
		// A basic.return comes before the confirm of its message.
		rs.drain()
		errs[i] = p.outcome(s, rs, m, c)
	}
	return timedOut
}

// outcome is the result of m's confirm c: nil for an ack, ErrUnroutable
// for an ack after a basic.return, ErrNacked for a nack, and the channel's
// failure when it closed instead.
func (p *Publisher) outcome(s *session, rs *returns, m *courier.Message, c *amqp091.DeferredConfirmation) error {
	switch {
	case c.Acked():
		if r, ok := rs.got[m.ID.String()]; ok {
			return fmt.Errorf("%w: exchange %q, routing key %q (topic %q): RabbitMQ returned the message (%d %s): bind a queue to the routing key (EnsureTopology with the topic) or check the message's topic",
				ErrUnroutable, r.Exchange, r.RoutingKey, m.Topic, r.ReplyCode, r.ReplyText)
		}
		return nil
	case s.ch.IsClosed():
		return p.unconfirmed(s, m, amqp091.ErrClosed)
	default:
		return fmt.Errorf("%w: exchange %q, routing key %q: a queue it routes to refused it (a queue at its x-max-length with x-overflow=reject-publish, or a queue in trouble): let its consumers drain it or raise its limit",
			ErrNacked, p.cfg.Exchange, p.cfg.RoutingKey(m.Topic))
	}
}
