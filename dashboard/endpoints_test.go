package dashboard_test

import (
	"context"
	"database/sql"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/memstore"
)

// /static/ serves the style sheet and nothing else of what the dashboard
// embeds: no template's source, by whatever spelling of a path that steps
// out of the static directory, and no listing of the directory. The
// dashboard of tenants serves its shared style sheet the same way.
func TestStaticServesOnlyStaticFiles(t *testing.T) {
	f := newFixture(t, []string{"orders"}, []string{"x"})
	one := serve(t, dashboard.Config{Database: f.drv})
	ts := newTenantSet(t)
	ts.sqlite("acme", "orders")
	many := ts.serve(dashboard.TenantsConfig{})
	hostile := []string{
		"/static/..%2ftemplates%2flogin.html", "/static/..%2Ftemplates%2Flayout.html", "/static/%2e%2e%2ftemplates%2flogin.html",
		"/static/%2e%2e/templates/login.html", "/static/.%2e/templates/login.html", "/static/..%5ctemplates%5clogin.html",
		"/static/", "/static/.", "/static/%2e", "/static/style.css/", "/static/templates/login.html", "/static/../templates/login.html",
		"/static//style.css", "/static/no-such.css",
	}
	for _, srv := range []string{one.URL, many.URL} {
		for _, p := range hostile {
			code, hdr, body := send(t, http.MethodGet, srv+p, "127.0.0.1", nil, nil)
			if code == http.StatusOK || strings.Contains(body, "{{") || strings.Contains(body, "style.css</a>") {
				t.Errorf("GET %s: %d %s, want no file and no listing:\n%s", p, code, hdr.Get("Content-Type"), body)
			}
		}
		code, hdr, body := send(t, http.MethodGet, srv+"/static/style.css", "127.0.0.1", nil, nil)
		if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/css") || !strings.Contains(body, "{") {
			t.Errorf("GET /static/style.css: %d %s\n%s", code, hdr.Get("Content-Type"), body)
		}
	}
}

var flashRe = regexp.MustCompile(`<p class="flash" id="flash">([^<]*)</p>`)

// flashIn returns the banner of a page, "" when it has none.
func flashIn(page string) string {
	if m := flashRe.FindStringSubmatch(page); m != nil {
		return html.UnescapeString(m[1])
	}
	return ""
}

// The banner a list shows after an action says only what the dashboard
// did: a link with done= holding any other text, as a page of another
// site could make it, shows no banner, and counts that are not numbers
// show 0. After a real discard, the banner says what was done, in fixed
// words.
func TestFlashIsACode(t *testing.T) {
	f := newFixture(t, []string{"orders", "payments"}, []string{"x"})
	srv := serve(t, dashboard.Config{Database: f.drv})
	c := newClient(t, srv.URL)
	for target, want := range map[string]string{
		"/dead-letters?done=" + url.QueryEscape("Your session expired: log in again at evil.example"): "",
		"/dead-letters?done=" + url.QueryEscape("replayed 1; call +1 555 0100"):                       "",
		"/parked?done=REPLAYED&n=1":                                                          "",
		"/scheduled?done=%3Cb%3Ehi%3C%2Fb%3E":                                                "",
		"/dead-letters?done=replayed&n=3":                                                    "replayed 3",
		"/dead-letters?done=discarded&n=" + url.QueryEscape("2 (all of them)"):               "discarded 0",
		"/dead-letters?done=replayed&n=1&failed=" + url.QueryEscape("1: visit evil.example"): "replayed 1",
		"/scheduled?done=cancelled&n=0&gone=2":                                               "cancelled 0; 2 no longer waited",
	} {
		code, page := c.get(target)
		if got := flashIn(page); code != 200 || got != want {
			t.Errorf("GET %s: %d, banner %q, want %q", target, code, got, want)
		}
		if strings.Contains(page, "evil.example") || strings.Contains(page, "555") {
			t.Errorf("GET %s: the page shows text of its URL:\n%s", target, page)
		}
	}

	_, page := c.get("/dead-letters/confirm?action=discard&all=1")
	id := f.deadLetters(t)[0].ID
	resp := c.roundTrip("/dead-letters/discard", url.Values{"csrf": {csrfOf(t, page)}, "id": {itoa(int(id)), "999999", "not-an-id"}})
	loc := resp.Header.Get("Location")
	u, err := url.Parse(loc)
	testenv.Must(t, err, "Location")
	if q := u.Query(); resp.StatusCode != http.StatusSeeOther || q.Get("done") != "discarded" || q.Get("n") != "1" || q.Get("gone") != "1" || q.Get("failed") != "1" {
		t.Fatalf("discard: %d, Location %q; want done=discarded, n=1, gone=1, failed=1", resp.StatusCode, loc)
	}
	_, page = c.get(loc)
	if got, want := flashIn(page), "discarded 1; 1 no longer existed; 1 failed: the dashboard's log says why"; got != want {
		t.Fatalf("after the discard the banner says %q, want %q", got, want)
	}
}

