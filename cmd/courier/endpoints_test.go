package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/courier-go/courier/internal/testenv"
)

// getAs answers GET path from the relay's endpoints, sent with the Host
// header host.
func (s *servedRelay) getAs(t *testing.T, path, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+s.addr+path, nil)
	testenv.Must(t, err, "request")
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	testenv.Must(t, err, "GET "+path)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	testenv.Must(t, err, "read "+path)
	return resp.StatusCode, string(b)
}

// courier relay's /metrics, /healthz and /readyz answer requests
// addressed to loopback, to the address they listen on, or to a name
// given with --metrics-allowed-host, and refuse any other (421): a page
// that rebinds its name to the relay's address reads no topic. A
// --metrics-allowed-host that is not a host name is refused at the start.
func TestRelayEndpointsCheckTheHost(t *testing.T) {
	s := serveRelay(t, 5, "--metrics-allowed-host", "prom.example.com")
	_, port, err := net.SplitHostPort(s.addr)
	testenv.Must(t, err, "address")
	for _, host := range []string{"evil.example:" + port, "evil.example", "prom.example.com.evil.example", "127.0.0.1.nip.io:" + port} {
		for _, p := range []string{"/metrics", "/healthz", "/readyz"} {
			if code, body := s.getAs(t, p, host); code != http.StatusMisdirectedRequest || strings.Contains(body, "courier_") || !strings.Contains(body, "--metrics-allowed-host") {
				t.Errorf("GET %s with Host %q: %d, want 421 naming --metrics-allowed-host\n%s", p, host, code, body)
			}
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "prom.example.com", "PROM.example.com:9464"} {
		if code, body := s.getAs(t, "/metrics", host); code != 200 || !strings.Contains(body, "courier_relay_published_messages_total") {
			t.Errorf("GET /metrics with Host %q: %d, want the metrics", host, code)
		}
	}
	code, _, errOut := runCLI(t, "relay", "--metrics-addr", "127.0.0.1:0", "--metrics-allowed-host", "https://prom.example.com/")
	if code == 0 || !strings.Contains(errOut, "--metrics-allowed-host") {
		t.Errorf("relay --metrics-allowed-host https://prom.example.com/: exit %d, %q; want an error naming the flag", code, errOut)
	}
}
