package memstore

import (
	"sync"
	"time"
)

// Clock is a clock for tests: the real time plus an offset that Advance
// moves forward, so that a store's leases and retries fall due at once
// while everything else (timers, the relay's polling) keeps running. Pass
// its Now as Config.Now. The zero value is ready to use and safe for
// concurrent use.
type Clock struct {
	mu     sync.Mutex
	offset time.Duration
}

// NewClock returns a Clock that reads the real time until advanced.
func NewClock() *Clock { return new(Clock) }

// Now returns the real time plus the offset.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}
