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

	"go.opentelemetry.io/otel/trace"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/internal/waits"
	"github.com/courier-go/courier/relay/internal/dispatch"
	"github.com/courier-go/courier/store"
)

// Config tunes a Relay. Zero fields take the defaults given.
type Config struct {
	// BatchSize is the most rows one claim leases, 1 to 10000. Default
	// DefaultBatchSize (1000).
	BatchSize int
	// Concurrency is how many claimed batches may be publishing at once,
	// 1 to 64. Default DefaultConcurrency (2): one publishing while the
	// next is claimed.
	Concurrency int
	// LeaseDuration is how long claimed rows stay reserved for this relay,
	// at least 1s. If the relay dies, other relays take the rows over after
	// this long. Default DefaultLeaseDuration (30s). It must exceed
	// PublishTimeout by more than half a second.
	LeaseDuration time.Duration
	// PublishTimeout bounds publishing one batch. Default
	// DefaultPublishTimeout (10s), or LeaseDuration/2 when that is shorter.
	// A batch's publishing also stops half a second before its lease ends,
	// whichever comes first.
	PublishTimeout time.Duration
	// MaxAttempts is how many counted failures make a dead letter.
	// Default DefaultMaxAttempts (10). A failure the broker calls permanent
	// (broker.ErrRejected) makes one at once.
	MaxAttempts int
	// Backoff spaces retries, and the pauses while the broker is
	// unavailable. Each zero field takes its default:
	// DefaultBackoffInitial (500ms), DefaultBackoffMax (1m),
	// DefaultBackoffJitter (0.2).
	Backoff Backoff
	// PollInterval is how often an idle relay looks for work when no
	// wake-up arrives. Default DefaultPollInterval (1s); wiring code
	// usually takes the dialect's (store.Database PollInterval).
	PollInterval time.Duration
	// ShutdownTimeout bounds the work done after Run's context ends.
	// Default DefaultShutdownTimeout (15s).
	ShutdownTimeout time.Duration
	// Notifier, if set, wakes the relay soon after commits.
	Notifier store.Notifier
	// Owner names this relay in leases. Default host-pid-random.
	Owner string
	// Clock is the time the relay measures leases, retries, pauses and its
	// State with. Default: the real clock. (The store compares times with
	// its own, see store.Clock.)
	Clock courier.Clock
	// Logger receives the relay's logs. Default: discard.
	Logger *slog.Logger
	// Observer, if set, is told of claims, publishes and outcomes as they
	// happen: package metrics implements it. Default: none.
	Observer Observer
	// TracerProvider makes the relay's send spans, one per call to the
	// broker, linked to the trace context each message carries (see
	// Tracing in the package documentation). Default
	// otel.GetTracerProvider(), which records nothing unless the program
	// installed an SDK.
	TracerProvider trace.TracerProvider
}

// Backoff is courier.Backoff, kept here so relay configurations read
// naturally.
type Backoff = courier.Backoff

// The defaults of Config's zero fields; the first seven are the CDC
// relay's (relay/cdc) too, and so are the ranges of its fields that have
// the same names.
const (
	DefaultBatchSize       = dispatch.DefaultBatchSize
	DefaultConcurrency     = dispatch.DefaultConcurrency
	DefaultPublishTimeout  = dispatch.DefaultPublishTimeout // at most LeaseDuration/2
	DefaultMaxAttempts     = dispatch.DefaultMaxAttempts
	DefaultBackoffInitial  = dispatch.DefaultBackoffInitial
	DefaultBackoffMax      = dispatch.DefaultBackoffMax
	DefaultBackoffJitter   = dispatch.DefaultBackoffJitter
	DefaultLeaseDuration   = 30 * time.Second
	DefaultPollInterval    = time.Second
	DefaultShutdownTimeout = 15 * time.Second
)

// settings are the fields the CDC relay shares.
func (c *Config) settings() *dispatch.Settings {
	return &dispatch.Settings{BatchSize: c.BatchSize, Concurrency: c.Concurrency, PublishTimeout: c.PublishTimeout,
		MaxAttempts: c.MaxAttempts, Backoff: c.Backoff}
}

