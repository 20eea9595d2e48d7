// Package waits holds the waiting that Courier's long-running loops (the
// relay, the inbox consumer) share: a sleep that a context cuts short, a
// wait for a deadline on a courier.Clock, and the context that keeps work
// in flight going for a bounded grace period after shutdown begins.
package waits

import (
	"context"
	"time"

	"github.com/courier-go/courier"
)

// Sleep waits d or until ctx ends, and reports whether ctx is still live.
// A d of zero or less does not wait.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// ClockPoll is how often [Until] reads a clock other than the real one.
const ClockPoll = 10 * time.Millisecond

// Until waits until clock reads deadline or later, or until ctx ends, and
// reports whether ctx is still live. On the real clock (nil) it sleeps
// once. Any other clock may be moved at any moment and no timer hears of
// it (a test advances its clock past a backoff instead of waiting it out),
// so Until reads it again every ClockPoll; a clock stopped at an instant
// keeps Until waiting until it is moved past deadline.
func Until(ctx context.Context, clock courier.Clock, deadline time.Time) bool {
	for {
		left := deadline.Sub(clock.Now())
		if left <= 0 {
			return ctx.Err() == nil
		}
		if clock != nil {
			left = min(left, ClockPoll)
		}
		if !Sleep(ctx, left) {
			return false
		}
	}
}

// Grace returns a context for work in flight at shutdown: it carries ctx's
// values, is not cancelled when ctx ends, and ends grace after ctx ends (or
// when cancel is called). Call cancel once the work is over.
func Grace(ctx context.Context, grace time.Duration) (work context.Context, cancel context.CancelFunc) {
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	stopAfter := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(grace, cancelWork)
		context.AfterFunc(work, func() { t.Stop() })
	})
	return work, func() {
		stopAfter()
		cancelWork()
	}
}
