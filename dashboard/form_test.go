package dashboard

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// offSite reports why loc, a Location header of the dashboard under prefix,
// could lead a browser off the dashboard, or "" when it cannot.
func offSite(loc, prefix string) string {
	switch u, err := url.Parse(loc); {
	case err != nil:
		return "does not parse: " + err.Error()
	case u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "":
		return "names a scheme, host or user"
	case !strings.HasPrefix(loc, prefix+"/") || strings.HasPrefix(loc, "//"):
		return "does not start with " + prefix + "/ alone"
	case !printable(loc):
		return "holds a backslash, a space or a control character"
	}
	return ""
}

// Whatever next is, localPath returns a path of the dashboard that stays
// one through http.Redirect (which cleans paths again), and returns it
// unchanged when given it again.
func FuzzLocalPath(f *testing.F) {
	for _, s := range []string{"/", "/dead-letters?topic=orders&error=too+big", "/sagas/order/o-1", "/parked?consumer=billing",
		`/x/../\evil.com`, `//evil.com`, `/\evil.com`, `/%2F/evil.com`, `/%5Cevil.com`, "/\t/evil.com", "javascript:alert(1)",
		"https://evil.com/", "/a/b/../../../c", "/?a=%ZZ", "/%", "/a?b=c#frag", "/\u00e9t\u00e9", "/.//x", "/x/..//y", "/;x", "/a:b"} {
		f.Add(s)
	}
	req := httptest.NewRequest(http.MethodPost, "/login", nil)
	f.Fuzz(func(t *testing.T, next string) {
		got := localPath(next)
		if why := offSite(got, ""); why != "" {
			t.Fatalf("localPath(%q) = %q, which %s", next, got, why)
		}
		if again := localPath(got); again != got {
			t.Fatalf("localPath(%q) = %q, but localPath(%q) = %q", next, got, got, again)
		}
		for _, prefix := range []string{"", "/courier"} {
			rec := httptest.NewRecorder()
			http.Redirect(rec, req, prefix+got, http.StatusSeeOther)
			loc := rec.Header().Get("Location")
			if why := offSite(loc, prefix); why != "" || loc != prefix+got {
				t.Fatalf("localPath(%q) = %q redirects to %q under prefix %q: %s", next, got, loc, prefix, why)
			}
		}
	})
}
