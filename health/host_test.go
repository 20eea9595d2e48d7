package health_test

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/courier-go/courier/health"
	"github.com/courier-go/courier/internal/testenv"
)

// getAs sends GET path to the rig's server with the Host header host.
func (rg *rig) getAs(t *testing.T, path, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rg.srv.URL+path, nil)
	testenv.Must(t, err, "request")
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	testenv.Must(t, err, "GET "+path)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	testenv.Must(t, err, "read "+path)
	return resp.StatusCode, string(b)
}

// A web page whose name resolves to the server's address (DNS rebinding)
// sends its name in the Host header: /metrics, /healthz and /readyz
// refuse it (421) and show nothing of the relay's topics; they answer
// localhost, loopback addresses, the address the request came to and
// the names of Config.AllowedHosts.
func TestEndpointsCheckTheHost(t *testing.T) {
	rg := newRig(t, health.Config{AllowedHosts: []string{"metrics.example.com"}})
	rg.write(t, 3)
	rg.run()
	port := strconv.Itoa(rg.srv.Listener.Addr().(*net.TCPAddr).Port)
	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1.evil.example", "localhost.evil.example",
		"metrics.example.com.evil.example", "0x7f000001", "localhost@evil.example"} {
		for _, p := range []string{"/metrics", "/healthz", "/readyz", "/nope"} {
			code, body := rg.getAs(t, p, host)
			if code != http.StatusMisdirectedRequest || strings.Contains(body, "orders") || strings.Contains(body, "courier_") {
				t.Errorf("GET %s with Host %q: %d, want 421 and nothing of the relay\n%s", p, host, code, body)
			}
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "[::1]:" + port, "metrics.example.com", "Metrics.Example.COM:443"} {
		if code, body := rg.getAs(t, "/metrics", host); code != 200 || !strings.Contains(body, "courier_") {
			t.Errorf("GET /metrics with Host %q: %d, want the metrics", host, code)
		}
		if code, _ := rg.getAs(t, "/healthz", host); code != 200 {
			t.Errorf("GET /healthz with Host %q: %d, want 200", host, code)
		}
	}
	if _, err := health.New(health.Config{AllowedHosts: []string{"https://metrics.example.com/"}}); err == nil || !strings.Contains(err.Error(), "Config.AllowedHosts") {
		t.Errorf("a URL among AllowedHosts: %v, want an error naming Config.AllowedHosts", err)
	}
}
