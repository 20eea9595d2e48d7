package dashboard_test

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
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
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	ctx, cancelTime := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTime()
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium at %s: %v", path, err)
	}
	return ctx
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
	srv := serve(t, dashboard.Config{Database: f.drv, Sagas: f.drv.Sagas()})
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }

	// The overview.
	do(t, ctx, "overview", chromedp.Navigate(srv.URL+"/"))
	dead := get(t, ctx, "dead letters", chromedp.Text(css("#dead")))
	pending := get(t, ctx, "pending", chromedp.Text(css("#pending")))
	if dead != "4" || pending != "0" {
		t.Fatalf("overview shows %s dead letters and %s pending, want 4 and 0", dead, pending)
	}

	// Filter the dead letters by topic, open the one left, replay it
	// through the confirmation.
	do(t, ctx, "filter",
		chromedp.Click(css(`header a[href="/dead-letters"]`)),
		chromedp.WaitVisible(css("#filter")),
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
	do(t, ctx, "replay", chromedp.Click(css(`button[value="replay"]`)), chromedp.WaitVisible(css("#confirm")))
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
