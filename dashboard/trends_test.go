package dashboard_test

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/sqlite"
)

// insert writes n messages of topic to the outbox, pending.
func (f *fixture) insert(t testing.TB, topic string, n int) {
	t.Helper()
	ctx := context.Background()
	msgs := make([]courier.Message, n)
	for i := range msgs {
		id, _ := uuid.NewV7()
		msgs[i] = courier.Message{ID: id, Topic: topic, Key: id.String(), Type: "OrderPlaced", Version: 1, Payload: []byte(`{}`), OccurredAt: time.Now()}
	}
	testenv.Must(t, f.drv.InTx(ctx, func(tx *sql.Tx) error { return f.drv.Inserter().Insert(ctx, tx, msgs) }), "insert")
}

// run runs h.Run until the returned function (or the test's end) stops
// it; that function returns Run's error once Run has returned.
func run(t testing.TB, h *dashboard.Handler) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// waitPending waits until the newest n readings of h's trend charts all
// count want rows of topic pending.
func waitPending(t testing.TB, h *dashboard.Handler, topic string, want int64, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := dashboard.WaitTrend(ctx, h, topic, func(p []int64) bool {
		return len(p) >= n && !slices.ContainsFunc(p[len(p)-n:], func(v int64) bool { return v != want })
	})
	testenv.Must(t, err, fmt.Sprintf("wait for %d readings of %d pending on %s", n, want, topic))
}

// plot is a chart's frame and y axis as its page draws them.
type plot struct{ left, top, width, height, ymax float64 }

// decode maps the points attribute of a polyline of p back to the times'
// x and the counts drawn, rounded to the nearest.
func (p plot) decode(t testing.TB, points string) (xs []float64, counts []int64) {
	t.Helper()
	for pt := range strings.FieldsSeq(points) {
		xy := strings.Split(pt, ",")
		if len(xy) != 2 {
			t.Fatalf("point %q of %q is not x,y", pt, points)
		}
		x, errX := strconv.ParseFloat(xy[0], 64)
		y, errY := strconv.ParseFloat(xy[1], 64)
		if errX != nil || errY != nil {
			t.Fatalf("point %q of %q does not parse", pt, points)
		}
		xs = append(xs, x)
		counts = append(counts, int64(math.Round((p.top+p.height-y)/p.height*p.ymax)))
	}
	return xs, counts
}

// checkPending checks that the points of topic's line in the pending chart
// are one per reading h holds, left to right, the newest at the right
// edge, and that they map back to the counts pending of those readings.
func checkPending(t testing.TB, h *dashboard.Handler, p plot, topic, points string) []int64 {
	t.Helper()
	xs, got := p.decode(t, points)
	want := dashboard.TrendPending(h, topic)
	if !slices.Equal(got, want) {
		t.Fatalf("the pending chart draws %s's counts %v (points %q), want those read: %v", topic, got, points, want)
	}
	for i := 1; i < len(xs); i++ {
		if xs[i] <= xs[i-1] {
			t.Fatalf("the points of %s are at x %v: want them left to right", topic, xs)
		}
	}
	if xs[len(xs)-1] != p.left+p.width {
		t.Fatalf("the newest point of %s is at x %g, want %g (now)", topic, xs[len(xs)-1], p.left+p.width)
	}
	return got
}

func TestTrendsOverHTTP(t *testing.T) {
	for name, url := range databases {
		t.Run(name, func(t *testing.T) { testTrendsOverHTTP(t, url(t)) })
	}
}

// Run reads the status while messages are written; the overview draws
// what it read.
func testTrendsOverHTTP(t *testing.T, dbURL string) {
	f := newFixtureAt(t, dbURL, []string{"audit"}, []string{"too big"})
	h, err := dashboard.New(dashboard.Config{Database: f.drv, SampleEvery: 50 * time.Millisecond, History: 100 * time.Second})
	testenv.Must(t, err, "new dashboard")
	srv := serveHandler(t, h)
	stop := run(t, h)
	waitPending(t, h, "orders", 0, 1)
	if err := h.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("a second Run while one runs: %v, want an error", err)
	}

	steps := []int64{2, 5, 6}
	var total int64
	for _, n := range steps {
		f.insert(t, "orders", int(n))
		total += n
		waitPending(t, h, "orders", total, 2)
	}
	testenv.Must(t, stop(), "run")

	c := newClient(t, srv.URL)
	code, page := c.get("/")
	if code != 200 || !strings.Contains(page, `id="pending">13<`) || !strings.Contains(page, `<section id="trends">`) {
		t.Fatalf("overview: %d\n%s", code, page)
	}
	charts := map[string]string{}
	for _, id := range []string{"chart-pending", "chart-oldest", "chart-published", "chart-failures"} {
		m := regexp.MustCompile(`(?s)<figure class="chart" id="` + id + `">(.*?)</figure>`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no chart %s in the overview:\n%s", id, page)
		}
		charts[id] = m[1]
	}
	pending := charts["chart-pending"]
	p := plotOf(t, pending)
	m := regexp.MustCompile(`<polyline [^>]*data-series="orders" points="([^"]+)"><title>orders: 13 pending</title>`).FindStringSubmatch(pending)
	if m == nil || strings.Count(pending, `data-series="orders"`) != 1 {
		t.Fatalf("the pending chart has no single line of orders, titled with 13 pending:\n%s", pending)
	}
	drawn := checkPending(t, h, p, "orders", m[1])
	for _, want := range []int64{0, 2, 7, 13} {
		if !slices.Contains(drawn, want) {
			t.Fatalf("the pending chart draws %v, without %d", drawn, want)
		}
	}
	if !strings.Contains(charts["chart-oldest"], `data-series="orders"`) {
		t.Fatalf("the oldest pending chart has no line of orders:\n%s", charts["chart-oldest"])
	}
	if !strings.Contains(charts["chart-published"], "--keep-published") || strings.Contains(charts["chart-published"], "<polyline") {
		t.Fatalf("the published chart draws a line, or does not say why not, without copies kept:\n%s", charts["chart-published"])
	}
	if !strings.Contains(charts["chart-failures"], `data-series="dead letters"`) || !strings.Contains(charts["chart-failures"], `data-series="parked"`) {
		t.Fatalf("the failures chart lacks a line:\n%s", charts["chart-failures"])
	}
}

