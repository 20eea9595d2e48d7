package relay_test

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/postgres"
)

// Check's rule, on snapshots built by hand: the clock is the snapshot's At.
func TestStateCheck(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return at.Add(-d) }
	running := relay.State{At: at, Running: true, Started: ago(time.Hour), LastClaim: ago(time.Second)}
	with := func(f func(*relay.State)) relay.State { s := running; f(&s); return s }
	cases := []struct {
		name  string
		state relay.State
		grace time.Duration
		want  string // "" healthy, else in the error
	}{
		{"running", running, 0, ""},
		{"not started", relay.State{At: at}, time.Minute, "not started"},
		{"stopped", with(func(s *relay.State) { s.Running = false }), time.Minute, "stopped"},
		{"claims failing, young", with(func(s *relay.State) {
			s.ClaimError, s.ClaimFailures, s.ClaimFailingSince = "dial tcp: connection refused", 3, ago(10*time.Second)
		}), time.Minute, ""},
		{"claims failing, old", with(func(s *relay.State) {
			s.ClaimError, s.ClaimFailures, s.ClaimFailingSince = "dial tcp: connection refused", 30, ago(2*time.Minute)
		}), time.Minute, "claims have failed for 2m0s (30 in a row), last: dial tcp: connection refused: check that the database"},
		{"claims failing, no grace", with(func(s *relay.State) {
			s.ClaimError, s.ClaimFailures, s.ClaimFailingSince = "x", 1, at
		}), 0, "claims have failed"},
		{"broker down, young", with(func(s *relay.State) {
			s.BrokerDown, s.BrokerError, s.BrokerOutages, s.BrokerDownSince = true, "broker unavailable: nats: connection closed", 2, ago(5*time.Second)
		}), time.Minute, ""},
		{"broker down, old", with(func(s *relay.State) {
			s.BrokerDown, s.BrokerError, s.BrokerOutages, s.BrokerDownSince = true, "broker unavailable: nats: connection closed", 9, ago(3*time.Minute)
		}), time.Minute, "broker has been unavailable for 3m0s (9 batches in a row), last: broker unavailable: nats: connection closed"},
		{"completions failing, old", with(func(s *relay.State) {
			s.CompleteError, s.CompleteFailingSince = "conn closed", ago(time.Minute)
		}), 30 * time.Second, "recording batch outcomes has failed for 1m0s, last: conn closed"},
		{"claims before broker", with(func(s *relay.State) {
			s.ClaimError, s.ClaimFailures, s.ClaimFailingSince = "db", 5, ago(time.Hour)
			s.BrokerDown, s.BrokerDownSince = true, ago(time.Hour)
		}), time.Minute, "claims"},
	}
	for _, c := range cases {
		err := c.state.Check(c.grace)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v; want healthy", c.name, err)
		case c.want != "" && (!errors.Is(err, relay.ErrUnhealthy) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v; want ErrUnhealthy saying %q", c.name, err, c.want)
		}
	}
}

// A broker outage shows in State (broker down, since when, how many
// batches, the error) while claims keep succeeding; so does the recovery.
func TestStateShowsBrokerOutageAndRecovery(t *testing.T) {
	onEachDatabase(t, testStateShowsBrokerOutageAndRecovery)
}

