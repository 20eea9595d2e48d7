package metrics_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/sqlite"
)

// counted counts the queries that reach a real store's Stats.
type counted struct {
	st store.Admin
	n  atomic.Int64
}

func (c *counted) Stats(ctx context.Context) (store.Stats, error) {
	c.n.Add(1)
	return c.st.Stats(ctx)
}

// outboxDB is a migrated SQLite database holding n pending messages.
func outboxDB(t *testing.T, n int) *sql.DB {
	t.Helper()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	testenv.Must(t, err, "open")
	t.Cleanup(func() { db.Close() })
	_, err = sqlite.Migrate(context.Background(), db)
	testenv.Must(t, err, "migrate")
	writeN(t, db, n)
	return db
}

func writeN(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	testenv.Must(t, err, "begin")
	for i := range n {
		m := courier.NewMessage("orders", fmt.Sprintf("order-%d", i), "OrderPlaced", nil)
		testenv.Must(t, outbox.New(sqlite.DatabaseSQL(), outbox.Config{}).Write(ctx, tx, m), "write")
	}
	testenv.Must(t, tx.Commit(), "commit")
}

// clock is a time a test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// storm scrapes url from 8 goroutines, 25 times each, while 4 more ask
// for the oldest pending age as a readiness check would, and returns the
// last body scraped.
func storm(t *testing.T, url string, col *metrics.Collector) string {
	t.Helper()
	var wg sync.WaitGroup
	var last atomic.Value
	for range 8 {
		wg.Go(func() {
			for range 25 {
				resp, err := http.Get(url)
				if err != nil {
					t.Errorf("scrape: %v", err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("scrape: %s: %s", resp.Status, b)
					return
				}
				last.Store(string(b))
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for range 25 {
				if _, err := col.OldestPendingAge(context.Background()); err != nil {
					t.Errorf("oldest pending age: %v", err)
				}
			}
		})
	}
	wg.Wait()
	s, _ := last.Load().(string)
	return s
}

// However many scrapers come, and however often, the outbox is queried at
// most once per MinInterval: 300 scrapes and readiness checks within one
// interval cost one query, and the next interval one more.
func TestScrapeStormQueriesAtBoundedRate(t *testing.T) {
	db := outboxDB(t, 3)
	src := &counted{st: sqlite.Admin(db)}
	col, err := metrics.New(metrics.Config{Outbox: metrics.StoreStats(src), MinInterval: 10 * time.Second})
	testenv.Must(t, err, "new")
	clk := &clock{now: time.Now()}
	metrics.SetClock(col, clk.Now)
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	body := storm(t, srv.URL, col)
	if got := src.n.Load(); got != 1 {
		t.Fatalf("%d queries for a storm within one interval, want 1", got)
	}
	if !strings.Contains(body, `courier_outbox_pending_messages{topic=""} 3`) {
		t.Fatalf("scrape lacks the pending gauge:\n%s", body)
	}

	writeN(t, db, 2) // not seen until the interval has passed
	clk.Add(10*time.Second - time.Millisecond)
	body = storm(t, srv.URL, col)
	if got := src.n.Load(); got != 1 {
		t.Fatalf("%d queries before the interval passed, want 1", got)
	}
	if !strings.Contains(body, `courier_outbox_pending_messages{topic=""} 3`) {
		t.Fatalf("the gauge changed without a query:\n%s", body)
	}

	clk.Add(time.Millisecond)
	body = storm(t, srv.URL, col)
	if got := src.n.Load(); got != 2 {
		t.Fatalf("%d queries after two intervals of storms, want 2", got)
	}
	for _, want := range []string{
		`courier_outbox_pending_messages{topic=""} 5`,
		`courier_stats_queries_total{source="outbox"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s:\n%s", want, body)
		}
	}
}

// A query that fails keeps the gauges at the last values read, counts the
// error, makes OldestPendingAge fail (so /readyz says so) and still waits a
// MinInterval before the next try: a database that is down is not hammered.
func TestFailedQueryKeepsLastValues(t *testing.T) {
	db := outboxDB(t, 2)
	src := &counted{st: sqlite.Admin(db)}
	col, err := metrics.New(metrics.Config{Outbox: metrics.StoreStats(src), MinInterval: time.Minute})
	testenv.Must(t, err, "new")
	clk := &clock{now: time.Now()}
	metrics.SetClock(col, clk.Now)
	if n := testutil.CollectAndCount(col, "courier_outbox_pending_messages"); n != 1 {
		t.Fatalf("%d pending series, want 1", n)
	}
	testenv.Must(t, db.Close(), "close") // every query fails from now on
	clk.Add(time.Minute)
	if _, err := col.OldestPendingAge(context.Background()); err == nil {
		t.Fatal("OldestPendingAge succeeded on a closed database")
	}
	want := `
# HELP courier_outbox_pending_messages Unpublished messages in the outbox, leased and backing off included; topic="" is every topic.
# TYPE courier_outbox_pending_messages gauge
courier_outbox_pending_messages{topic=""} 2
# HELP courier_stats_query_errors_total Queries behind the gauges that failed, by source; the gauges keep the last values read.
# TYPE courier_stats_query_errors_total counter
courier_stats_query_errors_total{source="outbox"} 1
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want), "courier_outbox_pending_messages", "courier_stats_query_errors_total"); err != nil {
		t.Error(err)
	}
	if got := src.n.Load(); got != 2 {
		t.Errorf("%d queries, want 2: one per interval, failed or not", got)
	}
}

// Saga and idempotency-key gauges come from the sources a program plugs in.
func TestSagaAndKeySources(t *testing.T) {
	col, err := metrics.New(metrics.Config{
		Sagas: sagaStats{{Type: "order", State: "awaiting_payment", Instances: 4, Overdue: 1}},
		Keys:  keyStats{{Scope: "POST /orders", InFlight: 2}},
	})
	testenv.Must(t, err, "new")
	want := `
# HELP courier_idempotency_keys_in_flight Idempotency keys whose request is still being processed, by scope.
# TYPE courier_idempotency_keys_in_flight gauge
courier_idempotency_keys_in_flight{scope="POST /orders"} 2
# HELP courier_saga_instances Saga instances by type and state.
# TYPE courier_saga_instances gauge
courier_saga_instances{state="awaiting_payment",type="order"} 4
# HELP courier_saga_overdue_instances Saga instances not finished whose deadline has passed, by type and state.
# TYPE courier_saga_overdue_instances gauge
courier_saga_overdue_instances{state="awaiting_payment",type="order"} 1
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want),
		"courier_idempotency_keys_in_flight", "courier_saga_instances", "courier_saga_overdue_instances"); err != nil {
		t.Error(err)
	}
}

// Every name follows the conventions Prometheus's linter checks, with
// every family holding a series.
func TestNamesPassTheLinter(t *testing.T) {
	col, err := metrics.New(metrics.Config{
		Outbox: outboxStats{{Pending: 3, OldestPendingAge: time.Second}},
		Sagas:  sagaStats{{Type: "order", State: "awaiting_payment", Instances: 4, Overdue: 1}},
		Keys:   keyStats{{Scope: "POST /orders", InFlight: 2}},
	})
	testenv.Must(t, err, "new")
	msg := courier.NewMessage("orders", "k", "T", nil)
	r, c := col.Relay(), col.Consumer()
	r.Claimed(1)
	r.Published([]courier.Message{msg, msg}, []error{nil, broker.Unavailable(errors.New("down"))}, time.Millisecond)
	r.Completed(1, 1, 0)
	r.LeaseLost(1)
	c.Handled("billing", msg, inbox.Applied, nil, time.Millisecond)
	c.Handled("billing", msg, 0, errors.New("failed"), time.Millisecond)
	c.Parked("billing", store.ReasonFailed)
	c.Replayed("billing", msg)
	n, err := testutil.GatherAndCount(registry(col))
	testenv.Must(t, err, "count")
	if n < 25 {
		t.Errorf("%d series, want every family to hold one", n)
	}
	problems, err := testutil.CollectAndLint(col)
	testenv.Must(t, err, "lint")
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

func registry(c prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	return reg
}

type outboxStats []metrics.TopicStats

func (o outboxStats) OutboxStats(context.Context) ([]metrics.TopicStats, error) { return o, nil }

func TestConfigErrorsNameTheField(t *testing.T) {
	_, err := metrics.New(metrics.Config{MinInterval: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "Config.MinInterval") {
		t.Errorf("negative MinInterval: %v", err)
	}
	if err := (metrics.Config{}).Validate(); err != nil {
		t.Errorf("zero fields take their defaults: %v", err)
	}
	for _, c := range []struct {
		cfg  metrics.Config
		want string
	}{
		{metrics.Config{MinInterval: -time.Second}, "metrics: Config.MinInterval is -1s: use 0 for the default (10s) or more"},
		{metrics.Config{QueryTimeout: -time.Second}, "metrics: Config.QueryTimeout is -1s: use 0 for the default"},
		{metrics.Config{MaxTopics: -1}, "metrics: Config.MaxTopics is -1: use 0 for the default (100) or more"},
		{metrics.Config{MaxTenants: -1}, "metrics: Config.MaxTenants is -1: use 0 for the default (100) or more"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate: %v, want %q", err, c.want)
		}
	}
}

type sagaStats []metrics.SagaStats

func (s sagaStats) SagaStats(context.Context) ([]metrics.SagaStats, error) { return s, nil }

type keyStats []metrics.KeyStats

func (k keyStats) KeysInFlight(context.Context) ([]metrics.KeyStats, error) { return k, nil }

// countedStatus counts the Status queries that reach r.
type countedStatus struct {
	r metrics.StatusReader
	n atomic.Int64
}

func (c *countedStatus) Status(ctx context.Context) (store.Status, error) {
	c.n.Add(1)
	return c.r.Status(ctx)
}

// FromStatus on a real store: the outbox per topic, and one Status query
// per refresh for the three sources.
func TestStatusSourcePerTopic(t *testing.T) {
	db := outboxDB(t, 3) // topic orders
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	testenv.Must(t, err, "begin")
	for range 2 {
		testenv.Must(t, outbox.New(sqlite.DatabaseSQL(), outbox.Config{}).Write(ctx, tx, courier.NewMessage("payments", "p", "Charged", nil)), "write")
	}
	testenv.Must(t, tx.Commit(), "commit")
	src := &countedStatus{r: sqlite.NewDriver(db).Operations()}
	s := metrics.FromStatus(src)
	col, err := metrics.New(metrics.Config{Outbox: s, Sagas: s, Keys: s})
	testenv.Must(t, err, "new")
	want := `
# HELP courier_outbox_pending_messages Unpublished messages in the outbox, leased and backing off included; topic="" is every topic.
# TYPE courier_outbox_pending_messages gauge
courier_outbox_pending_messages{topic="orders"} 3
courier_outbox_pending_messages{topic="payments"} 2
# HELP courier_idempotency_keys_in_flight Idempotency keys whose request is still being processed, by scope.
# TYPE courier_idempotency_keys_in_flight gauge
courier_idempotency_keys_in_flight{scope=""} 0
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want), "courier_outbox_pending_messages", "courier_idempotency_keys_in_flight"); err != nil {
		t.Error(err)
	}
	if n := src.n.Load(); n != 1 {
		t.Errorf("%d Status queries for one refresh of three sources, want 1", n)
	}
}

