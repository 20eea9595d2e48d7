// Package hostcheck decides which Host headers Courier's HTTP surfaces
// (the dashboard, the /metrics, /healthz and /readyz endpoints) answer:
// the name of loopback (localhost), loopback addresses, the address the
// request came to, and the names the operator allowed. Any other name may
// be one a hostile web page made resolve to the server's address (DNS
// rebinding): the browser then holds that page same-origin with the
// server, and neither CORS nor SameSite cookies would stop it from
// reading the answers (topics, tenants, dead letters) or posting forms.
// It is the one place that rule lives.
package hostcheck

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Hosts is the set of Host headers a server answers besides loopback and
// its own address. The zero Hosts allows those only.
type Hosts struct {
	allowed map[string]bool
}

// New returns the Hosts that allow names too: host names or addresses,
// with or without a port (which is ignored). flag names the option in the
// error, such as "--allowed-host".
func New(names []string, flag string) (Hosts, error) {
	hs := Hosts{allowed: map[string]bool{}}
	for _, n := range names {
		h, ok := Of(n)
		if !ok {
			return Hosts{}, fmt.Errorf("%s: %q is not a host name: give the name (or address) a proxy forwards, such as courier.example.com, without a scheme, path or wildcard", flag, n)
		}
		hs.allowed[h] = true
	}
	return hs, nil
}

// Of returns the host a Host header (or an allowed name) names,
// lower-cased, without its port, the brackets of an IPv6 address or a
// trailing dot; ok is false unless it is a DNS name (letters, digits,
// '-', '_' and '.') or an IP address.
func Of(s string) (host string, ok bool) {
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

// Allow reports whether r names a host the server answers: localhost, a
// loopback address, the address r came to, or an allowed name.
func (hs Hosts) Allow(r *http.Request) bool {
	host, ok := Of(r.Host)
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
	// came to is the server's own.
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if tcp, ok := local.(*net.TCPAddr); ok {
		return tcp.AddrPort().Addr().Unmap().WithZone("") == ip
	}
	return false
}

// Refuse answers 421 Misdirected Request with msg, as plain text that is
// neither cached nor sniffed.
func Refuse(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusMisdirectedRequest)
	fmt.Fprintln(w, msg)
}
