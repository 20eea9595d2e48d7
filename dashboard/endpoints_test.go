package dashboard_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
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
