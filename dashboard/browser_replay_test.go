package dashboard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testwait"
	"github.com/courier-go/courier/store"
)

// In a browser: the replay confirmation of the dead letters shows their
// failure groups and the guards; a replay with a canary goes to the
// Replay runs page, which shows the run stopped once the canary had no
// outcome (no relay runs).
func TestBrowserGuardedReplay(t *testing.T) {
	ctx := browser(t)
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	f := newFixture(t, []string{"orders", "orders", "orders"}, []string{"nats: message size exceeds maximum allowed"})
	srv := serve(t, dashboard.Config{Database: f.drv})
	do(t, ctx, "dead letters", chromedp.Navigate(srv.URL+"/dead-letters"), chromedp.WaitVisible(css("#bulk")))
	ticked := get(t, ctx, "tick", chromedp.Evaluate[int](`document.querySelectorAll('#bulk input[name="id"]').forEach(b => b.click());
document.querySelectorAll('#bulk input[name="id"]:checked').length`))
	if ticked != 3 {
		t.Fatalf("%d dead letters ticked, want 3", ticked)
	}
	do(t, ctx, "replay the three", chromedp.Click(css(`#bulk button[value="replay"]`)), chromedp.WaitVisible(css("#confirm")))
	if g := get(t, ctx, "guards", chromedp.Text(css("#guards"))); !strings.Contains(g, "(3)") || !strings.Contains(g, "Canary") {
		t.Fatalf("the confirmation's guards say %q", g)
	}
	do(t, ctx, "set a canary",
		chromedp.SetValue(css("#canary"), "1"), chromedp.SetValue(css("#wait"), "300ms"))
	shot(t, ctx, "replay-guards")
	do(t, ctx, "start the run", chromedp.Click(css("#go")), chromedp.WaitVisible(css("#runs")))
	if flash := get(t, ctx, "flash", chromedp.Text(css("#flash"))); !strings.HasPrefix(flash, "started replay run ") {
		t.Fatalf("after the start the page says %q", flash)
	}
	// The run goes on in the dashboard: wait for its end in the
	// database, then look at the page.
	testwait.Eventually(t, 10*time.Second, func() bool {
		runs, err := f.drv.ReplayRuns().ListRuns(context.Background(), 0, 1)
		return err == nil && len(runs) == 1 && runs[0].State != store.RunRunning
	}, "the run did not end")
	do(t, ctx, "reload runs", chromedp.Navigate(srv.URL+"/runs"), chromedp.WaitVisible(css("#runs")))
	if row := get(t, ctx, "run", chromedp.Text(css("#runs tr.run-stopped"))); !strings.Contains(row, "canary") || !strings.Contains(row, "stopped") {
		t.Fatalf("the run's row says %q", row)
	}
	shot(t, ctx, "replay-runs")
}
