package dashboard_test

import (
	"context"
	"database/sql"
	"fmt"
	"html/template"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
)

// browser starts a headless Chromium for the test and returns a context
// that drives one tab of it.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := testenv.Chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(shotWidth, shotHeight),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	ctx, cancelTime := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTime()
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(shotWidth, shotHeight)); err != nil {
		t.Fatalf("start chromium at %s: %v", path, err)
	}
	return ctx
}

// EnvScreenshots names the directory the browser test saves a PNG of each
// page it visits into, such as docs/dashboard (a relative path is taken
// from the repository's root). Unset, it saves none.
const EnvScreenshots = "COURIER_DASHBOARD_SCREENSHOTS"

// The size of the browser's window, and so of the screenshots.
const (
	shotWidth  = 1280
	shotHeight = 800
)

// shot saves the visible part of the tab's page as name.png in the
// directory COURIER_DASHBOARD_SCREENSHOTS names, if it names one; a
// relative path is taken from the repository's root.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv(EnvScreenshots)
	if dir == "" {
		return
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join("..", dir) // from this package to the repository's root
	}
	png := get(t, ctx, "screenshot "+name, chromedp.CaptureScreenshot())
	testenv.Must(t, os.MkdirAll(dir, 0o755), "screenshot directory")
	testenv.Must(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644), "save screenshot "+name)
}

// do runs steps in the tab, failing the test with what on an error.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// get runs one action that returns a value.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

