package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/internal/waits"
	"github.com/courier-go/courier/relay/internal/dispatch"
	"github.com/courier-go/courier/relay/internal/due"
	"github.com/courier-go/courier/store"
)

// Relay moves messages from a store to a broker. Create it with New and
// start it with Run.
type Relay struct {
	store store.RelayStore
	pub   broker.Publisher
	cfg   Config
	log   *slog.Logger

	running atomic.Bool
	kick    chan struct{} // a batch finished: its keys may have more rows

	disp *dispatch.Dispatcher
	due  *due.Timer // when to release scheduled messages

	mu      sync.Mutex
	retryAt time.Time // earliest retry this relay scheduled
	state   State     // what State reports, but the broker's, Metrics and At

	published, retried, dead, released, batches atomic.Int64
}

// New returns a relay that claims from st and publishes with pub. It fails
// when the configuration is invalid, naming the field.
func New(st store.RelayStore, pub broker.Publisher, cfg Config) (*Relay, error) {
	if st == nil || pub == nil {
		return nil, errors.New("relay: New needs a store and a publisher")
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("relay", cfg.Owner)
	disp := dispatch.New(pub, dispatch.Config{Policy: dispatch.Policy{MaxAttempts: cfg.MaxAttempts, Backoff: cfg.Backoff},
		Clock: cfg.Clock, Logger: log, Observer: cfg.Observer, TracerProvider: cfg.TracerProvider, Holds: dispatch.NewHolds(cfg.HoldKeys)})
	timer := due.New(st, due.Config{Limit: cfg.BatchSize, Recheck: cfg.ReleaseInterval, Timeout: cfg.LeaseDuration, Clock: cfg.Clock, Logger: log, Released: cfg.Observer.Released})
	return &Relay{store: st, pub: pub, cfg: cfg, log: log, disp: disp, due: timer, kick: make(chan struct{}, 1)}, nil
}

// Owner returns the name this relay leases rows under.
func (r *Relay) Owner() string { return r.cfg.Owner }

// Run relays messages until ctx ends, then shuts down gracefully (see the
// package documentation) and returns nil. Errors from the database or the
// broker are logged and retried, never returned: watch State (see Watching a
// relay in the package documentation). Run may be called once.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("relay: Run called twice")
	}
	// Work in flight outlives ctx by at most ShutdownTimeout.
	work, cancelWork := waits.Grace(ctx, r.cfg.ShutdownTimeout)
	defer cancelWork()

	var wg sync.WaitGroup
	if n := r.cfg.Notifier; n != nil {
		nctx, stop := context.WithCancel(ctx)
		defer stop()
		wg.Go(func() {
			if err := n.Run(nctx); err != nil && nctx.Err() == nil {
				r.log.Error("wake-up notifier stopped; polling only", "error", err)
			}
		})
	}
	r.setRunning(true)
	r.log.Info("relay started", "batch_size", r.cfg.BatchSize, "concurrency", r.cfg.Concurrency, "lease", r.cfg.LeaseDuration)
	r.claimLoop(ctx, work, &wg)
	r.log.Info("relay stopping: finishing batches in flight")
	wg.Wait()
	r.setRunning(false)
	r.log.Info("relay stopped")
	return nil
}

const (
	// leaseMargin is kept between the last write of a batch and its lease's
	// end, against clock drift between relay and database.
	leaseMargin = 500 * time.Millisecond
	// armAfter: once polls have backed off this far without finding work,
	// the relay arms the notifier and waits for a signal instead.
	armAfter = 8 * time.Millisecond
)

var (
	// claimRetry spaces the claims after a failed one.
	claimRetry = courier.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	// completeRetry spaces the attempts to record a batch's outcome.
	completeRetry = courier.Backoff{Initial: 50 * time.Millisecond, Max: 2 * time.Second}
)

