package tenant

import (
	"context"
	"sync/atomic"
)

// slots bounds the tenants served at once. Goroutines blocked on a full
// channel are woken first come, first served, so tenants waiting for a
// slot take turns.
type slots struct {
	c       chan struct{}
	waiters atomic.Int64
}

func newSlots(n int) *slots { return &slots{c: make(chan struct{}, n)} }

// acquire waits for a slot and reports whether it got one before ctx ended.
func (s *slots) acquire(ctx context.Context) bool {
	select {
	case s.c <- struct{}{}:
		return true
	default:
	}
	s.waiters.Add(1)
	defer s.waiters.Add(-1)
	select {
	case s.c <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *slots) release() { <-s.c }

// waiting reports whether a tenant waits for a slot.
func (s *slots) waiting() bool { return s.waiters.Load() > 0 }

// inUse is how many slots are taken.
func (s *slots) inUse() int { return len(s.c) }
