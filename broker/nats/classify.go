package nats

import (
	"errors"
	"fmt"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// classify sorts the error of a publish of m the broker answered, or the
// client refused to send:
//
//   - The broker's permanent refusals of the message itself wrap
//     broker.ErrRejected and say what to change: a message over the server's
//     max_payload or the stream's max_msg_size, headers over JetStream's
//     64 KiB, an invalid subject, headers the client cannot encode.
//   - A bad request counts against the message without being permanent.
//   - Everything else (connection lost or closed, timeouts, a stream full or
//     not ready) wraps broker.ErrUnavailable.
func (p *Publisher) classify(m *courier.Message, err error) error {
	subject := p.cfg.MessageSubject(m.Topic, m.Key)
	var apiErr *jetstream.APIError
	isAPI := errors.As(err, &apiErr)
	switch {
	case errors.Is(err, natsgo.ErrMaxPayload):
		return broker.Rejected(fmt.Errorf("subject %q: %w: the message's payload is %d bytes and the server's max_payload is %d bytes, headers included: shrink the payload (store large data elsewhere and send a reference) or raise max_payload on every server, then replay the dead letter",
			subject, err, len(m.Payload), p.js.Conn().MaxPayload()))
	case isAPI && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
		return broker.Rejected(fmt.Errorf("subject %q: %w: the message's payload is %d bytes, over the max_msg_size of the stream that binds the subject: shrink the payload or raise the stream's max_msg_size, then replay the dead letter",
			subject, err, len(m.Payload)))
	case isAPI && apiErr.ErrorCode == errCodeHeaderExceedsMaximum:
		return broker.Rejected(fmt.Errorf("subject %q: %w: the message's headers are over JetStream's limit of 64 KiB: send fewer or shorter headers",
			subject, err))
	case errors.Is(err, natsgo.ErrBadSubject):
		return badSubject(subject, m.Topic, err)
	case errors.Is(err, natsgo.ErrBadHeaderMsg), errors.Is(err, natsgo.ErrInvalidMsg):
		return broker.Rejected(fmt.Errorf("subject %q: %w: the client cannot send the message's headers: check the header names and values", subject, err))
	case isAPI && apiErr.ErrorCode == jetstream.JSErrCodeBadRequest:
		return fmt.Errorf("subject %q: %w", subject, err)
	}
	return broker.Unavailable(err)
}

// errCodeHeaderExceedsMaximum is JetStream's error code for a message whose
// headers exceed 64 KiB (JSStreamHeaderExceedsMaximumErr); nats.go names no
// constant for it.
const errCodeHeaderExceedsMaximum jetstream.ErrorCode = 10097
