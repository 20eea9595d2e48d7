package relay

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/store"
)

// Config tunes a Relay. Zero fields take the defaults given.
type Config struct {
	// BatchSize is the most rows one claim leases. Default 1000.
	BatchSize int
	// Concurrency is how many claimed batches may be publishing at once.
	// Default 2: one publishing while the next is claimed.
	Concurrency int
	// LeaseDuration is how long claimed rows stay reserved for this relay.
	// If the relay dies, other relays take the rows over after this long.
	// Default 30s. It must exceed PublishTimeout.
	LeaseDuration time.Duration
	// PublishTimeout bounds publishing one batch. Default 10s.
	PublishTimeout time.Duration
	// MaxAttempts is how many counted failures make a dead letter.
	// Default 10. A failure the broker calls permanent
	// (broker.ErrRejected) makes one at once.
	MaxAttempts int
	// Backoff spaces retries.
	Backoff Backoff
	// PollInterval is how often an idle relay looks for work when no
	// wake-up arrives. Default 1s.
	PollInterval time.Duration
	// ShutdownTimeout bounds the work done after Run's context ends.
	// Default 15s.
	ShutdownTimeout time.Duration
	// Notifier, if set, wakes the relay soon after commits.
	Notifier store.Notifier
	// Owner names this relay in leases. Default host-pid-random.
	Owner string
	// Logger receives the relay's logs. Default: discard.
	Logger *slog.Logger
}

// Backoff is courier.Backoff, kept here so relay configurations read
// naturally.
type Backoff = courier.Backoff

func (c *Config) setDefaults() {
	if c.BatchSize == 0 {
		c.BatchSize = 1000
	}
	if c.Concurrency == 0 {
		c.Concurrency = 2
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 30 * time.Second
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = min(10*time.Second, c.LeaseDuration/2)
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 10
	}
	if c.Backoff.Initial == 0 {
		c.Backoff.Initial = 500 * time.Millisecond
	}
	if c.Backoff.Max == 0 {
		c.Backoff.Max = time.Minute
	}
	if c.Backoff.Jitter == 0 {
		c.Backoff.Jitter = 0.2
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 15 * time.Second
	}
	if c.Owner == "" {
		c.Owner = defaultOwner()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

func (c *Config) validate() error {
	switch {
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return fmt.Errorf("relay: Config.BatchSize is %d: use 1 to 10000", c.BatchSize)
	case c.Concurrency < 1:
		return fmt.Errorf("relay: Config.Concurrency is %d: use 1 or more", c.Concurrency)
	case c.LeaseDuration < time.Second:
		return fmt.Errorf("relay: Config.LeaseDuration is %s: use at least 1s", c.LeaseDuration)
	case c.PublishTimeout <= 0 || c.PublishTimeout >= c.LeaseDuration-leaseMargin:
		return fmt.Errorf("relay: Config.PublishTimeout is %s: use more than 0 and less than LeaseDuration (%s)", c.PublishTimeout, c.LeaseDuration)
	case c.MaxAttempts < 1:
		return fmt.Errorf("relay: Config.MaxAttempts is %d: use 1 or more", c.MaxAttempts)
	case c.Backoff.Initial < 0 || c.Backoff.Max < c.Backoff.Initial:
		return fmt.Errorf("relay: Config.Backoff is %s..%s: Initial must be at least 0 and Max at least Initial", c.Backoff.Initial, c.Backoff.Max)
	case c.Backoff.Jitter > 1:
		return fmt.Errorf("relay: Config.Backoff.Jitter is %g: use 0 to 1", c.Backoff.Jitter)
	case c.PollInterval <= 0:
		return fmt.Errorf("relay: Config.PollInterval is %s: use more than 0", c.PollInterval)
	case c.ShutdownTimeout <= 0:
		return fmt.Errorf("relay: Config.ShutdownTimeout is %s: use more than 0", c.ShutdownTimeout)
	}
	return nil
}

func defaultOwner() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = cryptoRead(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

var cryptoRead = crand.Read

// Metrics are a relay's running totals.
type Metrics struct {
	// Published counts messages the broker acknowledged.
	Published int64
	// Retried counts failed publishes that will be retried.
	Retried int64
	// DeadLettered counts messages parked after MaxAttempts, or at once
	// when the broker rejected them for good (broker.ErrRejected).
	DeadLettered int64
	// Released counts claimed messages handed back unattempted.
	Released int64
	// Batches counts claimed batches.
	Batches int64
}

// Relay moves messages from a store to a broker. Create it with New and
// start it with Run.
type Relay struct {
	store store.RelayStore
	pub   broker.Publisher
	cfg   Config
	log   *slog.Logger

	running atomic.Bool
	kick    chan struct{} // a batch finished: its keys may have more rows

	mu        sync.Mutex
	retryAt   time.Time // earliest retry this relay scheduled
	pauseTill time.Time // broker down: claim nothing until then
	outages   int       // consecutive batches lost to broker.ErrUnavailable

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
	return &Relay{store: st, pub: pub, cfg: cfg, log: cfg.Logger.With("relay", cfg.Owner), kick: make(chan struct{}, 1)}, nil
}

// Owner returns the name this relay leases rows under.
func (r *Relay) Owner() string { return r.cfg.Owner }

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

// Run relays messages until ctx ends, then shuts down gracefully (see the
// package documentation) and returns nil. Errors from the database or the
// broker are logged and retried, never returned. Run may be called once.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("relay: Run called twice")
	}
	// Work in flight outlives ctx by at most ShutdownTimeout.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stopAfter := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(r.cfg.ShutdownTimeout, cancelWork)
		context.AfterFunc(work, func() { t.Stop() })
	})
	defer stopAfter()

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
	r.log.Info("relay started", "batch_size", r.cfg.BatchSize, "concurrency", r.cfg.Concurrency, "lease", r.cfg.LeaseDuration)
	r.claimLoop(ctx, work, &wg)
	r.log.Info("relay stopping: finishing batches in flight")
	wg.Wait()
	r.log.Info("relay stopped")
	return nil
}