// fixedStatus is a store.Status to map.
type fixedStatus store.Status

func (f fixedStatus) Status(context.Context) (store.Status, error) { return store.Status(f), nil }

// Sagas by state (finished ones by phase), overdue on the type's first
// unfinished state; an empty outbox still has its series.
func TestStatusSourceSagas(t *testing.T) {
	s := metrics.FromStatus(fixedStatus{
		Sagas: []store.SagaCount{
			{Type: "order", Phase: "running", State: "awaiting_payment", Count: 4},
			{Type: "order", Phase: "running", State: "awaiting_stock", Count: 1},
			{Type: "order", Phase: "completed", Count: 10},
		},
		OverdueSagas: []store.OverdueSagas{{Type: "order", Count: 2}},
		Keys:         store.KeyStatus{InFlight: 3},
	})
	col, err := metrics.New(metrics.Config{Outbox: s, Sagas: s, Keys: s})
	testenv.Must(t, err, "new")
	want := `
# HELP courier_saga_instances Saga instances by type and state.
# TYPE courier_saga_instances gauge
courier_saga_instances{state="awaiting_payment",type="order"} 4
courier_saga_instances{state="awaiting_stock",type="order"} 1
courier_saga_instances{state="completed",type="order"} 10
# HELP courier_saga_overdue_instances Saga instances not finished whose deadline has passed, by type and state.
# TYPE courier_saga_overdue_instances gauge
courier_saga_overdue_instances{state="awaiting_payment",type="order"} 2
courier_saga_overdue_instances{state="awaiting_stock",type="order"} 0
courier_saga_overdue_instances{state="completed",type="order"} 0
# HELP courier_idempotency_keys_in_flight Idempotency keys whose request is still being processed, by scope.
# TYPE courier_idempotency_keys_in_flight gauge
courier_idempotency_keys_in_flight{scope=""} 3
# HELP courier_outbox_pending_messages Unpublished messages in the outbox, leased and backing off included; topic="" is every topic.
# TYPE courier_outbox_pending_messages gauge
courier_outbox_pending_messages{topic=""} 0
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want),
		"courier_saga_instances", "courier_saga_overdue_instances", "courier_idempotency_keys_in_flight", "courier_outbox_pending_messages"); err != nil {
		t.Error(err)
	}
}
