package dashboard_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/latency"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/sqlite"
)

// latencySteps are the latencies consumers applied orders with, a minute
// apart: a p99 that climbs. Payments take 40ms throughout.
var latencySteps = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond, 160 * time.Millisecond, 320 * time.Millisecond}

// recordLatencySteps records, through a latency.Recorder on the fixture's
// SQLite database, what two consumers applied over six minutes from t0,
// with the store's and the consumers' clock moved by the test: each
// minute, 20 orders of each step's latency (billing) and 10 payments of
// 40ms (shipping). It returns the database, its clock at t0 plus six
// minutes.
func recordLatencySteps(t testing.TB, f *fixture, t0 time.Time) dashboard.Config {
	t.Helper()
	var now atomic.Int64
	now.Store(t0.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	drv := sqlite.NewDriver(f.db).WithClock(clock)
	rec, err := latency.NewRecorder(latency.Config{Delivery: drv.Delivery(), Clock: clock})
	testenv.Must(t, err, "new recorder")
	at := func(topic string, d time.Duration) courier.Message {
		return courier.Message{Topic: topic, OccurredAt: clock().Add(-d)}
	}
	for _, d := range latencySteps {
		now.Add(int64(time.Minute))
		for range 20 {
			rec.Handled("billing", at("orders", d), inbox.Applied, nil, time.Millisecond)
		}
		for range 10 {
			rec.Handled("shipping", at("payments", 40*time.Millisecond), inbox.Applied, nil, time.Millisecond)
		}
		testenv.Must(t, rec.Flush(context.Background()), "flush")
	}
	return dashboard.Config{Database: drv}
}

// latencyLine reads the values of topic's line in a latency chart's
// markup, in seconds, left to right, and their x.
func latencyLine(t testing.TB, chart, topic string) (xs, vs []float64) {
	t.Helper()
	p := plotOf(t, chart)
	m := regexp.MustCompile(`<polyline [^>]*data-series="` + topic + `" points="([^"]+)">`).FindStringSubmatch(chart)
	if m == nil {
		t.Fatalf("no line of %s in the chart:\n%s", topic, chart)
	}
	for pt := range strings.FieldsSeq(m[1]) {
		x, errX := strconv.ParseFloat(strings.Split(pt, ",")[0], 64)
		y, errY := strconv.ParseFloat(strings.Split(pt, ",")[1], 64)
		if errX != nil || errY != nil {
			t.Fatalf("point %q does not parse", pt)
		}
		xs = append(xs, x)
		vs = append(vs, (p.top+p.height-y)/p.height*p.ymax)
	}
	return xs, vs
}

// checkLatencyLine checks that a line's values are want, each within its
// bucket (12%), left to right, the newest at now.
func checkLatencyLine(t testing.TB, xs, vs []float64, want []time.Duration, topic string) {
	t.Helper()
	if len(vs) != len(want) {
		t.Fatalf("%s's line has %d points %v, want %d", topic, len(vs), vs, len(want))
	}
	for i, v := range vs {
		w := want[i].Seconds()
		if v < w/1.13 || v > w*1.13 {
			t.Errorf("%s's point %d is %gs, want about %gs: %v", topic, i, v, w, vs)
		}
		if i > 0 && xs[i] <= xs[i-1] {
			t.Errorf("%s's points are at x %v: want them left to right", topic, xs)
		}
	}
	if xs[len(xs)-1] != 712 {
		t.Errorf("%s's newest point is at x %g, want 712 (now)", topic, xs[len(xs)-1])
	}
}

// The overview draws the consumers' latency per topic, p50 and p99, a
// point per minute, from the samples a latency.Recorder recorded.
func TestLatencyTrends(t *testing.T) {
	f := newFixture(t, []string{"audit"}, []string{"too big"})
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

	h, err := dashboard.New(dashboard.Config{Database: f.drv})
	testenv.Must(t, err, "new dashboard")
	_, page := newClient(t, serveHandler(t, h).URL).get("/")
	if !strings.Contains(page, `id="chart-latency-p99"`) || !strings.Contains(page, "No consumer recorded its latency in the last 1h") {
		t.Fatalf("overview without latency samples:\n%s", page)
	}

	h, err = dashboard.New(recordLatencySteps(t, f, t0))
	testenv.Must(t, err, "new dashboard")
	code, page := newClient(t, serveHandler(t, h).URL).get("/")
	if code != 200 {
		t.Fatalf("overview: %d\n%s", code, page)
	}
	charts := map[string]string{}
	for _, id := range []string{"chart-latency-p50", "chart-latency-p99"} {
		m := regexp.MustCompile(`(?s)<figure class="chart" id="` + id + `">(.*?)</figure>`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no chart %s in the overview:\n%s", id, page)
		}
		charts[id] = m[1]
	}
	for _, id := range []string{"chart-latency-p50", "chart-latency-p99"} {
		xs, vs := latencyLine(t, charts[id], "orders")
		checkLatencyLine(t, xs, vs, latencySteps, id+" orders")
		xs, vs = latencyLine(t, charts[id], "payments")
		checkLatencyLine(t, xs, vs, []time.Duration{40 * time.Millisecond, 40 * time.Millisecond, 40 * time.Millisecond, 40 * time.Millisecond, 40 * time.Millisecond, 40 * time.Millisecond}, id+" payments")
	}
	if !regexp.MustCompile(`<title>orders: p99 3[0-9][0-9]ms</title>`).MatchString(charts["chart-latency-p99"]) {
		t.Errorf("the p99 line of orders is not titled with its newest figure, about 320ms:\n%s", charts["chart-latency-p99"])
	}
}

// A history of more samples than a view reads (store.MaxLatencyRows) is
// drawn from its newest ones, and the charts say so.
func TestLatencyTrendsBounded(t *testing.T) {
	f := newFixture(t, []string{"audit"}, []string{"too big"})
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	var now atomic.Int64
	now.Store(t0.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	drv := sqlite.NewDriver(f.db).WithClock(clock)
	// 11 minutes of 1,000 samples each (100 consumers, 10 topics): orders
	// take 10ms, then 500ms in the last minute.
	for m := range 11 {
		now.Add(int64(time.Minute))
		var ss []store.LatencySample
		for c := range 100 {
			for tp := range 10 {
				var h latency.Histogram
				d := 10 * time.Millisecond
				if m == 10 {
					d = 500 * time.Millisecond
				}
				h.Observe(d)
				topic := "orders"
				if tp > 0 {
					topic = fmt.Sprintf("topic-%d", tp)
				}
				ss = append(ss, h.Sample(fmt.Sprintf("consumer-%d", c), topic, time.Minute))
			}
		}
		testenv.Must(t, drv.Delivery().RecordLatency(context.Background(), ss), "record")
	}
	h, err := dashboard.New(dashboard.Config{Database: drv})
	testenv.Must(t, err, "new dashboard")
	_, page := newClient(t, serveHandler(t, h).URL).get("/")
	m := regexp.MustCompile(`(?s)<figure class="chart" id="chart-latency-p99">(.*?)</figure>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no p99 chart:\n%s", page)
	}
	if !strings.Contains(m[1], "hold more than 10000 samples, the most a view reads: the charts draw the last") {
		t.Errorf("the p99 chart does not say it draws the newest samples only:\n%s", m[1])
	}
	xs, vs := latencyLine(t, m[1], "orders")
	if xs[len(xs)-1] != 712 || vs[len(vs)-1] < 0.44 || vs[len(vs)-1] > 0.57 || len(vs) < 5 || len(vs) > 10 {
		t.Errorf("orders' p99 line ends at x %g with %gs, %d points: want the newest minute, 500ms, at now, and some minutes before", xs[len(xs)-1], vs[len(vs)-1], len(vs))
	}
}
