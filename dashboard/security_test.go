package dashboard_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
)

// send sends one request with the Host header host and returns its status
// and body.
func send(t *testing.T, method, target, host string, body io.Reader, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, target, body)
	testenv.Must(t, err, "request")
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	testenv.Must(t, err, method+" "+target)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// A page of another site whose name resolves to 127.0.0.1 (DNS
// rebinding) is same-origin with the dashboard in the browser's eyes, but
// its requests name that site in their Host header: every page, action and
// file of the dashboard refuses them, whatever the method, and answers
// only the names of loopback, the address the request came to, and the
// names Config.AllowedHosts adds.
func TestHostHeader(t *testing.T) {
	f := newFixture(t, []string{"orders"}, []string{"too big"})
	srv := serve(t, dashboard.Config{Database: f.drv, AllowedHosts: []string{"courier.example.com"}})
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	paths := []string{"/", "/dead-letters", "/dead-letters/confirm?action=discard&all=1", "/parked", "/static/style.css", "/login", "/logout", "/dead-letters/discard", "/no-such-page"}
	hostile := []string{"evil.example:" + itoa(port), "evil.example", "127.0.0.1.evil.example", "localhost.evil.example:" + itoa(port),
		"courier.example.com.evil.example", "EVIL.example", "0x7f000001", "2130706433", "[::ffff:7f00:1].evil", "localhost@evil.example"}
	for _, host := range hostile {
		for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodOptions} {
			for _, p := range paths {
				code, _, body := send(t, method, srv.URL+p, host, strings.NewReader("csrf=x&id=1"), map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
				if code != http.StatusMisdirectedRequest {
					t.Errorf("%s %s with Host %q: %d, want 421", method, p, host, code)
				}
				if strings.Contains(body, "orders") || strings.Contains(body, `name="csrf"`) || strings.Contains(body, "Set-Cookie") {
					t.Errorf("%s %s with Host %q: the refusal shows the dashboard's data or a form token:\n%s", method, p, host, body)
				}
			}
		}
	}
	if n := len(f.deadLetters(t)); n != 1 {
		t.Fatalf("%d dead letters left after the refused requests, want 1", n)
	}

	for _, host := range []string{"127.0.0.1:" + itoa(port), "localhost:" + itoa(port), "LOCALHOST", "localhost.", "[::1]:" + itoa(port), "127.0.0.1",
		"courier.example.com", "Courier.Example.COM:443"} {
		if code, _, body := send(t, http.MethodGet, srv.URL+"/dead-letters", host, nil, nil); code != 200 || !strings.Contains(body, "orders") {
			t.Errorf("GET with Host %q: %d, want the page", host, code)
		}
	}

	// A request without a Host header (HTTP/1.0) names no host it may be
	// served for.
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	testenv.Must(t, err, "dial")
	defer c.Close()
	_, err = io.WriteString(c, "GET / HTTP/1.0\r\n\r\n")
	testenv.Must(t, err, "write")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	testenv.Must(t, err, "read")
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("HTTP/1.0 without Host: %d, want 421", resp.StatusCode)
	}
}

// The names of Config.AllowedHosts are host names: a URL, a pattern or a
// path is refused with the field and the fix.
func TestAllowedHostsConfig(t *testing.T) {
	f := newFixture(t, []string{"orders"}, []string{"x"})
	for _, bad := range []string{"", "https://courier.example.com", "*.example.com", "courier.example.com/path", "a b", "host:port:x"} {
		_, err := dashboard.New(dashboard.Config{Database: f.drv, AllowedHosts: []string{bad}})
		if err == nil || !strings.Contains(err.Error(), "Config.AllowedHosts") {
			t.Errorf("AllowedHosts %q: %v, want an error naming Config.AllowedHosts", bad, err)
		}
	}
	if _, err := dashboard.New(dashboard.Config{Database: f.drv, AllowedHosts: []string{"courier.example.com:8443", "10.0.0.5", "[fd00::1]"}}); err != nil {
		t.Errorf("host names with and without ports: %v", err)
	}
}

// A form posted from a page of another site is refused by its Origin, and,
// from a browser that sends no Origin, by its Referer.
func TestCrossSiteReferer(t *testing.T) {
	f := newFixture(t, []string{"orders"}, []string{"x"})
	srv := serve(t, dashboard.Config{Database: f.drv})
	c := newClient(t, srv.URL)
	_, page := c.get("/dead-letters/confirm?action=discard&all=1")
	id := f.deadLetters(t)[0].ID
	form := url.Values{"csrf": {csrfOf(t, page)}, "id": {itoa(int(id))}}
	for _, hdr := range []map[string]string{{"Origin": "http://evil.example"}, {"Referer": "http://evil.example/page"}, {"Referer": "http://" + srv.Listener.Addr().String() + ".evil.example/"}} {
		if code, _ := c.post("/dead-letters/discard", form, hdr); code != http.StatusForbidden {
			t.Errorf("post with %v: %d, want 403", hdr, code)
		}
	}
	if len(f.deadLetters(t)) != 1 {
		t.Fatal("a cross-site post discarded the dead letter")
	}
	if code, body := c.post("/dead-letters/discard", form, map[string]string{"Referer": srv.URL + "/dead-letters/confirm"}); code != 200 || !strings.Contains(body, "discarded 1") {
		t.Fatalf("post with the dashboard's own Referer: %d\n%s", code, body)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