func testStateShowsBrokerOutageAndRecovery(t *testing.T, db database) {
	dir := t.TempDir()
	srv := testenv.EmbeddedNATSAt(t, dir, 0)
	u, err := url.Parse(srv.ClientURL())
	testenv.Must(t, err, "parse url")
	port, _ := strconv.Atoi(u.Port())
	h := newHarness(t, db, srv.ClientURL())
	cfg := h.relayConfig()
	cfg.Backoff.Initial, cfg.Backoff.Max = 50*time.Millisecond, 200*time.Millisecond

	r, err := relay.New(h.store, h.publisher(), cfg)
	testenv.Must(t, err, "new relay")
	if err := r.State().Check(time.Hour); !errors.Is(err, relay.ErrUnhealthy) || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("before Run: %v; want unhealthy, not started", err)
	}
	r, stop := h.startRelay(h.publisher(), cfg)
	h.produce(50, 5, 10)
	h.waitDrained()
	healthy := func(what string) relay.State {
		t.Helper()
		s := r.State()
		if !s.Running || s.LastClaim.IsZero() || s.BrokerDown || s.ClaimFailures != 0 || s.Check(0) != nil {
			t.Fatalf("%s: state %+v (check: %v); want a healthy running relay", what, s, s.Check(0))
		}
		return s
	}
	// The outbox drains when the last outcome commits; the relay counts it
	// just after.
	testenv.Eventually(t, 5*time.Second, func() bool { return r.Metrics().Published == 50 },
		"metrics %v: want 50 published", testenv.Lazy(func() any { return r.Metrics() }))
	healthy("before the outage")

	srv.Shutdown()
	h.produce(20, 5, 10)
	testenv.Eventually(t, 20*time.Second, func() bool { s := r.State(); return s.BrokerDown && s.BrokerOutages >= 2 },
		"the outage does not show: %v", testenv.Lazy(func() any { return r.State() }))
	down := r.State()
	if down.BrokerDownSince.IsZero() || !strings.Contains(down.BrokerError, "broker unavailable") || down.ClaimFailures != 0 || down.ClaimError != "" {
		t.Fatalf("state during the outage %+v: want the broker down since a time, with its error, and claims succeeding", down)
	}
	if err := down.Check(0); !errors.Is(err, relay.ErrUnhealthy) || !strings.Contains(err.Error(), "broker has been unavailable") {
		t.Fatalf("check during the outage, no grace: %v; want unhealthy naming the broker", err)
	}
	if err := down.Check(time.Hour); err != nil {
		t.Fatalf("check during the outage, an hour's grace: %v; want healthy", err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return r.State().LastClaim.After(down.LastClaim) },
		"claims stopped during the broker outage: %v", testenv.Lazy(func() any { return r.State() }))

	testenv.EmbeddedNATSAt(t, dir, port)
	h.waitDrained()
	testenv.Eventually(t, 20*time.Second, func() bool { return !r.State().BrokerDown }, "the broker is still down after it returned: %v",
		testenv.Lazy(func() any { return r.State() }))
	testenv.Eventually(t, 5*time.Second, func() bool { return r.Metrics().Published == 70 },
		"metrics %v: want 70 published", testenv.Lazy(func() any { return r.Metrics() }))
	after := healthy("after the outage")
	if after.BrokerDownSince != (time.Time{}) || after.BrokerError != "" || after.BrokerOutages != 0 || after.Metrics.Published != 70 {
		t.Fatalf("state after the outage %+v: want the outage cleared and 70 published", after)
	}

	stop()
	if s := r.State(); s.Running || !strings.Contains(fmtErr(s.Check(time.Hour)), "stopped") {
		t.Fatalf("after Run returned: running %v, check %v", s.Running, s.Check(time.Hour))
	}
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// proxiedStore points the harness's relay store at the PostgreSQL database
// through a proxy the test can take down; the application keeps writing
// directly. (A SQLite file has no connection to take away.)
func proxiedStore(t *testing.T, h *harness) *testenv.Proxy {
	pgURL, err := url.Parse(h.pg.URL)
	testenv.Must(t, err, "parse database url")
	p := testenv.StartProxy(t, pgURL.Host)
	cfg, err := pgxpool.ParseConfig(p.URL(t, h.pg.URL))
	testenv.Must(t, err, "pool config")
	cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	testenv.Must(t, err, "relay pool")
	t.Cleanup(pool.Close)
	st, err := postgres.NewStore(context.Background(), pool, postgres.StoreConfig{})
	testenv.Must(t, err, "store")
	h.store = st
	return p
}

// A database the relay cannot reach shows in State as failing claims (how
// many, since when, the error), and Check blames the database; when it
// returns, claims succeed again and the backlog drains.
func TestStateShowsDatabaseOutageAndRecovery(t *testing.T) {
	h := newHarness(t, onPostgres, anyNATS)
	proxy := proxiedStore(t, h)
	r, _ := h.startRelay(h.publisher(), h.relayConfig())
	h.produce(30, 5, 10)
	h.waitDrained()
	if s := r.State(); s.LastClaim.IsZero() || s.ClaimFailures != 0 || s.Check(0) != nil {
		t.Fatalf("before the outage: %+v (check: %v); want healthy", s, s.Check(0))
	}

	proxy.Down()
	testenv.Eventually(t, 20*time.Second, func() bool { return r.State().ClaimFailures >= 3 },
		"claims do not fail while the database is unreachable: %v", testenv.Lazy(func() any { return r.State() }))
	h.produce(20, 5, 10) // written meanwhile, straight to the database
	down := r.State()
	if down.ClaimError == "" || down.ClaimFailingSince.IsZero() || down.ClaimFailingSince.Before(down.LastClaim) {
		t.Fatalf("state during the outage %+v: want the claim error, and failures since after the last good claim", down)
	}
	if err := down.Check(0); !errors.Is(err, relay.ErrUnhealthy) || !strings.Contains(err.Error(), "claims have failed") || !strings.Contains(err.Error(), "database") {
		t.Fatalf("check during the outage: %v; want unhealthy naming failing claims and the database", err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return r.State().ClaimFailures > down.ClaimFailures },
		"claims are not retried: %v", testenv.Lazy(func() any { return r.State() }))
	if s := r.State(); !s.LastClaim.Equal(down.LastClaim) || !s.ClaimFailingSince.Equal(down.ClaimFailingSince) {
		t.Fatalf("while the database is away: last claim %s → %s, failing since %s → %s; want both unchanged",
			down.LastClaim, s.LastClaim, down.ClaimFailingSince, s.ClaimFailingSince)
	}

	proxy.Up()
	h.waitDrained()
	testenv.Eventually(t, 10*time.Second, func() bool { s := r.State(); return s.ClaimFailures == 0 && s.Metrics.Published == 50 },
		"claims still failing, or not all counted: %v", testenv.Lazy(func() any { return r.State() }))
	s := r.State()
	if s.ClaimError != "" || !s.ClaimFailingSince.IsZero() || !s.LastClaim.After(down.LastClaim) || s.Check(0) != nil || s.Metrics.Published != 50 {
		t.Fatalf("after the outage: %+v (check: %v); want claims succeeding again, 50 published, healthy", s, s.Check(0))
	}
}

