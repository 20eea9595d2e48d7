package dashboard_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
)

// The trend charts in a browser: after traffic read by Run, the pending
// chart's line of a topic has a point per reading, which maps back to the
// counts read.
func TestBrowserTrends(t *testing.T) {
	ctx := browser(t)
	f := newFixture(t, []string{"orders", "payments", "audit"}, []string{"nats: message size exceeds maximum allowed"})
	seed(t, f)
	h, err := dashboard.New(dashboard.Config{Database: f.drv, Sagas: f.drv.Sagas(), SampleEvery: 50 * time.Millisecond, History: 4 * time.Second})
	testenv.Must(t, err, "new dashboard")
	srv := serveHandler(t, h)
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }

	// Traffic: orders grows by 3 at each step, payments by 1; each step
	// is read a few times before the next.
	stop := run(t, h)
	var orders, payments int64
	for range 6 {
		f.insert(t, "orders", 3)
		f.insert(t, "payments", 1)
		orders, payments = orders+3, payments+1
		waitPending(t, h, "orders", orders, 6)
		waitPending(t, h, "payments", payments, 1)
	}
	testenv.Must(t, stop(), "run")

	do(t, ctx, "overview", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(css(`#chart-pending polyline[data-series="orders"]`)))
	points := get(t, ctx, "points", chromedp.Evaluate[string](`document.querySelector('#chart-pending polyline[data-series="orders"]').getAttribute('points')`))
	frame := get(t, ctx, "frame", chromedp.Evaluate[[]float64](`(() => {
const svg = document.querySelector('#chart-pending svg'), r = svg.querySelector('rect.plot');
return [+r.getAttribute('x'), +r.getAttribute('y'), +r.getAttribute('width'), +r.getAttribute('height'), +svg.dataset.ymax];
})()`))
	p := plot{left: frame[0], top: frame[1], width: frame[2], height: frame[3], ymax: frame[4]}
	if p.ymax != 20 {
		t.Fatalf("the pending chart's y axis reaches %g, want 20 (18 pending, rounded up)", p.ymax)
	}
	drawn := checkPending(t, h, p, "orders", points)
	// The counts of the steps, in order: all of them, unless the oldest
	// readings were older than History when the page was read.
	var steps []int64
	for i := range 7 {
		steps = append(steps, int64(3*i))
	}
	read := slices.Compact(slices.Clone(drawn))
	if len(read) < 2 || !slices.Equal(read, steps[len(steps)-len(read):]) {
		t.Fatalf("the pending chart draws orders at %v, want the steps %v in order", drawn, steps)
	}
	if len(read) < len(steps) {
		t.Logf("the readings of the first steps are older than History: %v", drawn)
	}
	title := get(t, ctx, "title", chromedp.Evaluate[string](`document.querySelector('#chart-pending polyline[data-series="orders"] title').textContent`))
	if title != "orders: 18 pending" {
		t.Fatalf("the line of orders is titled %q, want orders: 18 pending", title)
	}
	legend := get(t, ctx, "legend", chromedp.Text(css(`#chart-pending .legend`)))
	if !strings.Contains(legend, "orders 18 pending") || !strings.Contains(legend, "payments 6 pending") {
		t.Fatalf("the pending chart's legend says %q", legend)
	}
	why := get(t, ctx, "published", chromedp.Text(css(`#chart-published .empty`)))
	if !strings.Contains(why, "--keep-published") {
		t.Fatalf("the empty published chart says %q, want how to keep copies", why)
	}
	// Still the overview's cards and tables.
	if got := get(t, ctx, "pending", chromedp.Text(css("#pending"))); got != "29" {
		t.Fatalf("the overview counts %s pending, want 29 (5 seeded, 24 written)", got)
	}
	do(t, ctx, "scroll to the charts", chromedp.ScrollIntoView(css("#trends")))
	shot(t, ctx, "trends")
}