func TestBrowser(t *testing.T) {
	ctx := browser(t)
	f := newFixture(t, []string{"orders", "payments", "audit", "audit"}, []string{"nats: message size exceeds maximum allowed", "schema rejected"})
	seed(t, f)
	srv := serve(t, dashboard.Config{Database: f.drv, Sagas: f.drv.Sagas()})
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }

	// The overview.
	do(t, ctx, "overview", chromedp.Navigate(srv.URL+"/"))
	dead := get(t, ctx, "dead letters", chromedp.Text(css("#dead")))
	pending := get(t, ctx, "pending", chromedp.Text(css("#pending")))
	parked := get(t, ctx, "parked", chromedp.Text(css("#parked")))
	if dead != "4" || pending != "5" || parked != "3" {
		t.Fatalf("overview shows %s dead letters, %s pending and %s parked, want 4, 5 and 3", dead, pending, parked)
	}
	shot(t, ctx, "overview")

	// Filter the dead letters by topic, open the one left, replay it
	// through the confirmation.
	do(t, ctx, "dead letters",
		chromedp.Click(css(`header a[href="/dead-letters"]`)),
		chromedp.WaitVisible(css("#filter")),
	)
	if n := get(t, ctx, "count", chromedp.Evaluate[int](`document.querySelectorAll('#bulk input[name="id"]').length`)); n != 4 {
		t.Fatalf("%d dead letters listed, want 4", n)
	}
	shot(t, ctx, "dead-letters")
	do(t, ctx, "filter",
		chromedp.SendKeys(css(`#filter input[name="topic"]`), "payments"),
		chromedp.Submit(css("#filter")),
		chromedp.WaitVisible(css(`#filter input[value="payments"]`)),
	)
	if n := get(t, ctx, "count", chromedp.Evaluate[int](`document.querySelectorAll('#bulk input[name="id"]').length`)); n != 1 {
		t.Fatalf("%d dead letters of topic payments listed, want 1", n)
	}
	do(t, ctx, "open", chromedp.Click(css("#bulk td a")), chromedp.WaitVisible(css("#history")))
	messageID := get(t, ctx, "message id", chromedp.Text(css("#message-id")))
	lastError := get(t, ctx, "last error", chromedp.Text(css("#last-error")))
	if f.dead[messageID] != "payments" || lastError != "schema rejected" {
		t.Fatalf("opened %s (topic %q, error %q), want the payments dead letter", messageID, f.dead[messageID], lastError)
	}
	shot(t, ctx, "dead-letter")
	do(t, ctx, "replay", chromedp.Click(css(`button[value="replay"]`)), chromedp.WaitVisible(css("#confirm")))
	shot(t, ctx, "confirm")
	if f.inOutbox(t, messageID) {
		t.Fatal("the confirmation page replayed the dead letter already")
	}
	do(t, ctx, "confirm replay", chromedp.Click(css("#go")), chromedp.WaitVisible(css("#flash")))
	if flash := get(t, ctx, "flash", chromedp.Text(css("#flash"))); flash != "replayed 1" || !f.inOutbox(t, messageID) {
		t.Fatalf("after the replay the page says %q; back in the outbox: %v", flash, f.inOutbox(t, messageID))
	}

	// Discard in bulk: tick both audit dead letters.
	do(t, ctx, "list audit", chromedp.Navigate(srv.URL+"/dead-letters?topic=audit"), chromedp.WaitVisible(css("#bulk")))
	ticked := get(t, ctx, "tick", chromedp.Evaluate[int](`document.querySelectorAll('#bulk input[name="id"]').forEach(b => b.click());
document.querySelectorAll('#bulk input[name="id"]:checked').length`))
	if ticked != 2 {
		t.Fatalf("%d audit dead letters ticked, want 2", ticked)
	}
	do(t, ctx, "bulk discard", chromedp.Click(css(`#bulk button[value="discard"]`)), chromedp.WaitVisible(css("#confirm")))
	csrf := get(t, ctx, "csrf", chromedp.Value(css(`#confirm input[name="csrf"]`)))
	do(t, ctx, "confirm bulk discard", chromedp.Click(css("#go")), chromedp.WaitVisible(css("#flash")))
	flash := get(t, ctx, "flash", chromedp.Text(css("#flash")))
	left := f.deadLetters(t)
	if flash != "discarded 2" || len(left) != 1 || left[0].Topic != "orders" {
		t.Fatalf("after the bulk discard the page says %q and %d dead letters are left, want the orders one", flash, len(left))
	}

	// A post without the form's CSRF token is refused.
	status := get(t, ctx, "post without CSRF token", chromedp.Evaluate[int](fmt.Sprintf(
		`fetch('/dead-letters/discard', {method: 'POST', body: new URLSearchParams({id: '%d'})}).then(r => r.status)`, left[0].ID),
		chromedp.EvalAwaitPromise))
	if status != http.StatusForbidden {
		t.Fatalf("a post without the CSRF token answered %d, want 403", status)
	}

	// A form on another origin that posts to the dashboard is refused, even
	// holding a valid CSRF token (as if it had leaked): the browser says
	// where the post comes from.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		page := template.Must(template.New("").Parse(`<form method="post" action="{{.Action}}" id="f">
