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
	"syscall"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

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
