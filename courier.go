// Package courier is the root of Courier, a toolkit for reliable messaging
// between services: a business change and the message that announces it commit
// together (the transactional outbox), a relay moves committed messages to a
// broker at least once and in per-key order, and consumers apply each message
// exactly once (the inbox).
//
// The root package holds the types every other package shares: [Message], its
// constructors and options, the well-known header names and the validation
// errors. Writing messages happens in package outbox, moving them in package
// relay, storing them in the store packages and sending them in the broker
// packages.
//
// A message is built from a Go value and written in the caller's transaction:
//
//	msg, err := courier.NewJSON("orders", order.ID, OrderPlaced{ID: order.ID})
//	if err != nil {
//		return err
//	}
//	if err := writer.Write(ctx, tx, msg); err != nil { // same transaction as the order row
//		return err // and the order rolls back with it
//	}
package courier

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// ErrInvalidMessage is returned (wrapped in a [*ValidationError]) when a
// message cannot be written because one of its fields is empty, too large or
// malformed. Callers can test for it with errors.Is.
var ErrInvalidMessage = errors.New("courier: invalid message")

// ErrMalformed marks a received message that can never be processed as it
// is: missing or invalid headers, an unknown type, a payload that does not
// decode. Consumers park such messages at once instead of retrying them.
var ErrMalformed = errors.New("courier: malformed message")

// ErrNewerVersion marks a received message whose version is newer than any
// its consumer knows: the producer was deployed before the consumer. It
// is neither applied (with the old shape's meaning) nor lost: the consumer
// retries it without counting the runs, for as long as a rolling deploy
// takes, then parks it with a reason naming the version, for a replay once
// the consumer knows it. inbox.Router returns it; a handler may too.
var ErrNewerVersion = errors.New("courier: message version newer than the consumer knows")

// ValidationError describes one bad field of a message and how to fix it.
type ValidationError struct {
	// Field is the name of the offending field, for example "Topic" or
	// `Headers["traceparent"]`.
	Field string
	// Problem says what is wrong with the field.
	Problem string
	// Fix says what to do about it.
	Fix string
}

// Error implements error.
func (e *ValidationError) Error() string {
	if e.Fix == "" {
		return fmt.Sprintf("courier: message.%s %s", e.Field, e.Problem)
	}
	return fmt.Sprintf("courier: message.%s %s: %s", e.Field, e.Problem, e.Fix)
}

// Is reports whether target is [ErrInvalidMessage].
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidMessage }

// Backoff is a capped exponential backoff with jitter: retry n waits
// Initial·2ⁿ⁻¹, at most Max, less a random fraction up to Jitter. The relay
// uses it between publish attempts, consumers between deliveries.
type Backoff struct {
	// Initial is the first delay.
	Initial time.Duration
	// Max caps the delay.
	Max time.Duration
	// Jitter is the largest fraction taken off at random, 0 to 1.
	Jitter float64
}

// Delay returns the wait before retry n (n ≥ 1).
func (b Backoff) Delay(n int) time.Duration {
	d := b.Initial
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if b.Jitter > 0 {
		d -= time.Duration(rand.Float64() * b.Jitter * float64(d))
	}
	return d
}

// Validate reports whether b is usable: nil, or an error that names field
// (the setting that holds b, as "relay: Config.Backoff") and the fix. A
// zero field is valid; constructors fill it from their defaults first
// ([Backoff.Or]).
func (b Backoff) Validate(field string) error {
	switch {
	case b.Initial < 0 || b.Max < b.Initial:
		return fmt.Errorf("%s is %s..%s: Initial must be at least 0 and Max at least Initial", field, b.Initial, b.Max)
	case b.Jitter < 0 || b.Jitter > 1:
		return fmt.Errorf("%s.Jitter is %g: use 0 to 1", field, b.Jitter)
	}
	return nil
}

// Or returns b with each zero field taken from def: a configuration's
// Backoff filled with its defaults.
func (b Backoff) Or(def Backoff) Backoff {
	if b.Initial == 0 {
		b.Initial = def.Initial
	}
	if b.Max == 0 {
		b.Max = def.Max
	}
	if b.Jitter == 0 {
		b.Jitter = def.Jitter
	}
	return b
}

// Clock is the source of the current time that every runtime configuration
// takes (relays, consumers, sagas, cleanup, Idempotency-Key records), so
// that a test moves time forward instead of sleeping until a deadline
// passes. A nil Clock is the real one: Now returns time.Now(). Stores read
// the database's own clock when theirs is nil (see store.Clock).
type Clock func() time.Time

// Now returns c's time, or time.Now() when c is nil.
func (c Clock) Now() time.Time {
	if c == nil {
		return time.Now()
	}
	return c()
}
