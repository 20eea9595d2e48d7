// Package due decides when a relay releases scheduled messages
// (store.Releaser): at the due time of the next one, as the last release
// reported it; soon after a wake-up, since a writer may have scheduled one
// due earlier; and every Recheck otherwise, for what no wake-up announces
// (a writer in a process without notifications, another relay's releases).
// Both relays keep one Timer: the polling relay asks it before each claim
// and waits no longer than it says; the CDC relay runs it in a goroutine of
// its own, poked by the log, which brings every scheduling transaction.
//
// A release moves at most Limit messages; while releases come back full,
// the timer asks for the next at once. Between two releases it leaves at
// least MinGap, so that messages due a millisecond apart (a thousand a
// second) are released a few at a time rather than one a call: a message is
// published up to MinGap after its due time, plus a claim and a publish,
// and never before it (the store compares with its own clock).
package due

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// Defaults of Config's zero fields.
const (
	// DefaultRecheck is how often a relay looks for scheduled messages that
	// nothing announced.
	DefaultRecheck = 100 * time.Millisecond
	// MinGap is the least time between two releases that move messages
	// one after the other.
	MinGap = 10 * time.Millisecond
)

// Config configures a Timer.
type Config struct {
	// Limit is the most messages one release moves: the relay's batch
	// size.
	Limit int
	// Recheck is how long the timer waits when nothing is known to be
	// due. Default DefaultRecheck.
	Recheck time.Duration
	// Timeout bounds a release, so that a database gone silent fails it
	// (and the relay goes on claiming) instead of holding the relay: the
	// relay's LeaseDuration. Default DefaultRecheck × 50.
	Timeout time.Duration
	// Clock is the relay's clock; nil the real one.
	Clock courier.Clock
	// Logger receives failed releases.
	Logger *slog.Logger
	// Released, when set, is told how many messages each release moved.
	Released func(n int)
}

// Timer says when to release, and releases. Its methods are safe for
// concurrent use.
type Timer struct {
	rel store.Releaser
	cfg Config

	mu       sync.Mutex
	next     time.Time // when to release next; zero: at once
	last     time.Time // when the last release ended
	failures int       // releases failed in a row
	poke     chan struct{}
}

// New returns a Timer that releases through rel, due at once.
func New(rel store.Releaser, cfg Config) *Timer {
	if cfg.Recheck <= 0 {
		cfg.Recheck = DefaultRecheck
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 50 * DefaultRecheck
	}
	cfg.Limit = max(cfg.Limit, 1)
	return &Timer{rel: rel, cfg: cfg, poke: make(chan struct{}, 1)}
}

// Poke says that a scheduled message may have been written: the timer
// wants a release within MinGap of the last one.
func (t *Timer) Poke() {
	t.mu.Lock()
	if soon := t.last.Add(MinGap); soon.Before(t.next) {
		t.next = soon
	}
	t.mu.Unlock()
	select {
	case t.poke <- struct{}{}:
	default:
	}
}

// Poked receives a value after Poke, for a loop that waits on the timer.
func (t *Timer) Poked() <-chan struct{} { return t.poke }

// Wait returns how long until the timer wants a release: 0 when it does
// now.
func (t *Timer) Wait() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return max(t.next.Sub(t.cfg.Clock.Now()), 0)
}

// Release releases when the timer wants it (Wait is 0), again at once
// while releases come back full, and sets when it wants the next. It
// returns how many messages it moved; a failure is logged and tried again
// after a backoff.
func (t *Timer) Release(ctx context.Context) int {
	if t.Wait() > 0 {
		return 0
	}
	moved := 0
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
		r, err := t.rel.Release(rctx, t.cfg.Limit)
		cancel()
		if err != nil {
			t.failed(ctx, err)
			return moved
		}
		moved += r.Count
		if r.Count > 0 && t.cfg.Released != nil {
			t.cfg.Released(r.Count)
		}
		if r.Count < t.cfg.Limit || r.Busy {
			t.schedule(r)
			return moved
		}
	}
	return moved
}

// schedule sets when to release after r, a release that was not full.
func (t *Timer) schedule(r store.Released) {
	wait := t.cfg.Recheck
	switch {
	case r.Busy: // another relay releases now: look again soon
		wait = MinGap
	case r.Waiting:
		wait = min(max(r.Next, MinGap), t.cfg.Recheck)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failures = 0
	t.last = t.cfg.Clock.Now()
	t.next = t.last.Add(wait)
}

// releaseRetry spaces the attempts after failed releases.
var releaseRetry = courier.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}

// failed notes a failed release and sets when to try again.
func (t *Timer) failed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failures++
	delay := releaseRetry.Delay(t.failures)
	t.cfg.Logger.Warn("releasing scheduled messages failed; retrying", "error", err, "retry_in", delay)
	t.next = t.cfg.Clock.Now().Add(delay)
}