// hostileIDs are saga types and ids that would step out of their link,
// end it early or change what it asks for, were they written in a path
// as they are.
var hostileIDs = []string{"../../dead-letters/confirm?action=discard&all=1", "..", ".", "a/b", "~x", "%2e%2e", `x\..\..\y`,
	"<b>x</b>", "a b?c=d#e", "ünïcode", "javascript:alert(1)", "o-1"}

// Every link to a saga's timeline leads to that saga, whatever its type
// and id hold: a browser resolving the link (dot segments removed, as
// RFC 3986 says) lands on the timeline that names it, never on another
// page of the dashboard; the form that looks a saga up by type and id
// redirects there too.
func TestSagaLinksAreEscaped(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, []string{"orders"}, []string{"x"})
	drv := f.drv
	now := time.Now().UTC().Truncate(time.Second)
	type saga struct{ typ, id string }
	var sagas []saga
	for i, id := range hostileIDs {
		sagas = append(sagas, saga{"order", id}, saga{hostileIDs[(i+1)%len(hostileIDs)], "s-" + itoa(i)})
	}
	err := drv.Sagas().InTx(ctx, func(tx *sql.Tx) error {
		for i, s := range sagas {
			deadline := now.Add(-time.Duration(len(sagas)-i) * time.Minute)
			if err := drv.Sagas().Create(ctx, tx, store.SagaRecord{Type: s.typ, ID: s.id, State: "awaiting_payment", Phase: "running",
				Data: []byte("{}"), Deadline: &deadline, Version: 1, CreatedAt: now, UpdatedAt: now}); err != nil {
				return err
			}
		}
		return nil
	})
	testenv.Must(t, err, "sagas")
	srv := serve(t, dashboard.Config{Database: drv, Sagas: drv.Sagas(), PageSize: 999})
	c := newClient(t, srv.URL)
	base, err := url.Parse(srv.URL + "/sagas")
	testenv.Must(t, err, "base")
	code, page := c.get("/sagas")
	links := regexp.MustCompile(`<td><a href="([^"]+)">([^<]*)</a></td>`).FindAllStringSubmatch(page, -1)
	if code != 200 || len(links) != len(sagas) {
		t.Fatalf("/sagas: %d, %d links to timelines, want %d\n%s", code, len(links), len(sagas), page)
	}
	opened := map[saga]bool{}
	for _, l := range links {
		href, err := url.Parse(html.UnescapeString(l[1]))
		testenv.Must(t, err, "link "+l[1])
		target := base.ResolveReference(href)
		if !strings.HasPrefix(target.EscapedPath(), "/sagas/") || strings.Count(target.EscapedPath(), "/") != 3 || target.RawQuery != "" || target.Fragment != "" {
			t.Errorf("the link of saga %q is %q, which a browser opens as %q: not a saga's timeline", html.UnescapeString(l[2]), l[1], target)
			continue
		}
		code, page := c.get(target.RequestURI())
		for _, s := range sagas {
			if code == 200 && strings.Contains(page, "<h1>Saga "+html.EscapeString(s.typ)+" <code>"+html.EscapeString(s.id)+"</code></h1>") {
				opened[s] = true
			}
		}
		if code != 200 {
			t.Errorf("the link %q of saga %q: %d\n%s", target, html.UnescapeString(l[2]), code, page)
		}
	}
	for _, s := range sagas {
		if !opened[s] {
			t.Errorf("no link opens the timeline of saga %q %q", s.typ, s.id)
		}
		resp := c.roundTripGet("/sagas?" + url.Values{"type": {s.typ}, "id": {s.id}}.Encode())
		loc, err := url.Parse(resp.Header.Get("Location"))
		testenv.Must(t, err, "Location")
		if target := base.ResolveReference(loc); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(target.EscapedPath(), "/sagas/") ||
			strings.Count(target.EscapedPath(), "/") != 3 || target.RawQuery != "" {
			t.Errorf("looking up saga %q %q: %d to %q, not its timeline", s.typ, s.id, resp.StatusCode, target)
		}
	}
	if n := len(f.deadLetters(t)); n != 1 {
		t.Fatalf("%d dead letters after following the sagas' links, want 1", n)
	}
}

