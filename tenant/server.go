package tenant

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/dburl"
)

// openRetry spaces the sessions of a tenant whose database failed: it
// waits outside the slots, so that a broken tenant does not hold a place.
var openRetry = courier.Backoff{Initial: time.Second, Max: 30 * time.Second}

// server serves one tenant: it takes turns at a slot, opens the tenant's
// database and runs a relay on it (a session) until the tenant is idle
// while others wait, or its database fails, or it stops being served.
type server struct {
	f      *Fleet
	t      Tenant
	log    *slog.Logger
	obs    relay.Observer
	ctx    context.Context
	stop   context.CancelFunc
	closed chan struct{}

	lastWork atomic.Int64 // Unix nanoseconds of the last claim with rows, or of the session's start

	mu       sync.Mutex
	relay    *relay.Relay // the session's; nil between sessions
	sessions int
	totals   relay.Metrics // of the ended sessions
	err      string        // why the last session failed; "" when it did not
	failing  time.Time     // when the failures in a row began
}

func (f *Fleet) newServer(ctx context.Context, t Tenant) *server {
	sctx, stop := context.WithCancel(ctx)
	s := &server{f: f, t: t, log: f.log.With("tenant", t.Name), ctx: sctx, stop: stop, closed: make(chan struct{})}
	var inner relay.Observer = relay.NopObserver{}
	if f.cfg.Observers != nil {
		inner = f.cfg.Observers(t.Name)
	}
	s.obs = workObserver{Observer: inner, s: s}
	return s
}

func (s *server) finished() { close(s.closed) }

// run takes turns until the tenant stops being served.
func (s *server) run() {
	failures := 0
	for s.ctx.Err() == nil {
		if !s.f.slots.acquire(s.ctx) {
			return
		}
		worked, err := s.session()
		s.f.slots.release()
		if worked || err == nil {
			failures = 0 // the next failure is the first of a new run
		}
		if err == nil {
			s.noteErr(nil)
			continue
		}
		if s.ctx.Err() != nil {
			return
		}
		failures++
		s.noteErr(err)
		delay := openRetry.Delay(failures)
		s.log.Warn("tenant's database failed; trying again later", "error", err, "retry_in", delay, "failures", failures)
		if !sleep(s.ctx, delay) {
			return
		}
	}
}

// session opens the tenant's database and relays from it until run's
// context ends, or another tenant waits for a slot while this one has
// been idle for IdleAfter or served for Turn. It fails when the database
// cannot be opened, or when the relay's claims were failing as it ended.
// worked reports that a claim of the session answered: the tenant's error
// is cleared as soon as one does, not when the session ends, which it
// does not while no other tenant waits for a slot.
func (s *server) session() (worked bool, err error) {
	cfg := s.f.cfg
	d, err := s.open()
	if err != nil {
		return false, err
	}
	defer d.Close()
	st, err := d.RelayStore(s.ctx, cfg.Store)
	if err != nil {
		return false, err
	}
	rc := cfg.Relay
	rc.Observer, rc.Logger = s.obs, slog.New(quiet{s.log.Handler()})
	if rc.PollInterval == 0 {
		rc.PollInterval = d.PollInterval()
	}
	if rc.ReleaseInterval == 0 {
		rc.ReleaseInterval = max(rc.PollInterval, relay.DefaultReleaseInterval)
	}
	if rc.IdleDelay == 0 {
		rc.IdleDelay = rc.PollInterval
	}
	r, err := relay.New(stamped{RelayStore: st, name: s.t.Name}, s.f.pub, rc)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	s.begin(r)
	defer s.end(r)
	var upkeep sync.WaitGroup
	if cfg.OnOpen != nil {
		upkeep.Go(func() { cfg.OnOpen(ctx, s.t, d) })
	}
	done := make(chan struct{})
	start := cfg.Clock.Now()
	go func() { _ = r.Run(ctx); close(done) }()
	tick := time.NewTicker(min(cfg.IdleAfter/4, 250*time.Millisecond))
	defer tick.Stop()
	for yielded := false; !yielded; {
		select {
		case <-done:
			yielded = true
		case <-tick.C:
			if rs := r.State(); rs.ClaimFailures == 0 && !rs.LastClaim.IsZero() {
				s.noteErr(nil) // its database works (again)
			}
			yielded = s.f.slots.waiting() && (s.idle(r, start) || cfg.Clock.Now().Sub(start) >= cfg.Turn)
		}
	}
	cancel()
	<-done
	upkeep.Wait()
	rs := r.State()
	worked = !rs.LastClaim.IsZero()
	if rs.ClaimFailures > 0 && s.ctx.Err() == nil {
		return worked, fmt.Errorf("claims failing: %s", rs.ClaimError)
	}
	return worked, nil
}

