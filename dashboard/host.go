package dashboard

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// hosts decides which Host headers the dashboard answers: the name of
// loopback (localhost), loopback addresses, the address the request came
// to, and the names the operator allowed. Any other name may be one a
// hostile page made resolve to the dashboard's address (DNS rebinding):
// the browser then holds that page same-origin with the dashboard, so
// neither CrossOriginProtection nor SameSite cookies would stop it from
// reading pages and posting their forms.
type hosts struct {
	allowed map[string]bool
}

// CheckHosts returns an error unless each of names is a host name or an
// address, with or without a port, as [Config.AllowedHosts] takes them.
// flag names the option in the error, such as "--allowed-host".
func CheckHosts(names []string, flag string) error {
	_, err := newHosts(names, flag)
	return err
}

// newHosts checks the names of Config.AllowedHosts; flag names the option
// in errors.
func newHosts(names []string, flag string) (hosts, error) {
	hs := hosts{allowed: map[string]bool{}}
	for _, n := range names {
		h, ok := hostOf(n)
		if !ok {
			return hosts{}, fmt.Errorf("%s: %q is not a host name: give the name (or address) a proxy forwards, such as courier.example.com, without a scheme, path or wildcard", flag, n)
		}
		hs.allowed[h] = true
	}
	return hs, nil
}

// hostOf returns the host a Host header (or an AllowedHosts entry) names,
// lower-cased, without its port, the brackets of an IPv6 address or a
// trailing dot; ok is false unless it is a DNS name (letters, digits, '-',
// '_' and '.') or an IP address.
func hostOf(s string) (host string, ok bool) {
	host = s
	if h, port, err := net.SplitHostPort(s); err == nil {
		if strings.Trim(port, "0123456789") != "" {
			return "", false
		}
		host = h
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return "", false
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().WithZone("").String(), true
	}
	for _, c := range host {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' && c != '.' {
			return "", false
		}
	}
	return host, true
}

// allow reports whether r names a host the dashboard answers.
func (hs hosts) allow(r *http.Request) bool {
	host, ok := hostOf(r.Host)
	switch {
	case !ok:
		return false
	case host == "localhost" || hs.allowed[host]:
		return true
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	// An address is no name a page could rebind: the one the connection
	// came to is the dashboard's own.
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if tcp, ok := local.(*net.TCPAddr); ok {
		return tcp.AddrPort().Addr().Unmap().WithZone("") == ip
	}
	return false
}

// checkHost answers 421 Misdirected Request to a request for a host the
// dashboard does not answer, before anything else looks at it.
func (h *Handler) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.hosts.allow(r) {
			next.ServeHTTP(w, r)
			return
		}
		h.cfg.Logger.Warn("dashboard: refused a request for another host", "host", r.Host, "remote", r.RemoteAddr, "path", r.URL.Path)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusMisdirectedRequest)
		fmt.Fprintln(w, "This dashboard answers requests addressed to localhost, to the address it listens on, or to a name it was given "+
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