<input name="csrf" value="{{.CSRF}}"><input name="id" value="{{.ID}}"></form>
<script>document.getElementById('f').submit()</script>`))
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = page.Execute(w, map[string]any{"Action": srv.URL + "/dead-letters/discard", "CSRF": csrf, "ID": left[0].ID})
	}))
	t.Cleanup(evil.Close)
	do(t, ctx, "cross-origin post", chromedp.Navigate(evil.URL), chromedp.WaitVisible(css("#error")))
	refused := get(t, ctx, "refusal", chromedp.Text(css("#error")))
	if !strings.Contains(refused, "another site") || len(f.deadLetters(t)) != 1 {
		t.Fatalf("a cross-origin post: page says %q, %d dead letters left, want it refused", refused, len(f.deadLetters(t)))
	}

	// The consumers, one's parked messages, the sagas, one saga's
	// timeline, the idempotency keys.
	do(t, ctx, "consumers", chromedp.Navigate(srv.URL+"/"), chromedp.Click(css(`header a[href="/consumers"]`)), chromedp.WaitVisible(css("#consumers")))
	if n := get(t, ctx, "consumer rows", chromedp.Evaluate[int](`document.querySelectorAll('#consumers tr').length - 1`)); n != 3 {
		t.Fatalf("%d consumers listed, want 3 (billing, shipping, audit-log)", n)
	}
	shot(t, ctx, "consumers")
	do(t, ctx, "parked of billing", chromedp.Click(css(`#consumers a[href$="consumer=billing"]`)), chromedp.WaitVisible(css("#bulk")))
	if n := get(t, ctx, "parked rows", chromedp.Evaluate[int](`document.querySelectorAll('#bulk input[name="id"]').length`)); n != 2 {
		t.Fatalf("%d parked messages of billing listed, want 2", n)
	}
	shot(t, ctx, "parked")
	do(t, ctx, "sagas", chromedp.Click(css(`header a[href="/sagas"]`)), chromedp.WaitVisible(css("#overdue")))
	shot(t, ctx, "sagas")
	do(t, ctx, "saga timeline", chromedp.Click(css(`#overdue a`)), chromedp.WaitVisible(css("#timeline")))
	if n := get(t, ctx, "ignored events", chromedp.Evaluate[int](`document.querySelectorAll('#timeline tr.ignored').length`)); n != 1 {
		t.Fatalf("%d ignored events in the timeline, want 1", n)
	}
	shot(t, ctx, "saga")
	do(t, ctx, "keys", chromedp.Click(css(`header a[href="/keys"]`)), chromedp.WaitVisible(css("#stale")))
	if n := get(t, ctx, "in flight", chromedp.Text(css("#in-flight"))); n != "2" {
		t.Fatalf("%s keys in flight, want 2", n)
	}
	shot(t, ctx, "keys")
}

// seed adds what the operations pages show to f: a backlog of five
// messages (two leased by a relay), parked messages and failed runs of
// consumers, sagas (one past its deadline, with a transition and an
// ignored event), idempotency keys completed and left in flight.
func seed(t *testing.T, f *fixture) {
	t.Helper()
	ctx := context.Background()
	drv := f.drv
	var msgs []courier.Message
	for i, topic := range []string{"shipments", "shipments", "shipments", "invoices", "invoices"} {
		id, _ := uuid.NewV7()
		msgs = append(msgs, courier.Message{ID: id, Topic: topic, Key: fmt.Sprintf("order-%d", 1040+i), Type: "OrderShipped", Version: 1,
			Payload: []byte(`{"order":"o-1040"}`), OccurredAt: time.Now().Add(-time.Duration(5-i) * time.Minute)})
	}
	testenv.Must(t, drv.InTx(ctx, func(tx *sql.Tx) error { return drv.Inserter().Insert(ctx, tx, msgs) }), "insert")
	rs, err := drv.RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "relay store")
	b, err := rs.Claim(ctx, "relay-7f3a", 2, time.Hour)
	testenv.Must(t, err, "claim")
	if len(b.Records) != 2 {
		t.Fatalf("claimed %d rows, want 2", len(b.Records))
	}

	f.park(t, "billing", "courier.payments", "card declined: insufficient funds")
	f.park(t, "billing", "courier.payments", "ledger unavailable: connection refused")
	f.park(t, "audit-log", "courier.audit", "payload does not match schema audit.v2")
	_, err = drv.ConsumerStore().RecordFailure(ctx, "shipping", msgs[0].ID, store.Attempt{At: time.Now(), Error: "warehouse API timed out"})
	testenv.Must(t, err, "record failure")

	past := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	later := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	err = drv.Sagas().InTx(ctx, func(tx *sql.Tx) error {
		s := drv.Sagas()
		for _, r := range []store.SagaRecord{
			{Type: "order", ID: "o-1042", State: "awaiting_payment", Phase: "running", Deadline: &past, Attempts: 2},
			{Type: "order", ID: "o-1043", State: "awaiting_payment", Phase: "running", Deadline: &later},
			{Type: "order", ID: "o-1044", State: "awaiting_shipment", Phase: "running", Deadline: &later},
			{Type: "order", ID: "o-1041", State: "refunding", Phase: "compensating"},
			{Type: "order", ID: "o-1040", Phase: "completed"},
		} {
			r.Data, r.Version, r.CreatedAt, r.UpdatedAt = []byte("{}"), 1, past, past
			if err := s.Create(ctx, tx, r); err != nil {
				return err
			}
		}
		for _, e := range []store.SagaEvent{
			{EventID: "e-81", EventType: "OrderPlaced", To: "awaiting_stock", Outcome: "applied"},
			{EventID: "e-82", EventType: "StockReserved", From: "awaiting_stock", To: "awaiting_payment", Outcome: "applied"},
			{EventID: "e-83", EventType: "ShipmentBooked", From: "awaiting_payment", To: "awaiting_payment", Outcome: "ignored", Reason: "not awaited in this state"},
		} {
			e.Type, e.SagaID, e.At = "order", "o-1042", past
			if err := s.Record(ctx, tx, e); err != nil {
				return err
			}
		}
		return nil
	})
	testenv.Must(t, err, "sagas")

	keys := drv.Idempotency()
	for i, lock := range []time.Duration{-time.Minute, -10 * time.Minute, time.Minute, time.Minute} {
		c := store.KeyClaim{Scope: "POST /orders", Key: fmt.Sprintf("key-%d", 9000+i), Fingerprint: []byte("f"), Owner: uuid.New(), LockFor: lock, Retain: time.Hour}
		_, _, err := keys.Claim(ctx, c)
		testenv.Must(t, err, "claim key")
		if i >= 2 {
			err := keys.InTx(ctx, func(tx *sql.Tx) error {
				_, err := keys.Complete(ctx, tx, c.Scope, c.Key, c.Owner, store.StoredResponse{Status: 201})
				return err
			})
			testenv.Must(t, err, "complete key")
		}
	}
}

