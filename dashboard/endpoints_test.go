package dashboard_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/courier-go/courier/dashboard"
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
