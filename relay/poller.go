package relay

import (
	"context"
	"log/slog"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// poller decides how long the claim loop waits between claims: it polls
// while the relay is busy, letting writers commit without signalling, and
// after a few empty polls arms the notifier and waits for a signal.
type poller struct {
	n            store.Notifier // nil: polling only
	log          *slog.Logger
	batchSize    int
	pollInterval time.Duration
	armed        bool
	idle         courier.Backoff // the waits while no work is found: IdleDelay doubling to PollInterval
	idleRuns     int             // the empty claims since work ran out, while their wait still grows
}

// next returns what follows a claim of n rows: claim again at once (again),
// or wait up to wait.
func (p *poller) next(ctx context.Context, n int) (wait time.Duration, again bool) {
	switch {
	case n > 0:
		p.idleRuns = 0
		if p.armed {
			p.armed = false
			if err := p.n.Disarm(ctx); err != nil {
				p.log.Debug("disarm wake-ups", "error", err)
			}
		}
		if n == p.batchSize {
			return 0, true
		}
		return p.idle.Initial, false
	case p.armed:
		return p.pollInterval, false
	case p.n == nil || p.idle.Delay(p.idleRuns+1) < armAfter:
		return p.backOff(), false
	}
	ok, err := p.n.Arm(ctx)
	if err != nil {
		p.log.Debug("arm wake-ups", "error", err)
	}
	if ok {
		// Rows committed before arming sent no signal: look once more.
		p.armed = true
		return 0, true
	}
	// A writer is mid-transaction (or the listener is down): its rows come
	// soon, so look again shortly.
	return p.backOff(), false
}

// backOff returns the current idle wait and doubles the next one, up to
// the poll interval.
func (p *poller) backOff() time.Duration {
	d := p.idle.Delay(p.idleRuns + 1)
	if d < p.idle.Max {
		p.idleRuns++
	}
	return d
}

// wake returns the notifier's wake-ups, nil without a notifier.
func (p *poller) wake() <-chan struct{} {
	if p.n == nil {
		return nil
	}
	return p.n.Wake()
}

// disarm withdraws an armed notifier when the loop ends.
func (p *poller) disarm(ctx context.Context) {
	if p.armed {
		_ = p.n.Disarm(ctx)
	}
}
