package health_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/goleak"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/health"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/sqlite"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.M(m), testenv.NATSServerLeaks...)
}

// rig is a relay on a SQLite outbox and an embedded NATS server, with its
// metrics and health endpoints served over HTTP.
type rig struct {
	db    *sql.DB
	relay *relay.Relay
	srv   *httptest.Server
	run   func() // starts the relay; it stops when the test ends
}

func newRig(t *testing.T, hcfg health.Config) *rig {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	testenv.Must(t, err, "open")
	t.Cleanup(func() { db.Close() })
	_, err = sqlite.Migrate(ctx, db)
	testenv.Must(t, err, "migrate")
	st, err := sqlite.NewStore(ctx, db, sqlite.StoreConfig{})
	testenv.Must(t, err, "store")

	nats := testenv.EmbeddedNATS(t)
	nc := testenv.Connect(t, nats.ClientURL())
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, couriernats.Config{}, couriernats.StreamConfig{}), "stream")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{})
	testenv.Must(t, err, "publisher")

	col, err := metrics.New(metrics.Config{Outbox: metrics.StoreStats(sqlite.Admin(db)), MinInterval: time.Nanosecond})
	testenv.Must(t, err, "metrics")
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	r, err := relay.New(st, pub, relay.Config{Observer: col.Relay(), PollInterval: 20 * time.Millisecond, LeaseDuration: 2 * time.Second})
	testenv.Must(t, err, "relay")

	hcfg.Relay, hcfg.Database, hcfg.OldestPendingAge = r, sqlite.NewDriver(db), col.OldestPendingAge
	hcfg.Broker = func(context.Context) error {
		if !nc.IsConnected() {
			return io.ErrUnexpectedEOF
		}
		return nil
	}
	hcfg.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	h, err := health.New(hcfg)
	testenv.Must(t, err, "health")
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	rg := &rig{db: db, relay: r, srv: srv}
	rg.run = func() {
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(runCtx) }()
		t.Cleanup(func() { stop(); <-done })
	}
	return rg
}

// get answers GET path: the status code and the body.
func (rg *rig) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(rg.srv.URL + path)
	testenv.Must(t, err, "GET "+path)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	testenv.Must(t, err, "read "+path)
	return resp.StatusCode, string(b)
}

func (rg *rig) ready(t *testing.T) (int, health.Report) {
	t.Helper()
	code, body := rg.get(t, "/readyz")
	var rep health.Report
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatalf("/readyz body is not a report: %v\n%s", err, body)
	}
	return code, rep
}

func (rg *rig) write(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	tx, err := rg.db.BeginTx(ctx, nil)
	testenv.Must(t, err, "begin")
	for range n {
		testenv.Must(t, outbox.New(sqlite.DatabaseSQL(), outbox.Config{}).Write(ctx, tx,
			courier.NewMessage("orders", "order-1", "OrderPlaced", nil)), "write")
	}
	testenv.Must(t, tx.Commit(), "commit")
}

