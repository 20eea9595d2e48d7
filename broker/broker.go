// Package broker defines how Courier talks to a message broker. Each broker
// has a sub-package (broker/nats for NATS JetStream, …) that implements these
// interfaces; the relay depends only on this package.
package broker

import (
	"context"
	"errors"

	"github.com/courier-go/courier"
)

// Publisher sends messages to a broker.
type Publisher interface {
	// Publish sends every message in msgs and waits for the broker to
	// acknowledge each one, or for ctx to end. It returns one error per
	// message, in order: nil where the broker has acknowledged the message
	// (it will not be lost by the broker, within the broker's own durability
	// settings). Messages are handed to the broker in slice order.
	//
	// A failure that is not the message's fault (the broker is unreachable,
	// did not answer in time, or has no stream for the subject) must wrap
	// [ErrUnavailable], so the relay retries without counting it against the
	// message's attempts. Any other error counts as a failed attempt.
	Publish(ctx context.Context, msgs []courier.Message) []error
}

// ErrUnavailable marks publish errors caused by the broker rather than by the
// message: connection lost, timeouts, no stream listening on the subject.
var ErrUnavailable = errors.New("broker unavailable")

// Unavailable wraps err so that errors.Is(result, ErrUnavailable) holds.
func Unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return err
	}
	return &unavailableError{err}
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return "broker unavailable: " + e.err.Error() }
func (e *unavailableError) Unwrap() []error {
	return []error{ErrUnavailable, e.err}
}