// plotOf reads a chart's frame and y axis off its markup.
func plotOf(t testing.TB, chart string) plot {
	t.Helper()
	m := regexp.MustCompile(`data-ymax="([^"]+)"[^>]*>\s*<rect class="plot" x="([^"]+)" y="([^"]+)" width="([^"]+)" height="([^"]+)"`).FindStringSubmatch(chart)
	if m == nil {
		t.Fatalf("no y axis and frame in the chart:\n%s", chart)
	}
	var v [5]float64
	for i := range v {
		var err error
		v[i], err = strconv.ParseFloat(m[i+1], 64)
		testenv.Must(t, err, "parse the chart's frame")
	}
	return plot{ymax: v[0], left: v[1], top: v[2], width: v[3], height: v[4]}
}

// serveHandler serves h until the test ends.
func serveHandler(t *testing.T, h *dashboard.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// Without Run, each view records a reading: by the store's clock, one
// closer than SampleEvery/2 to the one before replaces it, one later is a
// point of its own.
func TestTrendsFromViews(t *testing.T) {
	f := newFixture(t, []string{"audit"}, []string{"too big"})
	var now atomic.Int64 // the store's clock, in Unix nanoseconds
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	now.Store(t0.UnixNano())
	drv := sqlite.NewDriver(f.db).WithClock(func() time.Time { return time.Unix(0, now.Load()).UTC() })
	h, err := dashboard.New(dashboard.Config{Database: drv})
	testenv.Must(t, err, "new dashboard")
	c := newClient(t, serveHandler(t, h).URL)
	if code, page := c.get("/"); code != 200 || !strings.Contains(page, "Nothing was pending") || !strings.Contains(page, "One reading so far") {
		t.Fatalf("first view: %d\n%s", code, page)
	}

	// 2s later (less than SampleEvery/2, 5s): the reading replaces the
	// first, a lone point at now, at the top of a y axis up to 2.
	f.insert(t, "orders", 2)
	now.Store(t0.Add(2 * time.Second).UnixNano())
	code, page := c.get("/")
	if code != 200 || !strings.Contains(page, `data-series="orders" points="712,8"><title>orders: 2 pending</title>`) || !strings.Contains(page, `<circle cx="712" cy="8"`) {
		t.Fatalf("second view: %d\n%s", code, page)
	}
	if got := dashboard.TrendPending(h, "orders"); !slices.Equal(got, []int64{2}) {
		t.Fatalf("after two views 2s apart the readings are %v, want one: 2", got)
	}

	// A minute later, one more pending and one more parked: a second
	// point, 58s left of now on an hour's axis, on a y axis up to 5; and
	// a rate, 1 in 58s, on a y axis up to 2.
	f.insert(t, "orders", 1)
	f.park(t, "billing", "courier.payments", "card declined")
	now.Store(t0.Add(time.Minute).UnixNano())
	_, page = c.get("/")
	if !strings.Contains(page, `data-series="orders" points="701.3,99.2 712,68.8"><title>orders: 3 pending</title>`) {
		t.Fatalf("third view:\n%s", page)
	}
	if !strings.Contains(page, `data-series="parked" points="712,81.38"><title>parked: 1.03/min</title>`) {
		t.Fatalf("third view, the parked messages' rate:\n%s", page)
	}
	if strings.Contains(page, `http-equiv="refresh"`) {
		t.Fatalf("the overview refreshes itself unasked:\n%s", page)
	}

	// Asked to, the page reloads itself every SampleEvery, in seconds.
	code, page = c.get("/?refresh=1")
	if code != 200 || !strings.Contains(page, `<meta http-equiv="refresh" content="10">`) || !strings.Contains(page, `<a href="/" id="refresh">stop</a>`) {
		t.Fatalf("overview with refresh=1: %d\n%s", code, page)
	}
}

func TestTrendsConfig(t *testing.T) {
	f := newFixture(t, []string{"audit"}, []string{"too big"})
	for _, c := range []struct {
		cfg  dashboard.Config
		want string
	}{
		{dashboard.Config{SampleEvery: -time.Second}, "Config.SampleEvery is -1s"},
		{dashboard.Config{SampleEvery: time.Minute, History: 90 * time.Second}, "use 2m0s or more"},
		{dashboard.Config{SampleEvery: time.Second, History: 24 * time.Hour}, "sample less often (43.2s or more)"},
	} {
		c.cfg.Database = f.drv
		_, err := dashboard.New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.cfg, err, c.want)
		}
	}
}

// A tenant's overview draws its charts from its views.
func TestTrendsOfATenant(t *testing.T) {
	s := newTenantSet(t)
	acme := s.sqlite("acme", "orders")
	acme.insert(t, "payments", 4)
	srv := s.serve(dashboard.TenantsConfig{})
	c := newClient(t, srv.URL)
	code, page := c.get("/t/acme/")
	if code != 200 || !strings.Contains(page, `<section id="trends">`) || !strings.Contains(page, `data-series="payments"`) ||
		!strings.Contains(page, "<title>payments: 4 pending</title>") || !strings.Contains(page, "1 reading, by the database's clock") {
		t.Fatalf("acme's overview: %d\n%s", code, page)
	}
}
