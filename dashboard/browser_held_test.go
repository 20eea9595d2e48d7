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

// The keys consumers hold in a browser: the overview counts them and
// links to their section of the Held keys page, which lists them; a cause
// opens on its parked message's page, which says it holds its key and how
// many wait behind it; the list of the consumer's parked messages marks
// the cause and the held ones, whose page names the cause, linked.
func TestBrowserHeldKeysConsumers(t *testing.T) {
	ctx := browser(t)
	f := newFixture(t, []string{"orders"}, []string{"nats: message size exceeds maximum allowed"})
	f.hold(t, "orders", "order-1042", "kafka: schema registry rejected OrderAmended v3: field total is missing", 2)
	const why = "ledger: account acct-17 is frozen (compliance review)"
	cause := f.holdParked(t, "ledger", "courier.accounts", "acct-17", why)
	for range 3 {
		f.holdParked(t, "ledger", "courier.accounts", "acct-17", why)
	}
	f.holdParked(t, "ledger", "courier.accounts", "acct-<31>", "pq: deadlock detected")
	f.holdParked(t, "billing", "courier.payments", "acct-17", "payment gateway refused: card expired")
	srv := serve(t, dashboard.Config{Database: f.drv})
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }

	do(t, ctx, "overview", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(css("#consumer-held-keys")))
	if keys, held := get(t, ctx, "consumer held keys", chromedp.Text(css("#consumer-held-keys"))), get(t, ctx, "consumer held", chromedp.Text(css("#consumer-held"))); keys != "3" || held != "3" {
		t.Fatalf("the overview counts %s keys consumers hold and %s messages parked behind them, want 3 and 3", keys, held)
	}
	do(t, ctx, "consumer holds", chromedp.Click(css(`a[href="/held-keys#consumer-holds"]`)), chromedp.WaitVisible(css("#consumer-held-keys")))
	rows := get(t, ctx, "rows", chromedp.Evaluate[[][]string](`[...document.querySelectorAll('#consumer-held-keys tr')].slice(1).map(r => [...r.cells].map(c => c.textContent))`))
	if len(rows) != 3 || rows[0][0] != "ledger" || rows[0][1] != "acct-17" || rows[0][2] != fmt.Sprintf("consumer:%d", cause.ID) || rows[0][5] != "3" ||
		rows[1][1] != "acct-<31>" || rows[2][0] != "billing" {
		t.Fatalf("the consumer side of the held keys page lists %q, want ledger's acct-17 (3 held), acct-<31>, billing's acct-17", rows)
	}
	do(t, ctx, "scroll to the consumer side", chromedp.ScrollIntoView(css("#consumer-holds")))
	shot(t, ctx, "held-consumer")

	do(t, ctx, "open the cause", chromedp.Click(css(`#consumer-held-keys td a`)), chromedp.WaitVisible(css("#holds")))
	if holds := get(t, ctx, "holds", chromedp.Text(css("#holds p.error"))); !strings.Contains(holds, "This message holds its key acct-17 for consumer ledger") ||
		!strings.Contains(holds, "3 later messages of the key are parked behind it") {
		t.Fatalf("the cause's page says %q", holds)
	}
	shot(t, ctx, "held-parked-cause")
	do(t, ctx, "the consumer's parked messages", chromedp.Click(css(`#holds a[href="/parked?consumer=ledger"]`)), chromedp.WaitVisible(css("#bulk")))
	marks := get(t, ctx, "marks", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#bulk tr')].slice(1).map(r => r.cells[1].textContent)`))
	want := []string{fmt.Sprintf("consumer:%d holds its key", cause.ID)}
	for i := range 3 {
		want = append(want, fmt.Sprintf("consumer:%d held behind consumer:%d", cause.ID+int64(i)+1, cause.ID))
	}
	if len(marks) != 5 || strings.Join(marks[:4], "|") != strings.Join(want, "|") || !strings.HasSuffix(marks[4], "holds its key") {
		t.Fatalf("the list of ledger's parked messages reads %q, want %q and a cause", marks, want)
	}
	shot(t, ctx, "held-parked")
	do(t, ctx, "open a held one", chromedp.Click(css(`#bulk tr:nth-child(3) td:nth-child(2) > a`)), chromedp.WaitVisible(css("#held-behind")))
	if behind := get(t, ctx, "held behind", chromedp.Text(css("#held-behind p.error"))); !strings.HasPrefix(behind, fmt.Sprintf("This message is held behind consumer:%d, the parked message that holds its key acct-17 for consumer ledger", cause.ID)) {
		t.Fatalf("the held message's page says %q", behind)
	}
	do(t, ctx, "follow it to its cause", chromedp.Click(css("#held-behind a")), chromedp.WaitVisible(css("#holds")))
	if title := get(t, ctx, "title", chromedp.Text(css("h1"))); title != fmt.Sprintf("Parked message consumer:%d", cause.ID) {
		t.Fatalf("the held message's link leads to %q", title)
	}
}