func (c *Config) setDefaults() {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	s := c.settings()
	s.SetDefaults(min(DefaultPublishTimeout, c.LeaseDuration/2))
	c.BatchSize, c.Concurrency, c.PublishTimeout, c.MaxAttempts, c.Backoff = s.BatchSize, s.Concurrency, s.PublishTimeout, s.MaxAttempts, s.Backoff
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.Owner == "" {
		c.Owner = defaultOwner()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
}

func (c *Config) validate() error {
	if err := c.settings().Validate("relay: Config"); err != nil {
		return err
	}
	switch {
	case c.LeaseDuration < time.Second:
		return fmt.Errorf("relay: Config.LeaseDuration is %s: use at least 1s", c.LeaseDuration)
	case c.PublishTimeout >= c.LeaseDuration-leaseMargin:
		return fmt.Errorf("relay: Config.PublishTimeout is %s: use more than 0 and less than LeaseDuration (%s)", c.PublishTimeout, c.LeaseDuration)
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
		Clock: cfg.Clock, Logger: log, Observer: cfg.Observer, TracerProvider: cfg.TracerProvider})
	return &Relay{store: st, pub: pub, cfg: cfg, log: log, disp: disp, kick: make(chan struct{}, 1)}, nil
}

// Owner returns the name this relay leases rows under.
func (r *Relay) Owner() string { return r.cfg.Owner }

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
	// minIdleDelay is the first poll interval after work ran out.
	minIdleDelay = time.Millisecond
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
	p := &poller{n: r.cfg.Notifier, log: r.log, batchSize: r.cfg.BatchSize, pollInterval: r.cfg.PollInterval, idleDelay: minIdleDelay}
	defer p.disarm(context.WithoutCancel(ctx))
	failures := 0 // consecutive failed claims
	for {
		if !waits.Sleep(ctx, r.until(r.pausedUntil())) {
			return
		}
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

// idle waits up to wait, less when a retry this relay scheduled falls due,
// for a wake-up, a finished batch or the end of ctx. It reports whether ctx
// is still live.
func (r *Relay) idle(ctx context.Context, wake <-chan struct{}, wait time.Duration) bool {
	if d := r.until(r.nextRetry()); d < wait {
		wait = max(d, 0)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-wake:
	case <-r.kick:
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	return true
}

// poller decides how long the claim loop waits between claims: it polls
// while the relay is busy, letting writers commit without signalling, and
// after a few empty polls arms the notifier and waits for a signal.
type poller struct {
	n            store.Notifier // nil: polling only
	log          *slog.Logger
	batchSize    int
	pollInterval time.Duration
	armed        bool
	idleDelay    time.Duration // the next wait while no work is found
}

// next returns what follows a claim of n rows: claim again at once (again),
// or wait up to wait.
func (p *poller) next(ctx context.Context, n int) (wait time.Duration, again bool) {
	switch {
	case n > 0:
		p.idleDelay = minIdleDelay
		if p.armed {
			p.armed = false
			if err := p.n.Disarm(ctx); err != nil {
				p.log.Debug("disarm wake-ups", "error", err)
			}
		}
		if n == p.batchSize {
			return 0, true
		}
		return p.idleDelay, false
	case p.armed:
		return p.pollInterval, false
	case p.n == nil || p.idleDelay < armAfter:
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
	d := p.idleDelay
	p.idleDelay = min(p.idleDelay*2, p.pollInterval)
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

func (r *Relay) signalKick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *Relay) pausedUntil() time.Time { return r.disp.Outage().PausedUntil }

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

// process publishes one claimed batch key by key (see the package
// documentation) and records the outcome. Rounds stop when ctx ends; work
// bounds the whole of it. claimed is when the claim started: the lease ends
// LeaseDuration after it at the latest.
func (r *Relay) process(ctx, work context.Context, claimed time.Time, batch store.Batch) {
	recs := batch.Records
	leaseEnd := claimed.Add(r.cfg.LeaseDuration - leaseMargin)
	pubDeadline := r.cfg.Clock.Now().Add(r.cfg.PublishTimeout)
	if leaseEnd.Before(pubDeadline) {
		pubDeadline = leaseEnd
	}
	pubCtx, cancel := context.WithTimeout(work, r.until(pubDeadline))
	defer cancel()
	keys := keysOf(recs)
	var out store.Outcome
	released := 0
	items := make([][]dispatch.Item, 0, len(keys))
	for len(keys) > 0 && ctx.Err() == nil && pubCtx.Err() == nil {
		items = items[:0]
		for _, k := range keys {
			items = append(items, k.items)
		}
		next := keys[:0]
		for i, o := range r.disp.Round(pubCtx, items, len(recs)) {
			k := keys[i]
			for _, j := range o.Published {
				out.Published = append(out.Published, recs[k.idx[j]].Seq)
			}
			for _, f := range o.Dead {
				out.Dead = append(out.Dead, failure(recs[k.idx[f.Index]].Seq, f.Failure))
			}
			if f := o.Failed; f != nil {
				// Its key's later rows go back: the store holds them
				// until the retry (rule 1).
				out.Retry = append(out.Retry, failure(recs[k.idx[f.Index]].Seq, f.Failure))
				r.noteRetry(f.At.Add(f.Delay))
				released += len(k.idx) - o.Done - 1
				continue
			}
			if o.Done < len(k.idx) {
				next = append(next, key{idx: k.idx[o.Done:], items: k.items[o.Done:]})
			}
		}
		keys = next
	}
	for _, k := range keys { // shutdown or timeout: hand back the rest
		released += len(k.idx)
	}
	if r.complete(work, leaseEnd, batch.Lease, out) {
		r.released.Add(int64(released))
	}
}

// key is one key's records of a batch still to publish: their indexes in
// the batch, and the dispatcher's items.
type key struct {
	idx   []int
	items []dispatch.Item
}

// keysOf groups the records by key, keeping Seq order within a key and
// first-appearance order across keys.
func keysOf(recs []store.Record) []key {
	pos := make(map[string]int, len(recs))
	var keys []key
	for i := range recs {
		it := dispatch.Item{Message: recs[i].Message, Attempts: recs[i].Attempts}
		if p, ok := pos[it.Message.Key]; ok {
			keys[p].idx, keys[p].items = append(keys[p].idx, i), append(keys[p].items, it)
			continue
		}
		pos[it.Message.Key] = len(keys)
		keys = append(keys, key{idx: []int{i}, items: []dispatch.Item{it}})
	}
	return keys
}

// failure is the store's record of row seq's failure f.
func failure(seq int64, f dispatch.Failure) store.Failure {
	return store.Failure{Seq: seq, Error: f.Err.Error(), Delay: f.Delay, Counted: f.Counted}
}

// noteRetry keeps the earliest retry this relay scheduled, so that it
// claims when it falls due.
func (r *Relay) noteRetry(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.retryAt.IsZero() || at.Before(r.retryAt) {
		r.retryAt = at
	}
}

// complete records the outcome, retrying until it succeeds or the lease is
// about to end (the rows are then claimed again and re-published: a
// duplicate, never a loss). No attempt outlives the lease, so a relay never
// writes to rows another relay may have taken over.
func (r *Relay) complete(work context.Context, leaseEnd time.Time, lease int64, out store.Outcome) bool {
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(work, r.until(leaseEnd))
		err := r.store.Complete(cctx, r.cfg.Owner, lease, out)
		cancel()
		if err == nil || work.Err() == nil { // shutdown's deadline is no database failure
			r.noteComplete(err)
		}
		if err == nil {
			break
		}
		delay := completeRetry.Delay(attempt)
		if work.Err() != nil || r.cfg.Clock.Now().Add(delay).After(leaseEnd) {
			r.log.Error("could not record batch outcome; its messages will be published again after the lease",
				"error", err, "published", len(out.Published))
			r.cfg.Observer.LeaseLost(len(out.Published))
			return false
		}
		r.log.Warn("record batch outcome failed; retrying", "error", err, "retry_in", delay)
		if !waits.Sleep(work, delay) {
			return false
		}
	}
	r.published.Add(int64(len(out.Published)))
	r.retried.Add(int64(len(out.Retry)))
	r.dead.Add(int64(len(out.Dead)))
	r.cfg.Observer.Completed(len(out.Published), len(out.Retry), len(out.Dead))
	return true
}
