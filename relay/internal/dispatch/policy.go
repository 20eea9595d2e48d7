package dispatch

import (
	"errors"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// Policy is the failure rules (see the package documentation).
type Policy struct {
	// MaxAttempts is how many counted failures make a dead letter.
	MaxAttempts int
	// Backoff spaces retries and outage pauses.
	Backoff courier.Backoff
}

// Failure is what a failed publish means.
type Failure struct {
	// Err is the broker's answer.
	Err error
	// At is when it failed.
	At time.Time
	// Counted is false for an outage (broker.ErrUnavailable).
	Counted bool
	// Permanent is true for a refusal for good (broker.ErrRejected
	// without ErrUnavailable).
	Permanent bool
	// Attempts counts the message's counted failures, this one included.
	Attempts int
	// Dead is true when the message is a dead letter now.
	Dead bool
	// Delay is how long until its retry; 0 for a dead letter.
	Delay time.Duration
	// Hold is true when the message is a dead letter now that holds its
	// key: its topic is one of Config.Holds (see Dispatcher.Judge).
	Hold bool
}

// Judge returns what err means for a message that failed attempts times
// before (counted failures), during the outages-th outage in a row when err
// is one (0 otherwise).
func (p Policy) Judge(err error, attempts, outages int, at time.Time) Failure {
	f := Failure{Err: err, At: at, Attempts: attempts}
	if errors.Is(err, broker.ErrUnavailable) {
		f.Delay = p.OutageDelay(max(outages, 1), err)
		return f
	}
	f.Counted, f.Permanent = true, broker.Permanent(err)
	f.Attempts++
	if f.Permanent || f.Attempts >= p.MaxAttempts {
		f.Dead = true
		return f
	}
	f.Delay = p.Backoff.Delay(f.Attempts)
	if wish, ok := broker.RetryAfter(err); ok {
		// At least as long as the broker asked, within Backoff.Max: a
		// far-off date cannot hold a key back longer than the relay would.
		f.Delay = max(f.Delay, min(wish, p.Backoff.Max))
	}
	return f
}

// OutageDelay is the wait after the n-th outage in a row: the broker's own
// estimate when err carries one (broker.RetryAfterError), at least a moment
// and at most Backoff.Max, else the backoff's. An endpoint that says it is
// back in 5s is tried again then, not after a backoff grown through a long
// outage.
func (p Policy) OutageDelay(n int, err error) time.Duration {
	if wish, ok := broker.RetryAfter(err); ok {
		return min(max(wish, min(p.Backoff.Initial, time.Second)), p.Backoff.Max)
	}
	return p.Backoff.Delay(n)
}