// With a token, the browser is sent to the login page, and after it back to
// the page it asked for, its session held in a cookie.
func TestBrowserLogin(t *testing.T) {
	ctx := browser(t)
	f := newFixture(t, []string{"orders"}, []string{"too big"})
	srv := serve(t, dashboard.Config{Database: f.drv, Token: "correct-horse-battery"})
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }

	do(t, ctx, "ask for the dead letters", chromedp.Navigate(srv.URL+"/dead-letters?topic=orders"), chromedp.WaitVisible(css(`input[name="token"]`)))
	do(t, ctx, "wrong token",
		chromedp.SendKeys(css(`input[name="token"]`), "wrong"),
		chromedp.Submit(css(`input[name="token"]`)),
		chromedp.WaitVisible(css(".error")),
	)
	do(t, ctx, "right token",
		chromedp.SendKeys(css(`input[name="token"]`), "correct-horse-battery"),
		chromedp.Submit(css(`input[name="token"]`)),
		chromedp.WaitVisible(css("#bulk")),
	)
	if n := get(t, ctx, "rows", chromedp.Evaluate[int](`document.querySelectorAll('#bulk input[name="id"]').length`)); n != 1 {
		t.Fatalf("after logging in, %d dead letters of orders listed, want 1", n)
	}
	do(t, ctx, "overview", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(css("#dead")))
	do(t, ctx, "log out", chromedp.Click(css(`header form button`)), chromedp.WaitVisible(css(`input[name="token"]`)))
	do(t, ctx, "after logging out", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(css(`input[name="token"]`)))
}

