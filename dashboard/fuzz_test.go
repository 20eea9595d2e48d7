package dashboard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
)

// Whatever the method, path, query parameters and form of a request that
// lacks the form token of its browser (as every forged request does), the
// dashboard answers it without failing, changes nothing, echoes nothing
// unescaped and redirects only to its own pages; with a token, a request
// without it sees nothing.
func FuzzRequests(f *testing.F) {
	for _, s := range []struct {
		method      uint8
		target      string
		ctype, body string
	}{
		{0, "/dead-letters?topic=orders&error=too+big&after=1", "", ""},
		{0, "/dead-letters?after=-5&topic=%3Cfuzz-tag%3E", "", ""},
		{0, "/parked?consumer=billing&topic=payments&error=declined&after=999999999999999999999", "", ""},
		{0, "/dead-letters/confirm?action=discard&all=1&topic=orders", "", ""},
		{0, "/parked/confirm?action=replay&id=1&id=x&id=-1&id=9223372036854775807", "", ""},
		{0, "/dead-letters/confirm?action=nuke&id=1", "", ""},
		{0, "/dead-letters/1", "", ""},
		{0, "/failures?side=consumer&page=-3&topic=%3Cfuzz-tag%3E", "", ""},
		{0, "/failures?page=288230376151711745", "", ""},
		{0, "/sagas?state=running&page=4611686018427387905", "", ""},
		{0, "/keys?page=9223372036854775807", "", ""},
		{0, "/failures/%3Cfuzz-tag%3E/export", "", ""},
		{0, "/parked/confirm?action=replay&group=%3Cfuzz-tag%3E", "", ""},
		{1, "/parked/replay", "application/x-www-form-urlencoded", "id=1&group=%3Cfuzz-tag%3E&back=/failures/x"},
		{0, "/parked/%2e%2e", "", ""},
		{0, "/login?next=/x/../%5Cevil.com", "", ""},
		{0, "/sagas?type=order&id=..", "", ""},
		{0, "/sagas?state=%3Cfuzz-tag%3E", "", ""},
		{0, "/sagas/order/%3Cfuzz-tag%3E", "", ""},
		{0, "/keys", "", ""},
		{0, "/held-keys?topic=%3Cfuzz-tag%3E&error=x&after=-1", "", ""},
		{1, "/dead-letters/discard", "application/x-www-form-urlencoded", "id=1&id=2&csrf=forged&back=/dead-letters/../%5Cevil.com"},
		{1, "/dead-letters/replay", "application/x-www-form-urlencoded", "id=1"},
		{1, "/parked/discard", "multipart/form-data; boundary=x", "--x\r\nContent-Disposition: form-data; name=\"id\"\r\n\r\n1\r\n--x--\r\n"},
		{1, "/login", "application/x-www-form-urlencoded", "token=a-token-of-32-characters-or-so..&next=//evil.com"},
		{1, "/logout", "application/x-www-form-urlencoded", "all=1"},
		{1, "/dead-letters/discard", "text/plain", "id=1"},
		{1, "/dead-letters/discard", "application/x-www-form-urlencoded", "%zz=%"},
		{2, "/", "", ""},
		{3, "/dead-letters/1", "application/x-www-form-urlencoded", "id=1"},
	} {
		f.Add(s.method, s.target, s.ctype, s.body)
	}
	fx := newFixture(f, []string{"orders", "payments", "orders"}, []string{"too big", "schema rejected"})
	fx.park(f, "billing", "courier.payments", "card declined")
	open, err := dashboard.New(dashboard.Config{Database: fx.drv, Sagas: fx.drv.Sagas()})
	testenv.Must(f, err, "new")
	closed, err := dashboard.New(dashboard.Config{Database: fx.drv, Token: "a-token-of-32-characters-or-so.."})
	testenv.Must(f, err, "new")
	count := func(t *testing.T) (int, int) {
		dead, err := fx.drv.Admin().ListDeadLetters(context.Background(), store.ListQuery{})
		testenv.Must(t, err, "list")
		parked, err := fx.drv.Admin().ListParked(context.Background(), store.ListQuery{})
		testenv.Must(t, err, "list")
		return len(dead), len(parked)
	}
	methods := []string{http.MethodGet, http.MethodPost, http.MethodHead, http.MethodPut, http.MethodDelete}

	f.Fuzz(func(t *testing.T, method uint8, target, ctype, body string) {
		m := methods[int(method)%len(methods)]
		for _, h := range []*dashboard.Handler{open, closed} {
			if !serveFuzzed(t, h, h == closed, m, target, ctype, body, "payments", "orders") {
				return
			}
		}
		if d, p := count(t); d != 3 || p != 1 {
			t.Fatalf("%s %s (%s %q) without a form token changed the dead letters: %d and %d left, want 3 and 1", m, target, ctype, body, d, p)
		}
	})
}

// serveFuzzed serves one fuzzed request, without the form token of its
// browser, and fails the test unless the handler answers it without
// failing, echoes nothing unescaped, redirects only to its own pages and,
// when it needs a token (closed), shows none of secrets. It returns false
// when the request cannot be made.
func serveFuzzed(t *testing.T, h http.Handler, closed bool, m, target, ctype, body string, secrets ...string) bool {
	t.Helper()
	req, err := http.NewRequest(m, "http://127.0.0.1"+target, strings.NewReader(body))
	if err != nil || !strings.HasPrefix(req.URL.Path, "/") {
		return false
	}
	req.Host = "127.0.0.1:8080"
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.AddCookie(&http.Cookie{Name: "courier_csrf", Value: "a-csrf-cookie-of-some-length"})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	out := rec.Body.String()
	switch {
	case rec.Code >= 500:
		t.Fatalf("%s %s (%s %q): %d\n%s", m, target, ctype, body, rec.Code, out)
	case strings.Contains(out, "<fuzz-tag"):
		t.Fatalf("%s %s: the page holds the request's markup unescaped\n%s", m, target, out)
	case closed && rec.Code == http.StatusOK && slices.ContainsFunc(secrets, func(s string) bool { return strings.Contains(out, s) }):
		t.Fatalf("%s %s without the token: 200 with the dashboard's data\n%s", m, target, out)
	}
	if loc := rec.Header().Get("Location"); loc != "" {
		u, err := url.Parse(loc)
		if err != nil || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") || strings.ContainsAny(loc, "\\\t\r\n") {
			t.Fatalf("%s %s redirects to %q", m, target, loc)
		}
	}
	return true
}