// claimLoop claims batches until ctx ends, at most Concurrency of them
// publishing at once, each in a goroutine of wg. Between claims it polls
// or waits for a wake-up (see Wake-ups in the package documentation).
func (r *Relay) claimLoop(ctx, work context.Context, wg *sync.WaitGroup) {
	slots := make(chan struct{}, r.cfg.Concurrency)
	p := &poller{n: r.cfg.Notifier, log: r.log, batchSize: r.cfg.BatchSize, pollInterval: r.cfg.PollInterval,
		idle: courier.Backoff{Initial: min(r.cfg.IdleDelay, r.cfg.PollInterval), Max: r.cfg.PollInterval}}
	defer p.disarm(context.WithoutCancel(ctx))
	failures := 0 // consecutive failed claims
	for {
		if !r.sleepOutPause(ctx) {
			return
		}
		r.due.Release(ctx) // the scheduled messages that are due, if the timer says so
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n, err := r.claimBatch(ctx, work, wg, slots)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			delay := claimRetry.Delay(failures)
			r.log.Warn("claim failed; retrying", "error", err, "retry_in", delay)
			if !waits.Sleep(ctx, delay) {
				return
			}
			continue
		}
		failures = 0
		wait, again := p.next(ctx, n)
		if again {
			continue
		}
		if !r.idle(ctx, p.wake(), wait) {
			return
		}
	}
}

// claimBatch claims a batch for the slot the caller took, and returns how
// many rows it holds. A batch with rows is published in a goroutine of wg,
// which frees the slot when it is done; otherwise the slot is freed at once.
func (r *Relay) claimBatch(ctx, work context.Context, wg *sync.WaitGroup, slots chan struct{}) (int, error) {
	claimed := r.cfg.Clock.Now()
	batch, err := r.claim(ctx)
	r.noteClaim(err, ctx.Err() != nil)
	if err != nil || len(batch.Records) == 0 {
		<-slots
		return 0, err
	}
	r.batches.Add(1)
	r.cfg.Observer.Claimed(len(batch.Records))
	wg.Go(func() {
		defer func() { <-slots; r.signalKick() }()
		r.process(ctx, work, claimed, batch)
	})
	return len(batch.Records), nil
}

// idle waits up to wait, less when a retry this relay scheduled or a
// scheduled message falls due, for a wake-up, a finished batch or the end
// of ctx. It reports whether ctx is still live.
func (r *Relay) idle(ctx context.Context, wake <-chan struct{}, wait time.Duration) bool {
	if d := r.until(r.nextRetry()); d < wait {
		wait = max(d, 0)
	}
	wait = min(wait, r.due.Wait())
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-wake:
		r.due.Poke() // the commit may have scheduled a message due sooner
	case <-r.kick:
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	return true
}

// claim leases a batch. A claim that has not answered within LeaseDuration
// fails: its lease would be over before its rows were published, and a
// database that hangs must show as failing claims (State), not as silence.
func (r *Relay) claim(ctx context.Context) (store.Batch, error) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.LeaseDuration)
	defer cancel()
	batch, err := r.store.Claim(cctx, r.cfg.Owner, r.cfg.BatchSize, r.cfg.LeaseDuration)
	if err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
		return batch, fmt.Errorf("relay: claim did not finish within LeaseDuration (%s); is the database overloaded or unreachable? %w", r.cfg.LeaseDuration, err)
	}
	return batch, err
}

func (r *Relay) signalKick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *Relay) pausedUntil() time.Time { return r.disp.Outage().PausedUntil }

// sleepOutPause waits while the broker is held down, looking at the clock
// at least every PollInterval (a test's clock moves without a timer
// knowing), and reports whether ctx is still live.
func (r *Relay) sleepOutPause(ctx context.Context) bool {
	for d := r.until(r.pausedUntil()); d > 0; d = r.until(r.pausedUntil()) {
		if !waits.Sleep(ctx, min(d, r.cfg.PollInterval)) {
			return false
		}
	}
	return ctx.Err() == nil
}

// until is how long until t by the relay's clock.
func (r *Relay) until(t time.Time) time.Duration { return t.Sub(r.cfg.Clock.Now()) }

func (r *Relay) nextRetry() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cfg.Clock.Now()
	if r.retryAt.IsZero() {
		return now.Add(24 * time.Hour)
	}
	if !r.retryAt.After(now) {
		r.retryAt = time.Time{} // due now; claim will see it
		return now
	}
	return r.retryAt
}
