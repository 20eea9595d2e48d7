package dashboard_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/dashboard"
)

// stoppedText is what the stopped watch of saveWatches says a minute and
// a few seconds after it saved.
var stoppedText = regexp.MustCompile(`^This watch saved nothing for 1m\d+s \(its interval is 15s\)`)

// The Delivery page in a browser: reached from the nav, it shows the
// watch that found a lost message and a phantom (whose key is markup,
// shown as text), with what to do about each, and the watch that
// stopped.
func TestBrowserDelivery(t *testing.T) {
	ctx := browser(t)
	f := newFixture(t, []string{"orders"}, []string{"nats: message size exceeds maximum allowed"})
	lost, phantom := saveWatches(t, f)
	srv := serve(t, dashboard.Config{Database: f.drv, Clock: minuteLater})
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }

	do(t, ctx, "overview", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(css("header")))
	do(t, ctx, "delivery", chromedp.Click(css(`header a[href="/delivery"]`)), chromedp.WaitVisible(css("#watch-1")))
	if on := get(t, ctx, "nav", chromedp.Evaluate[string](`document.querySelector('header a.on').textContent`)); on != "Delivery" {
		t.Fatalf("the page's nav marks %q, want Delivery", on)
	}
	states := get(t, ctx, "watches", chromedp.Evaluate[[]string](`[...document.querySelectorAll('section.watch h2')].map(h => h.textContent)`))
	if strings.Join(states, "|") != "nats:COURIER findings|kafka:orders stopped" {
		t.Fatalf("the page shows the watches %q, want nats:COURIER findings (alarms first), then kafka:orders stopped", states)
	}
	rows := get(t, ctx, "findings", chromedp.Evaluate[[][]string](`[...document.querySelectorAll('#watch-0 table.findings tr')].slice(1).map(r => [...r.cells].map(c => c.textContent))`))
	if len(rows) != 2 || rows[0][0] != "phantom" || rows[0][2] != phantom.MessageID || rows[0][4] != hostileKey+`\x1b[31m` ||
		rows[1][0] != "lost" || rows[1][2] != lost.MessageID || rows[1][4] != "order-1042" {
		t.Fatalf("the findings read %q, want the phantom (its key as text), then the lost message", rows)
	}
	advice := get(t, ctx, "advice", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#watch-0 dl.advice dd')].map(d => d.textContent)`))
	if len(advice) != 3 || advice[0] != audit.Advice(audit.KindLost) || advice[1] != audit.Advice(audit.KindPhantom) || advice[2] != audit.Advice(audit.KindDuplicate) {
		t.Fatalf("the advice reads %q, want that of lost messages, phantoms and duplicates", advice)
	}
	// A minute since its save, and the time the test took since.
	if stopped := get(t, ctx, "stopped", chromedp.Text(css("#watch-1 p.stopped"))); !stoppedText.MatchString(stopped) {
		t.Fatalf("the stopped watch says %q", stopped)
	}
	shot(t, ctx, "delivery")
}
