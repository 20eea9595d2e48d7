package dashboard_test

import (
	"context"
	"slices"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/failgroup"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
)

// In a browser, on every dialect: the failures page groups the dead
// letters and parked messages by cause, a group's page shows its cause,
// and replaying the group through the confirmation puts exactly its dead
// letters back into the outbox.
func TestBrowserFailureGroups(t *testing.T) {
	for name, url := range databases {
		t.Run(name, func(t *testing.T) { testBrowserFailureGroups(t, url(t), name == "sqlite") })
	}
}

func testBrowserFailureGroups(t *testing.T, dbURL string, shots bool) {
	ctx := browser(t)
	f := newFixtureAt(t, dbURL, []string{"orders", "orders", "audit", "refunds"}, tooBig)
	f.park(t, "billing", "courier.payments", "handler panicked at payment.(*Service).charge (charge.go:42): card 4242 declined")
	f.park(t, "billing", "courier.payments", "handler panicked at payment.(*Service).charge (charge.go:42): card 5555 declined")
	f.park(t, "shipping", "courier.shipments", "warehouse API: 503 Service Unavailable")
	srv := serve(t, dashboard.Config{Database: f.drv})
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	big := groupOf(t, f, failgroup.OfDeadLetter(tooBig[0]))

	do(t, ctx, "failures", chromedp.Navigate(srv.URL+"/"), chromedp.Click(css(`header a[href="/failures"]`)), chromedp.WaitVisible(css("#groups")))
	rows := get(t, ctx, "groups", chromedp.Evaluate[[][]string](`[...document.querySelectorAll('#groups tr[data-group]')].map(r => [r.dataset.group, r.querySelector('.count').textContent])`))
	want := [][]string{{big.ID, "3"}}
	if len(rows) != 4 || !slices.Equal(rows[0], want[0]) || rows[1][1] != "2" {
		t.Fatalf("groups listed %v: want 4, the first %v, then billing's 2 panics", rows, want[0])
	}
	if shots {
		shot(t, ctx, "failures")
	}
	do(t, ctx, "open the group", chromedp.Click(css(`#groups tr[data-group="`+big.ID+`"] a`)), chromedp.WaitVisible(css("#cause")))
	if n := get(t, ctx, "members", chromedp.Evaluate[int](`document.querySelectorAll('#members tr').length - 1`)); n != 3 {
		t.Fatalf("%d members listed, want 3", n)
	}
	if shots {
		shot(t, ctx, "failure-group")
	}
	do(t, ctx, "replay the group", chromedp.Click(css("#replay-group")), chromedp.WaitVisible(css("#confirm")))
	ids := make([]string, 0, len(big.IDs))
	for _, id := range big.IDs {
		ids = append(ids, messageIDOf(t, f, id))
		if f.inOutbox(t, ids[len(ids)-1]) {
			t.Fatal("the confirmation page replayed the group already")
		}
	}
	do(t, ctx, "confirm", chromedp.Click(css("#go")), chromedp.WaitVisible(css("#flash")))
	if flash := get(t, ctx, "flash", chromedp.Text(css("#flash"))); flash != "replayed 3" {
		t.Fatalf("after the group's replay the page says %q", flash)
	}
	for _, id := range ids {
		if !f.inOutbox(t, id) {
			t.Fatalf("message %s of the group is not back in the outbox", id)
		}
	}
	left := f.deadLetters(t)
	if len(left) != 1 || left[0].Topic != "audit" || slices.ContainsFunc(left, func(d store.DeadLetter) bool { return slices.Contains(big.IDs, d.ID) }) {
		t.Fatalf("%d dead letters left, want the audit one, of another cause", len(left))
	}
	if gone := get(t, ctx, "gone", chromedp.Evaluate[string](`document.querySelector('#gone tr[data-group]').dataset.group`)); gone != big.ID {
		t.Fatalf("the replayed group shown as gone is %q, want %s", gone, big.ID)
	}
}

// messageIDOf returns the message id of relay dead letter id, while it is
// one.
func messageIDOf(t *testing.T, f *fixture, id int64) string {
	t.Helper()
	d, err := f.drv.Admin().DeadLetter(context.Background(), id)
	testenv.Must(t, err, "dead letter")
	return d.MessageID
}
