package relay

import (
	"errors"
	"fmt"
	"time"
)

// Metrics are a relay's running totals since New.
type Metrics struct {
	// Published counts messages the broker acknowledged.
	Published int64 `json:"published"`
	// Retried counts failed publishes that will be retried.
	Retried int64 `json:"retried"`
	// DeadLettered counts messages parked after MaxAttempts, or at once
	// when the broker rejected them for good (broker.ErrRejected).
	DeadLettered int64 `json:"dead_lettered"`
	// Released counts claimed messages handed back unattempted.
	Released int64 `json:"released"`
	// Batches counts claimed batches.
	Batches int64 `json:"batches"`
}

// State is a snapshot of a relay for the program that embeds it: whether it
// runs, what has been failing and since when, and its totals. Relay.State
// returns it; Check turns it into a health verdict. Errors are kept as text
// and the struct encodes to JSON as it is, for a health endpoint. See
// "Watching a relay" in the package documentation.
type State struct {
	// At is when the snapshot was taken; Check judges durations up to it.
	At time.Time `json:"at"`
	// Running is true from the start of Run until it returns.
	Running bool `json:"running"`
	// Started is when Run started; zero before.
	Started time.Time `json:"started,omitzero"`

	// LastClaim is when a claim last succeeded, whether it found work or
	// not; zero before the first. A running relay claims at least every
	// PollInterval while it has nothing to do; longer gaps come from a
	// broker pause (PausedUntil) or from batches still publishing (at most
	// LeaseDuration).
	LastClaim time.Time `json:"last_claim,omitzero"`
	// ClaimError is the error of the last claim when it failed (the
	// database is unreachable, refuses the query, or did not answer within
	// LeaseDuration); empty once a claim succeeds.
	ClaimError string `json:"claim_error,omitempty"`
	// ClaimFailures counts the claims that have failed in a row; 0 after a
	// success. Claims are retried after 100ms, doubling up to 5s.
	ClaimFailures int `json:"claim_failures,omitempty"`
	// ClaimFailingSince is when the first of those failures happened; zero
	// while claims succeed.
	ClaimFailingSince time.Time `json:"claim_failing_since,omitzero"`

	// BrokerDown is true while the relay holds the broker unavailable: a
	// whole batch failed with broker.ErrUnavailable and no publish has
	// succeeded since. The relay learns about the broker only from its own
	// publishes: an idle relay does not notice an outage, and BrokerDown
	// stays true until one of its publishes succeeds.
	BrokerDown bool `json:"broker_down"`
	// BrokerError is the publish error that made the last batch count as
	// an outage; empty when the broker is not down.
	BrokerError string `json:"broker_error,omitempty"`
	// BrokerDownSince is when the first batch of the outage failed; zero
	// when the broker is not down.
	BrokerDownSince time.Time `json:"broker_down_since,omitzero"`
	// BrokerOutages counts the batches lost to the outage in a row; each
	// one lengthens the pause (Config.Backoff).
	BrokerOutages int `json:"broker_outages,omitempty"`
	// PausedUntil is when the relay claims again during an outage; zero or
	// past when it is not pausing.
	PausedUntil time.Time `json:"paused_until,omitzero"`

	// CompleteError is the error of the last failed attempt to record a
	// batch's outcome (mark rows published, schedule retries, park dead
	// letters); empty once one succeeds. The relay retries until the
	// batch's lease is about to end, then gives the batch up: its
	// acknowledged messages are published again after the lease.
	CompleteError string `json:"complete_error,omitempty"`
	// CompleteFailingSince is when recording outcomes started failing;
	// zero while it succeeds.
	CompleteFailingSince time.Time `json:"complete_failing_since,omitzero"`

	// Metrics are the relay's running totals.
	Metrics Metrics `json:"metrics"`
}

// ErrUnhealthy is wrapped by the errors State.Check returns.
var ErrUnhealthy = errors.New("relay unhealthy")