const (
	// leaseMargin is kept between the last write of a batch and its lease's
	// end, against clock drift between relay and database.
	leaseMargin = 500 * time.Millisecond
	// minIdleDelay is the first poll interval after work ran out.
	minIdleDelay = time.Millisecond
	// armAfter: once polls have backed off this far without finding work,
	// the relay arms the notifier and waits for a signal instead.
	armAfter    = 8 * time.Millisecond
	maxErrDelay = 5 * time.Second
)

func (r *Relay) claimLoop(ctx, work context.Context, wg *sync.WaitGroup) {
	slots := make(chan struct{}, r.cfg.Concurrency)
	n := r.cfg.Notifier
	armed := false
	idleDelay := minIdleDelay
	errDelay := 100 * time.Millisecond
	defer func() {
		if armed {
			_ = n.Disarm(context.WithoutCancel(ctx))
		}
	}()
	for {
		if !r.sleep(ctx, time.Until(r.pausedUntil())) {
			return
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		claimed := time.Now()
		batch, err := r.store.Claim(ctx, r.cfg.Owner, r.cfg.BatchSize, r.cfg.LeaseDuration)
		recs := batch.Records
		if err != nil {
			<-slots
			if ctx.Err() != nil {
				return
			}
			r.log.Warn("claim failed; retrying", "error", err, "retry_in", errDelay)
			if !r.sleep(ctx, errDelay) {
				return
			}
			errDelay = min(errDelay*2, maxErrDelay)
			continue
		}
		errDelay = 100 * time.Millisecond
		if len(recs) == 0 {
			<-slots
		} else {
			r.batches.Add(1)
			wg.Go(func() {
				defer func() { <-slots; r.signalKick() }()
				r.process(ctx, work, claimed, batch)
			})
		}

		// Busy: poll, and let writers commit without signalling. Quiet for
		// a few polls: arm the notifier and wait for a signal.
		var wait time.Duration
		switch {
		case len(recs) > 0:
			idleDelay = minIdleDelay
			if armed {
				armed = false
				if err := n.Disarm(ctx); err != nil {
					r.log.Debug("disarm wake-ups", "error", err)
				}
			}
			if len(recs) == r.cfg.BatchSize {
				continue
			}
			wait = idleDelay
		case armed:
			wait = r.cfg.PollInterval
		case n == nil || idleDelay < armAfter:
			wait, idleDelay = idleDelay, min(idleDelay*2, r.cfg.PollInterval)
		default:
			ok, err := n.Arm(ctx)
			if err != nil {
				r.log.Debug("arm wake-ups", "error", err)
			}
			if ok {
				// Rows committed before arming sent no signal: look once more.
				armed = true
				continue
			}
			// A writer is mid-transaction (or the listener is down): its
			// rows come soon, so look again shortly.
			wait, idleDelay = idleDelay, min(idleDelay*2, r.cfg.PollInterval)
		}
		if d := time.Until(r.nextRetry()); d < wait {
			wait = max(d, 0)
		}
		var wake <-chan struct{}
		if n != nil {
			wake = n.Wake()
		}
		t := time.NewTimer(wait)
		select {
		case <-wake:
		case <-r.kick:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		t.Stop()
	}
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func (r *Relay) sleep(ctx context.Context, d time.Duration) bool {
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

func (r *Relay) signalKick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *Relay) pausedUntil() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pauseTill
}

func (r *Relay) nextRetry() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.retryAt.IsZero() {
		return time.Now().Add(24 * time.Hour)
	}
	if !r.retryAt.After(time.Now()) {
		r.retryAt = time.Time{} // due now; claim will see it
		return time.Now()
	}
	return r.retryAt
}

// process publishes one claimed batch key by key (see the package
// documentation) and records the outcome. Rounds stop when ctx ends; work
// bounds the whole of it. claimed is when the claim started: the lease ends
// LeaseDuration after it at the latest.
func (r *Relay) process(ctx, work context.Context, claimed time.Time, batch store.Batch) {
	recs := batch.Records
	leaseEnd := claimed.Add(r.cfg.LeaseDuration - leaseMargin)
	pubDeadline := time.Now().Add(r.cfg.PublishTimeout)
	if leaseEnd.Before(pubDeadline) {
		pubDeadline = leaseEnd
	}
	pubCtx, cancel := context.WithDeadline(work, pubDeadline)
	defer cancel()
	released := 0

	chains := chainsByKey(recs)
	var out store.Outcome
	msgs := make([]courier.Message, 0, len(chains))
	idx := make([]int, 0, len(chains))
	anyOK, allDown := false, true
	for len(chains) > 0 {
		if ctx.Err() != nil || pubCtx.Err() != nil {
			break
		}
		msgs, idx = msgs[:0], idx[:0]
		for _, c := range chains {
			i := c[0]
			msgs = append(msgs, recs[i].Message)
			idx = append(idx, i)
		}
		errs := r.pub.Publish(pubCtx, msgs)
		next := chains[:0]
		for j, c := range chains {
			rec := &recs[idx[j]]
			if err := errs[j]; err != nil {
				r.fail(&out, rec, err)
				if !errors.Is(err, broker.ErrUnavailable) {
					allDown = false
				}
				released += len(c) - 1 // later messages of the key wait
				continue
			}
			anyOK, allDown = true, false
			out.Published = append(out.Published, rec.Seq)
			if len(c) > 1 {
				next = append(next, c[1:])
			}
		}
		chains = next
	}
	for _, c := range chains { // shutdown or timeout: hand back the rest
		released += len(c)
	}
	r.noteBroker(anyOK, allDown && (len(out.Retry) > 0 || len(out.Dead) > 0))
	if r.complete(work, leaseEnd, batch.Lease, out) {
		r.released.Add(int64(released))
	}
}

// chainsByKey groups record indexes by key, keeping Seq order within a key
// and first-appearance order across keys.
func chainsByKey(recs []store.Record) [][]int {
	pos := make(map[string]int, len(recs))
	var chains [][]int
	for i := range recs {
		k := recs[i].Message.Key
		if p, ok := pos[k]; ok {
			chains[p] = append(chains[p], i)
			continue
		}
		pos[k] = len(chains)
		chains = append(chains, []int{i})
	}
	return chains
}

func (r *Relay) fail(out *store.Outcome, rec *store.Record, err error) {
	f := store.Failure{Seq: rec.Seq, Error: err.Error()}
	if errors.Is(err, broker.ErrUnavailable) {
		r.mu.Lock()
		f.Delay = r.cfg.Backoff.Delay(r.outages + 1)
		r.mu.Unlock()
	} else {
		f.Counted = true
		attempts := rec.Attempts + 1
		if permanent := errors.Is(err, broker.ErrRejected); permanent || attempts >= r.cfg.MaxAttempts {
			out.Dead = append(out.Dead, f)
			r.log.Error("message dead-lettered", "message_id", rec.Message.ID, "key", rec.Message.Key,
				"topic", rec.Message.Topic, "attempts", attempts, "permanent", permanent, "error", err)
			return
		}
		f.Delay = r.cfg.Backoff.Delay(attempts)
		r.log.Warn("publish failed; will retry", "message_id", rec.Message.ID, "key", rec.Message.Key,
			"attempt", attempts, "retry_in", f.Delay, "error", err)
	}
	out.Retry = append(out.Retry, f)
	r.mu.Lock()
	if at := time.Now().Add(f.Delay); r.retryAt.IsZero() || at.Before(r.retryAt) {
		r.retryAt = at
	}
	r.mu.Unlock()
}

// noteBroker tracks outages: while whole batches fail because the broker is
// unavailable, claiming pauses with a growing backoff.
func (r *Relay) noteBroker(anyOK, allDown bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case anyOK:
		if r.outages > 0 {
			r.log.Info("broker is back")
		}
		r.outages = 0
	case allDown:
		r.outages++
		d := r.cfg.Backoff.Delay(r.outages)
		r.pauseTill = time.Now().Add(d)
		r.log.Warn("broker unavailable; pausing", "pause", d, "consecutive", r.outages)
	}
}

// complete records the outcome, retrying until it succeeds or the lease is
// about to end (the rows are then claimed again and re-published: a
// duplicate, never a loss). No attempt outlives the lease, so a relay never
// writes to rows another relay may have taken over.
func (r *Relay) complete(work context.Context, leaseEnd time.Time, lease int64, out store.Outcome) bool {
	delay := 50 * time.Millisecond
	for {
		cctx, cancel := context.WithDeadline(work, leaseEnd)
		err := r.store.Complete(cctx, r.cfg.Owner, lease, out)
		cancel()
		if err == nil {
			break
		}
		if work.Err() != nil || time.Now().Add(delay).After(leaseEnd) {
			r.log.Error("could not record batch outcome; its messages will be published again after the lease",
				"error", err, "published", len(out.Published))
			return false
		}
		r.log.Warn("record batch outcome failed; retrying", "error", err, "retry_in", delay)
		if !r.sleep(work, delay) {
			return false
		}
		delay = min(delay*2, 2*time.Second)
	}
	r.published.Add(int64(len(out.Published)))
	r.retried.Add(int64(len(out.Retry)))
	r.dead.Add(int64(len(out.Dead)))
	return true
}