// open opens the tenant's database, once fewer than MaxConnecting are
// being opened.
func (s *server) open() (*dburl.DB, error) {
	select {
	case s.f.connecting <- struct{}{}:
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
	defer func() { <-s.f.connecting }()
	cfg := s.f.cfg
	return cfg.Open(s.ctx, s.t, dburl.Options{Flag: "tenant " + s.t.Name + "'s URL", MaxConns: cfg.Relay.Concurrency,
		ConnectTimeout: cfg.ConnectTimeout})
}

// idle reports whether the session's relay r, started at start, has
// claimed nothing for IdleAfter since a claim of this session answered:
// a session that has not claimed yet (its database is slow to answer)
// is not idle, but gives its place up after Turn all the same.
func (s *server) idle(r *relay.Relay, start time.Time) bool {
	if st := r.State(); st.LastClaim.Before(start) && st.ClaimFailures == 0 {
		return false
	}
	return time.Duration(s.f.cfg.Clock.Now().UnixNano()-s.lastWork.Load()) >= s.f.cfg.IdleAfter
}

// noteWork notes that the tenant's relay worked now.
func (s *server) noteWork() { s.lastWork.Store(s.f.cfg.Clock.Now().UnixNano()) }

func (s *server) begin(r *relay.Relay) {
	s.noteWork()
	s.mu.Lock()
	s.relay = r
	s.sessions++
	s.mu.Unlock()
}

func (s *server) end(r *relay.Relay) {
	m := r.State().Metrics
	s.mu.Lock()
	defer s.mu.Unlock()
	s.relay = nil
	addMetrics(&s.totals, m)
}

func addMetrics(to *relay.Metrics, m relay.Metrics) {
	to.Published += m.Published
	to.Retried += m.Retried
	to.DeadLettered += m.DeadLettered
	to.Released += m.Released
	to.Batches += m.Batches
}

func (s *server) noteErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil:
		s.err, s.failing = "", time.Time{}
	case s.failing.IsZero():
		s.err, s.failing = err.Error(), s.f.cfg.Clock.Now()
	default:
		s.err = err.Error()
	}
}

// workObserver notes when the tenant's relay last claimed rows.
type workObserver struct {
	relay.Observer
	s *server
}

// Claimed notes the work and tells the tenant's observer.
func (o workObserver) Claimed(n int) {
	o.s.noteWork()
	o.Observer.Claimed(n)
}

// Completed notes the work (a batch may publish for longer than
// IdleAfter) and tells the tenant's observer.
func (o workObserver) Completed(published, retried, dead int) {
	o.s.noteWork()
	o.Observer.Completed(published, retried, dead)
}

// quiet passes on warnings and errors only: a tenant's relay starts and
// stops with each session, which its info logs would tell each time.
type quiet struct{ slog.Handler }

// Enabled drops what is below slog.LevelWarn.
func (q quiet) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && q.Handler.Enabled(ctx, l)
}

// WithAttrs keeps the handler quiet.
func (q quiet) WithAttrs(as []slog.Attr) slog.Handler { return quiet{q.Handler.WithAttrs(as)} }

// WithGroup keeps the handler quiet.
func (q quiet) WithGroup(name string) slog.Handler { return quiet{q.Handler.WithGroup(name)} }
