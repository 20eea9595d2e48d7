package dashboard_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/failgroup"
)

// The held keys in a browser: the overview counts them and links to
// their page, which lists them; a cause opens on the page of the dead
// letter, which lists the messages held behind it and says what replay
// and discard do to them; replayed through the confirmation, which says
// it too, its key leaves the list. The failure group of two causes counts
// what they hold.
func TestBrowserHeldKeys(t *testing.T) {
	ctx := browser(t)
	const why = "kafka: schema registry rejected OrderAmended v3: field total is missing"
	f := newFixture(t, []string{"orders", "payments"}, []string{"nats: message size exceeds maximum allowed"})
	amended := f.hold(t, "orders", "order-1042", why, 4)
	f.hold(t, "orders", "order-1057", why, 2)
	f.hold(t, "payments", "acct-<7>", "payment gateway refused: account closed", 1)
	srv := serve(t, dashboard.Config{Database: f.drv})
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }

	do(t, ctx, "overview", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(css("#held-keys")))
	if keys, held := get(t, ctx, "held keys", chromedp.Text(css("#held-keys"))), get(t, ctx, "held", chromedp.Text(css("#held"))); keys != "3" || held != "7" {
		t.Fatalf("the overview counts %s held keys and %s held messages, want 3 and 7", keys, held)
	}
	do(t, ctx, "held keys", chromedp.Click(css(`header a[href="/held-keys"]`)), chromedp.WaitVisible(css("#held-keys")))
	rows := get(t, ctx, "rows", chromedp.Evaluate[[][]string](`[...document.querySelectorAll('#held-keys tr')].slice(1).map(r => [...r.cells].map(c => c.textContent))`))
	if len(rows) != 3 || rows[0][0] != fmt.Sprintf("relay:%d", amended) || rows[0][2] != "order-1042" || rows[0][4] != "4" || rows[2][2] != "acct-<7>" {
		t.Fatalf("the held keys page lists %q, want order-1042 (4 held), order-1057, acct-<7>", rows)
	}
	if on := get(t, ctx, "nav", chromedp.Evaluate[string](`document.querySelector('header a.on').textContent`)); on != "Held keys" {
		t.Fatalf("the page's nav marks %q, want Held keys", on)
	}
	shot(t, ctx, "held-keys")

	g := groupOf(t, f, failgroup.OfDeadLetter(why))
	do(t, ctx, "failure group", chromedp.Navigate(srv.URL+"/failures/"+g.ID), chromedp.WaitVisible(css("#holds")))
	if holds := get(t, ctx, "holds", chromedp.Text(css("#holds"))); holds != "2 members, 6 messages held behind them" {
		t.Fatalf("the failure group's page says %q of its held keys", holds)
	}
	shot(t, ctx, "held-failure-group")
	do(t, ctx, "held keys", chromedp.Navigate(srv.URL+"/held-keys"), chromedp.WaitVisible(css("#held-keys")))
	do(t, ctx, "open the cause", chromedp.Click(css(`#held-keys td a`)), chromedp.WaitVisible(css("#holds")))
	held := get(t, ctx, "held", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#held tr')].slice(1).map(r => r.cells[2].textContent)`))
	if strings.Join(held, " ") != "Step1 Step2 Step3 Step4" {
		t.Fatalf("the dead letter's page lists %q held behind it, want Step1 to Step4 in order", held)
	}
	shot(t, ctx, "held-dead-letter")
	do(t, ctx, "replay", chromedp.Click(css(`button[value="replay"]`)), chromedp.WaitVisible(css("#confirm")))
	if page := get(t, ctx, "confirmation", chromedp.Text(css("main"))); !strings.Contains(page, "1 of them holds its key: it is published first, then the messages held behind it, in order.") {
		t.Fatalf("the replay's confirmation does not say what it does to the held messages:\n%s", page)
	}
	shot(t, ctx, "held-confirm")
	do(t, ctx, "confirm replay", chromedp.Click(css("#go")), chromedp.WaitVisible(css("#flash")))
	if flash := get(t, ctx, "flash", chromedp.Text(css("#flash"))); flash != "replayed 1" {
		t.Fatalf("after the replay the page says %q", flash)
	}
	do(t, ctx, "held keys again", chromedp.Click(css(`header a[href="/held-keys"]`)), chromedp.WaitVisible(css("#held-keys")))
	if keys := get(t, ctx, "keys", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#held-keys tr')].slice(1).map(r => r.cells[2].textContent)`)); strings.Join(keys, " ") != "order-1057 acct-<7>" {
		t.Fatalf("after the replay the held keys are %q, want order-1057 and acct-<7>", keys)
	}
}
