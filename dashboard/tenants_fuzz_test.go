package dashboard_test

import (
	"net/http"
	"testing"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
)

// Whatever the method, path, query parameters and form of a request for
// the tenant list or a tenant's page that lacks the form token of its
// browser, the dashboard of tenants answers it without failing, changes no
// tenant's database, echoes nothing unescaped (a tenant's name it does not
// know included) and redirects only to its own pages; with a token, a
// request without it sees nothing.
func FuzzTenantRequests(f *testing.F) {
	for _, s := range []struct {
		method      uint8
		target      string
		ctype, body string
	}{
		{0, "/", "", ""},
		{0, "/?name=%3Cfuzz-tag%3E&after=%3Cfuzz-tag%3E", "", ""},
		{0, "/t/acme/", "", ""},
		{0, "/t/acme", "", ""},
		{0, "/t/acme/dead-letters?topic=orders&after=1", "", ""},
		{0, "/t/acme/dead-letters/confirm?action=discard&all=1", "", ""},
		{0, "/t/acme/../globex/dead-letters", "", ""},
		{0, "/t/%2e%2e/dead-letters", "", ""},
		{0, "/t/~PGZ1enotdGFnPg/", "", ""}, // <fuzz-tag>, not a tenant
		{0, "/t/%3Cfuzz-tag%3E/", "", ""},
		{0, "/t/~%zz/", "", ""},
		{0, "/t/", "", ""},
		{0, "/t//dead-letters", "", ""},
		{0, "/t/globex/sagas/order/%3Cfuzz-tag%3E", "", ""},
		{0, "/t/acme/login?next=//evil.com", "", ""},
		{1, "/t/acme/dead-letters/discard", "application/x-www-form-urlencoded", "id=1&id=2&csrf=forged&back=/dead-letters/../%5Cevil.com"},
		{1, "/t/globex/parked/replay", "application/x-www-form-urlencoded", "id=1"},
		{1, "/t/acme/scheduled/cancel", "application/x-www-form-urlencoded", "id=00000000-0000-0000-0000-000000000000"},
		{1, "/t/acme", "application/x-www-form-urlencoded", "id=1"},
		{1, "/login", "application/x-www-form-urlencoded", "token=a-token-of-32-characters-or-so..&next=/t/acme/../../evil"},
		{3, "/t/acme/dead-letters/1", "application/x-www-form-urlencoded", "id=1"},
	} {
		f.Add(s.method, s.target, s.ctype, s.body)
	}
	set := newTenantSet(f)
	set.sqlite("acme", "orders", "orders")
	set.sqlite("globex", "orders", "orders")
	open, err := dashboard.NewTenants(dashboard.TenantsConfig{List: set.list, Open: set.open, MaxOpen: 1})
	testenv.Must(f, err, "new")
	f.Cleanup(open.Close)
	closed, err := dashboard.NewTenants(dashboard.TenantsConfig{List: set.list, Open: set.open, MaxOpen: 1,
		Config: dashboard.Config{Token: "a-token-of-32-characters-or-so.."}})
	testenv.Must(f, err, "new")
	f.Cleanup(closed.Close)
	methods := []string{http.MethodGet, http.MethodPost, http.MethodHead, http.MethodPut, http.MethodDelete}

	f.Fuzz(func(t *testing.T, method uint8, target, ctype, body string) {
		m := methods[int(method)%len(methods)]
		for _, h := range []*dashboard.Tenants{open, closed} {
			if !serveFuzzed(t, h, h == closed, m, target, ctype, body, "acme", "globex") {
				return
			}
		}
		for name, f := range set.fix {
			if d := len(f.deadLetters(t)); d != 2 {
				t.Fatalf("%s %s (%s %q) without a form token changed %s's dead letters: %d left, want 2", m, target, ctype, body, name, d)
			}
		}
	})
}
