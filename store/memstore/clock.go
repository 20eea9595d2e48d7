package memstore

import (
	"sync"
	"time"
)

// Clock is a clock for tests of stores: its Now is a store.Clock (and
// Config.Clock) that moves forward when the test says so, so that leases
// expire, retries fall due and Idempotency-Key locks and records end
// without the test sleeping.
//
// A new Clock runs with the real time plus an offset that Advance moves
// forward, so that everything else (timers, a relay's polling, rows whose
// creation time the database sets) keeps its pace. Set stops it at an
// instant, for tests that check a deadline to the microsecond; from then
// on it moves only when advanced or set. The zero value is a running clock,
// ready to use; a Clock is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	offset  time.Duration // running: added to the real time
	stopped bool
	at      time.Time // stopped: the time
}

// NewClock returns a running Clock that reads the real time until advanced
// or set.
func NewClock() *Clock { return new(Clock) }

// Now returns the clock's time: the real time plus the offset, or the
// instant it was stopped at, moved on by later advances.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return c.at
	}
	return time.Now().Add(c.offset)
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		c.at = c.at.Add(d)
		return
	}
	c.offset += d
}

// Set stops the clock at t, truncated to the microsecond (the precision
// every dialect stores), in UTC.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped, c.at = true, t.UTC().Truncate(time.Microsecond)
}