// The dashboard of tenants in a browser: one login, the tenant list, a
// click through to a tenant's dead letters and a replay there, which
// changes that tenant's database only; a tenant with a hostile name shown
// as text; a post without the CSRF token refused on a tenant's page.
func TestBrowserTenants(t *testing.T) {
	ctx := browser(t)
	const hostile = `<img src=x onerror="document.title='pwned'">`
	s := newTenantSet(t)
	acme := s.sqlite("acme", "orders", "payments")
	globex := s.sqlite("globex", "orders")
	s.sqlite(hostile, "orders")
	srv := s.serve(dashboard.TenantsConfig{Config: dashboard.Config{Token: "correct-horse-battery"}})
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }

	do(t, ctx, "log in",
		chromedp.Navigate(srv.URL+"/"),
		chromedp.SendKeys(css(`input[name="token"]`), "correct-horse-battery"),
		chromedp.Submit(css(`input[name="token"]`)),
		chromedp.WaitVisible(css("#tenants")),
	)
	if n := get(t, ctx, "tenants", chromedp.Evaluate[int](`document.querySelectorAll('#tenants tr[data-tenant]').length`)); n != 3 {
		t.Fatalf("%d tenants listed, want 3", n)
	}

	do(t, ctx, "acme", chromedp.Click(css(`tr[data-tenant="acme"] a.tenant-link`)), chromedp.WaitVisible(css("#dead")))
	if name, dead := get(t, ctx, "tenant", chromedp.Text(css("#tenant"))), get(t, ctx, "dead", chromedp.Text(css("#dead"))); name != "acme" || dead != "2" {
		t.Fatalf("acme's overview names %q with %s dead letters, want acme and 2", name, dead)
	}
	do(t, ctx, "acme's dead letters", chromedp.Click(css(`header a[href="/t/acme/dead-letters"]`)), chromedp.WaitVisible(css("#bulk")))
	do(t, ctx, "open", chromedp.Click(css("#bulk td a")), chromedp.WaitVisible(css("#history")))
	messageID := get(t, ctx, "message id", chromedp.Text(css("#message-id")))
	do(t, ctx, "replay", chromedp.Click(css(`button[value="replay"]`)), chromedp.WaitVisible(css("#confirm")))
	do(t, ctx, "confirm replay", chromedp.Click(css("#go")), chromedp.WaitVisible(css("#flash")))
	if flash := get(t, ctx, "flash", chromedp.Text(css("#flash"))); flash != "replayed 1" || !acme.inOutbox(t, messageID) {
		t.Fatalf("after the replay acme's page says %q; back in acme's outbox: %v", flash, acme.inOutbox(t, messageID))
	}
	if n := len(globex.deadLetters(t)); n != 1 {
		t.Fatalf("globex holds %d dead letters after a replay on acme, want 1", n)
	}
	if url := get(t, ctx, "location", chromedp.Location()); !strings.HasPrefix(url, srv.URL+"/t/acme/dead-letters") {
		t.Fatalf("after the replay the browser is at %s, want acme's dead letters", url)
	}

	// The hostile name is text, never markup.
	do(t, ctx, "back to the tenants", chromedp.Click(css(`header a[href="/"]`)), chromedp.WaitVisible(css("#tenants")))
	do(t, ctx, "the hostile tenant", chromedp.Evaluate[chromedp.Void](`[...document.querySelectorAll('a.tenant-link')].find(a => a.textContent.startsWith('<img')).click()`),
		chromedp.WaitVisible(css("#dead")))
	if name := get(t, ctx, "tenant", chromedp.Text(css("#tenant"))); name != hostile {
		t.Fatalf("the hostile tenant's page names %q, want its name as text", name)
	}
	if title := get(t, ctx, "title", chromedp.Title()); title == "pwned" || get(t, ctx, "images", chromedp.Evaluate[int](`document.images.length`)) != 0 {
		t.Fatalf("the hostile tenant's name ran as markup (title %q)", title)
	}

	// A post without the form's CSRF token is refused, on a tenant's page too.
	status := get(t, ctx, "post without CSRF token", chromedp.Evaluate[int](fmt.Sprintf(
		`fetch('/t/globex/dead-letters/discard', {method: 'POST', body: new URLSearchParams({id: '%d'})}).then(r => r.status)`, globex.deadLetters(t)[0].ID),
		chromedp.EvalAwaitPromise))
	if status != http.StatusForbidden || len(globex.deadLetters(t)) != 1 {
		t.Fatalf("a post without the CSRF token answered %d, want 403 and nothing discarded", status)
	}
}
