package dashboard

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/courier-go/courier/internal/hostcheck"
)

// CheckHosts returns an error unless each of names is a host name or an
// address, with or without a port, as [Config.AllowedHosts] takes them.
// flag names the option in the error, such as "--allowed-host".
func CheckHosts(names []string, flag string) error {
	_, err := hostcheck.New(names, flag)
	return err
}

// checkHost answers 421 Misdirected Request to a request for a host the
// dashboard does not answer (package internal/hostcheck: DNS rebinding),
// before anything else looks at it.
func (h *Handler) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.hosts.Allow(r) {
			next.ServeHTTP(w, r)
			return
		}
		h.cfg.Logger.Warn("dashboard: refused a request for another host", "host", r.Host, "remote", r.RemoteAddr, "path", r.URL.Path)
		hostcheck.Refuse(w, "This dashboard answers requests addressed to localhost, to the address it listens on, or to a name it was given "+
			"(courier dashboard --allowed-host, dashboard.Config.AllowedHosts); this request named another host. "+
			"Open the dashboard by its address, or add the name a proxy in front of it forwards with --allowed-host.")
	})
}

// crossSiteReferer reports whether an unsafe request comes, by its
// Referer, from a page of another host. It matters for browsers that send
// neither Sec-Fetch-Site nor Origin, which CrossOriginProtection checks.
func crossSiteReferer(r *http.Request) bool {
	if r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != "" {
		return false
	}
	ref := r.Header.Get("Referer")
	if ref == "" {
		return false
	}
	u, err := url.Parse(ref)
	return err != nil || !strings.EqualFold(u.Host, r.Host)
}