// Check tells whether the relay was healthy at s.At: it returns nil if so,
// otherwise an error wrapping ErrUnhealthy that says what is wrong, since
// when, the last error and what to look at. The rule, in this order:
//
//   - the relay is not running (Run has not started or has returned);
//   - its claims have been failing for longer than grace (the database);
//   - it has held the broker down for longer than grace;
//   - recording batch outcomes has been failing for longer than grace (the
//     database; messages are published again meanwhile).
//
// Failures younger than grace are tolerated, so that a database failover or
// a broker restart the relay rides out does not make it unhealthy; with
// grace 0 any ongoing failure does. A message that becomes a dead letter
// does not make a relay unhealthy: watch the outbox's dead letters
// (store.Stats) for that.
func (s State) Check(grace time.Duration) error {
	failing := func(since time.Time) bool { return !since.IsZero() && s.At.Sub(since) >= grace }
	age := func(since time.Time) time.Duration { return s.At.Sub(since).Round(time.Millisecond) }
	switch {
	case !s.Running && s.Started.IsZero():
		return fmt.Errorf("%w: not started: call Run", ErrUnhealthy)
	case !s.Running:
		return fmt.Errorf("%w: stopped: Run has returned", ErrUnhealthy)
	case failing(s.ClaimFailingSince):
		return fmt.Errorf("%w: claims have failed for %s (%d in a row), last: %s: check that the database is reachable and the schema migrated",
			ErrUnhealthy, age(s.ClaimFailingSince), s.ClaimFailures, s.ClaimError)
	case s.BrokerDown && failing(s.BrokerDownSince):
		return fmt.Errorf("%w: the broker has been unavailable for %s (%d batches in a row), last: %s: check the broker and the connection to it",
			ErrUnhealthy, age(s.BrokerDownSince), s.BrokerOutages, s.BrokerError)
	case failing(s.CompleteFailingSince):
		return fmt.Errorf("%w: recording batch outcomes has failed for %s, last: %s: check the database; published messages will be published again",
			ErrUnhealthy, age(s.CompleteFailingSince), s.CompleteError)
	}
	return nil
}

// State returns a snapshot of the relay's state. It is safe to call from any
// goroutine, at any time, as often as a health check or metrics scrape
// needs: it takes a mutex and reads a few counters.
func (r *Relay) State() State {
	r.mu.Lock()
	s := r.state
	r.mu.Unlock()
	o := r.disp.Outage()
	s.BrokerDown, s.BrokerError, s.BrokerDownSince, s.BrokerOutages, s.PausedUntil = o.Down, o.Err, o.Since, o.Rounds, o.PausedUntil
	s.At = r.cfg.Clock.Now()
	s.Metrics = r.Metrics()
	return s
}

// Metrics returns the relay's running totals.
func (r *Relay) Metrics() Metrics {
	return Metrics{
		Published:    r.published.Load(),
		Retried:      r.retried.Load(),
		DeadLettered: r.dead.Load(),
		Released:     r.released.Load(),
		Batches:      r.batches.Load(),
	}
}

func (r *Relay) setRunning(running bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state.Running = running
	if running {
		r.state.Started = r.cfg.Clock.Now()
	}
}

// noteClaim records a claim's outcome for State. A claim cut short by
// shutdown is not a failure.
func (r *Relay) noteClaim(err error, stopping bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &r.state
	switch {
	case err == nil:
		st.LastClaim, st.ClaimError, st.ClaimFailures, st.ClaimFailingSince = r.cfg.Clock.Now(), "", 0, time.Time{}
	case stopping:
	default:
		if st.ClaimFailures == 0 {
			st.ClaimFailingSince = r.cfg.Clock.Now()
		}
		st.ClaimFailures++
		st.ClaimError = err.Error()
	}
}

// noteComplete records the outcome of an attempt to record a batch's
// outcome, for State.
func (r *Relay) noteComplete(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &r.state
	switch {
	case err == nil:
		st.CompleteError, st.CompleteFailingSince = "", time.Time{}
	default:
		if st.CompleteFailingSince.IsZero() {
			st.CompleteFailingSince = r.cfg.Clock.Now()
		}
		st.CompleteError = err.Error()
	}
}