// gatedPublisher holds the next Publish call until released, then lets the
// real publisher send it.
type gatedPublisher struct {
	pub     relayPublisher
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gatedPublisher) Publish(ctx context.Context, msgs []courier.Message) []error {
	g.once.Do(func() {
		close(g.entered)
		<-g.release
	})
	return g.pub.Publish(ctx, msgs)
}

// The database going away between the publish and the recording of a
// batch shows as a completion error in State, cleared once outcomes are
// recorded again; the batch is published again after its lease, nothing is
// lost.
func TestStateShowsFailedCompletion(t *testing.T) {
	h := newHarness(t, onPostgres, anyNATS)
	proxy := proxiedStore(t, h)
	gate := &gatedPublisher{pub: h.publisher(), entered: make(chan struct{}), release: make(chan struct{})}
	r, _ := h.startRelay(gate, h.relayConfig())
	written := h.produce(3, 3, 3)
	select {
	case <-gate.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the relay published nothing")
	}
	proxy.Down()
	close(gate.release)
	testenv.Eventually(t, 20*time.Second, func() bool { return r.State().CompleteError != "" },
		"the failed completion does not show: %v", testenv.Lazy(func() any { return r.State() }))
	s := r.State()
	if s.CompleteFailingSince.IsZero() || s.Metrics.Published != 0 {
		t.Fatalf("state with outcomes failing: %+v; want since when, and nothing counted published", s)
	}

	proxy.Up()
	h.waitDrained()
	testenv.Eventually(t, 10*time.Second, func() bool { return r.State().CompleteError == "" }, "completion error not cleared: %v",
		testenv.Lazy(func() any { return r.State() }))
	// A connection the pool kept from before may fail a claim once more.
	testenv.Eventually(t, 10*time.Second, func() bool { return r.State().Check(0) == nil }, "unhealthy after the database returned: %v",
		testenv.Lazy(func() any { return r.State() }))
	if s := r.State(); !s.CompleteFailingSince.IsZero() {
		t.Fatalf("after the database returned: %+v; want no completion failure", s)
	}
	checkDelivery(t, written, h.received())
}

// A database that stops answering without closing anything (a host gone
// silent) fails claims after LeaseDuration instead of holding the relay in
// a claim for ever, so State shows it like any other database outage.
func TestStateShowsSilentDatabase(t *testing.T) {
	h := newHarness(t, onPostgres, anyNATS)
	proxy := proxiedStore(t, h)
	cfg := h.relayConfig()
	cfg.LeaseDuration, cfg.PublishTimeout = 2*time.Second, time.Second
	r, _ := h.startRelay(h.publisher(), cfg)
	h.produce(10, 5, 10)
	h.waitDrained()

	proxy.Freeze()
	testenv.Eventually(t, 20*time.Second, func() bool { return r.State().ClaimFailures >= 2 },
		"claims neither succeed nor fail while the database is silent: %v", testenv.Lazy(func() any { return r.State() }))
	s := r.State()
	if !strings.Contains(s.ClaimError, "did not finish within LeaseDuration (2s)") {
		t.Errorf("claim error %q should say the claim did not finish within LeaseDuration", s.ClaimError)
	}
	if err := s.Check(0); !errors.Is(err, relay.ErrUnhealthy) {
		t.Errorf("check while the database is silent: %v; want unhealthy", err)
	}

	proxy.Thaw()
	h.produce(10, 5, 10)
	h.waitDrained()
	testenv.Eventually(t, 10*time.Second, func() bool { return r.State().Check(0) == nil }, "unhealthy after the database answered again: %v",
		testenv.Lazy(func() any { return r.State() }))
}
