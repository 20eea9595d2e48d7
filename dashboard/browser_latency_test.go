package dashboard_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
)

// The latency charts in a browser: the p50 and p99 lines of each topic
// that consumers recorded (latency.Recorder, six minutes of it), their
// points mapping back to the latencies applied, with a legend of the
// newest figures.
func TestBrowserLatency(t *testing.T) {
	ctx := browser(t)
	f := newFixture(t, []string{"audit"}, []string{"too big"})
	cfg := recordLatencySteps(t, f, time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	cfg.History = 8 * time.Minute // the six minutes recorded fill most of the charts
	h, err := dashboard.New(cfg)
	testenv.Must(t, err, "new dashboard")
	srv := serveHandler(t, h)
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }

	do(t, ctx, "overview", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(css(`#chart-latency-p99 polyline[data-series="orders"]`)))
	for _, id := range []string{"chart-latency-p50", "chart-latency-p99"} {
		chart := get(t, ctx, id, chromedp.Evaluate[string](`document.querySelector('#`+id+`').outerHTML`))
		xs, vs := latencyLine(t, chart, "orders")
		checkLatencyLine(t, xs, vs, latencySteps, id+" orders")
		// Drawn, not only in the markup: the line has a length on the
		// page.
		length := get(t, ctx, id+" length", chromedp.Evaluate[float64](`document.querySelector('#`+id+` polyline[data-series="orders"]').getTotalLength()`))
		box := get(t, ctx, id+" box", chromedp.Evaluate[[]float64](`(() => { const r = document.querySelector('#`+id+` polyline[data-series="orders"]').getBoundingClientRect(); return [r.width, r.height]; })()`))
		if length < 300 || box[0] < 300 || box[1] < 20 {
			t.Fatalf("%s: the line of orders is %g long, %gx%g px on the page: not drawn", id, length, box[0], box[1])
		}
	}
	legend := get(t, ctx, "legend", chromedp.Text(css(`#chart-latency-p99 .legend`)))
	if !strings.Contains(legend, "orders p99 3") || !strings.Contains(legend, "payments p99 4") {
		t.Fatalf("the p99 chart's legend says %q, want orders at about 320ms and payments at about 40ms", legend)
	}
	do(t, ctx, "scroll to the latency charts", chromedp.ScrollIntoView(css("#chart-latency-p50")))
	shot(t, ctx, "latency")
}