// A running relay is ready; its metrics count what it published.
func TestReadyWhileRelaying(t *testing.T) {
	rg := newRig(t, health.Config{MaxOldestPending: time.Minute})
	if code, body := rg.get(t, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, rep := rg.ready(t); code != http.StatusServiceUnavailable || !strings.Contains(rep.Checks["relay"], "not started") {
		t.Fatalf("/readyz before Run: %d %+v", code, rep)
	}
	rg.run()
	rg.write(t, 5)
	testenv.Eventually(t, 20*time.Second, func() bool {
		code, rep := rg.ready(t)
		return code == http.StatusOK && rep.Ready && rep.Relay != nil && rep.Relay.Metrics.Published == 5
	}, "/readyz never said ready with 5 messages published: %s", testenv.Lazy(func() any { _, b := rg.get(t, "/readyz"); return b }))
	_, rep := rg.ready(t)
	for _, c := range []string{"database", "broker", "relay", "outbox"} {
		if rep.Checks[c] != "ok" {
			t.Errorf("check %s: %q", c, rep.Checks[c])
		}
	}
	code, body := rg.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{"courier_relay_published_messages_total 5", `courier_outbox_pending_messages{topic=""} 0`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	if code, _ := rg.get(t, "/nothing"); code != http.StatusNotFound {
		t.Errorf("/nothing: %d", code)
	}
}

// A database that goes away makes the program not ready: the ping fails at
// once, the relay once its claims have failed for longer than the grace.
func TestNotReadyWhenTheDatabaseIsGone(t *testing.T) {
	rg := newRig(t, health.Config{Grace: time.Nanosecond})
	rg.run()
	testenv.Eventually(t, 20*time.Second, func() bool { code, _ := rg.ready(t); return code == http.StatusOK },
		"never ready: %s", testenv.Lazy(func() any { _, b := rg.get(t, "/readyz"); return b }))
	testenv.Must(t, rg.db.Close(), "close the database")
	testenv.Eventually(t, 20*time.Second, func() bool {
		code, rep := rg.ready(t)
		return code == http.StatusServiceUnavailable && rep.Checks["database"] != "ok" &&
			strings.Contains(rep.Checks["relay"], "claims have failed")
	}, "/readyz did not report the database and the relay's claims: %s", testenv.Lazy(func() any { _, b := rg.get(t, "/readyz"); return b }))
	if code, _ := rg.get(t, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d: the process is alive", code)
	}
}

// Messages nobody publishes make the outbox too old: /readyz says so.
func TestNotReadyWhenTheOutboxIsOld(t *testing.T) {
	rg := newRig(t, health.Config{MaxOldestPending: time.Nanosecond})
	rg.write(t, 1) // no relay runs
	testenv.Eventually(t, 20*time.Second, func() bool {
		code, rep := rg.ready(t)
		return code == http.StatusServiceUnavailable && strings.Contains(rep.Checks["outbox"], "the oldest pending message has waited")
	}, "/readyz did not report the old message: %s", testenv.Lazy(func() any { _, b := rg.get(t, "/readyz"); return b }))
}

// A relay whose last claim is older than Stall is stuck, even though
// nothing it did failed.
func TestStalledRelayIsNotReady(t *testing.T) {
	now := time.Now()
	stuck := stateOf(relay.State{At: now, Running: true, Started: now.Add(-time.Hour), LastClaim: now.Add(-2 * time.Minute)})
	h, err := health.New(health.Config{Relay: stuck, Stall: time.Minute})
	testenv.Must(t, err, "new")
	rep := h.Ready(context.Background())
	if rep.Ready || !strings.Contains(rep.Checks["relay"], "no claim has succeeded for 2m0s") {
		t.Errorf("stalled relay: %+v", rep)
	}
	paused := stateOf(relay.State{At: now, Running: true, Started: now.Add(-time.Hour), LastClaim: now.Add(-2 * time.Minute), PausedUntil: now.Add(time.Second)})
	h, err = health.New(health.Config{Relay: paused, Stall: time.Minute, Grace: time.Hour})
	testenv.Must(t, err, "new")
	if rep := h.Ready(context.Background()); !rep.Ready {
		t.Errorf("relay pausing for the broker counted as stalled: %+v", rep)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	_, err := health.New(health.Config{MaxOldestPending: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "OldestPendingAge is nil") {
		t.Errorf("MaxOldestPending without a source: %v", err)
	}
	if err := (health.Config{}).Validate(); err != nil {
		t.Errorf("zero fields take their defaults: %v", err)
	}
	nop := func(context.Context) error { return nil }
	for _, c := range []struct {
		cfg  health.Config
		want string
	}{
		{health.Config{Grace: -time.Second}, "health: Config.Grace is -1s: use 0 or more"},
		{health.Config{Stall: -time.Second}, "health: Config.Stall is -1s: use more than 0"},
		{health.Config{Timeout: -time.Second}, "health: Config.Timeout is -1s: use more than 0"},
		{health.Config{MaxOldestPending: -time.Second}, "health: Config.MaxOldestPending is -1s: use 0 (not checked) or more"},
		{health.Config{MaxOldestPending: time.Minute}, "health: Config.MaxOldestPending is set but OldestPendingAge is nil"},
		{health.Config{Checks: map[string]func(context.Context) error{"": nop}}, `health: Config.Checks[""]: give every check a name`},
		{health.Config{AllowedHosts: []string{"https://x"}}, "health: Config.AllowedHosts"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate: %v, want %q", err, c.want)
		}
		if _, err := health.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v, want %q", err, c.want)
		}
	}
}

type stateOf relay.State

func (s stateOf) State() relay.State { return relay.State(s) }

// A status check's verdict is its status when it passes, its error when it
// fails; plain checks say "ok".
func TestStatusChecksSayWhatTheyFound(t *testing.T) {
	role := "standby: another relay reads slot s"
	var down error
	h, err := health.New(health.Config{
		Checks:       map[string]func(context.Context) error{"plain": func(context.Context) error { return nil }},
		StatusChecks: map[string]func(context.Context) (string, error){"cdc": func(context.Context) (string, error) { return role, down }},
		CacheFor:     -1, // each Ready runs the checks
	})
	testenv.Must(t, err, "new")
	rep := h.Ready(context.Background())
	if !rep.Ready || rep.Checks["cdc"] != role || rep.Checks["plain"] != "ok" {
		t.Fatalf("passing: %+v", rep)
	}
	down = errors.New("no relay reads slot s")
	rep = h.Ready(context.Background())
	if rep.Ready || rep.Checks["cdc"] != down.Error() {
		t.Fatalf("failing: %+v", rep)
	}
	_, err = health.New(health.Config{
		Checks:       map[string]func(context.Context) error{"cdc": func(context.Context) error { return nil }},
		StatusChecks: map[string]func(context.Context) (string, error){"cdc": func(context.Context) (string, error) { return "", nil }},
	})
	if err == nil || !strings.Contains(err.Error(), `Config.StatusChecks["cdc"]`) {
		t.Fatalf("a name in both: %v", err)
	}
}