// roundTripGet gets path with the client's cookies and returns the
// response as it came, not following a redirect.
func (c *client) roundTripGet(path string) *http.Response {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	testenv.Must(c.t, err, "request")
	for _, ck := range c.c.Jar.Cookies(req.URL) {
		req.AddCookie(ck)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	testenv.Must(c.t, err, "get "+path)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// Guessing the token is slowed down: after LoginBurst wrong tokens from
// one address (at the login page or as a bearer token), its attempts are
// answered 429 with Retry-After, the right token included, until one
// more is allowed every LoginEvery.
func TestLoginRateLimit(t *testing.T) {
	f := newFixture(t, []string{"orders"}, []string{"x"})
	const token = "a-token-of-32-characters-or-so.."
	clock := memstore.NewClock()
	srv := serve(t, dashboard.Config{Database: f.drv, Token: token, Clock: clock.Now})
	c := newClient(t, srv.URL)
	_, page := c.get("/login")
	csrf := csrfOf(t, page)
	login := func(tok string) *http.Response {
		t.Helper()
		return c.roundTrip("/login", url.Values{"csrf": {csrf}, "token": {tok}, "next": {"/"}})
	}
	for i := range dashboard.LoginBurst {
		if resp := login("wrong-" + itoa(i)); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, resp.StatusCode)
		}
	}
	retry := strconv.Itoa(int(dashboard.LoginEvery / time.Second))
	for _, tok := range []string{"wrong-again", token} {
		if resp := login(tok); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != retry {
			t.Fatalf("login after %d wrong tokens: %d, Retry-After %q; want 429 and %s", dashboard.LoginBurst, resp.StatusCode, resp.Header.Get("Retry-After"), retry)
		}
	}
	if code, hdr, _ := send(t, http.MethodGet, srv.URL+"/", srv.Listener.Addr().String(), nil, map[string]string{"Authorization": "Bearer " + token}); code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
		t.Fatalf("the right bearer token while refused: %d, want 429 (the answer must not tell a guesser it is right)", code)
	}
	clock.Advance(dashboard.LoginEvery)
	if resp := login("wrong-later"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong token %s later: %d, want 401 (one attempt allowed)", dashboard.LoginEvery, resp.StatusCode)
	}
	if resp := login(token); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the token right after: %d, want 429", resp.StatusCode)
	}
	clock.Advance(dashboard.LoginEvery)
	if resp := login(token); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the token %s later: %d, want the login (303)", dashboard.LoginEvery, resp.StatusCode)
	}

	// Wrong bearer tokens count alike.
	srv = serve(t, dashboard.Config{Database: f.drv, Token: token, Clock: clock.Now})
	for i := range dashboard.LoginBurst + 1 {
		code, hdr, _ := send(t, http.MethodGet, srv.URL+"/dead-letters", srv.Listener.Addr().String(), nil, map[string]string{"Authorization": "Bearer wrong-" + itoa(i)})
		if i == dashboard.LoginBurst && (code != http.StatusTooManyRequests || hdr.Get("Retry-After") != retry) || i < dashboard.LoginBurst && code != http.StatusUnauthorized {
			t.Fatalf("wrong bearer token %d: %d, Retry-After %q", i+1, code, hdr.Get("Retry-After"))
		}
	}
}
