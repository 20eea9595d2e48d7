package dashboard_test

import (
	"bufio"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/memstore"
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
	paths := []string{"/", "/dead-letters", "/dead-letters/confirm?action=discard&all=1", "/parked", "/delivery", "/static/style.css", "/login", "/logout", "/dead-letters/discard", "/no-such-page"}
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

var nextRe = regexp.MustCompile(`name="next" value="([^"]*)"`)

// roundTrip posts form to path with the client's cookies and returns the
// response as it came, not following a redirect nor parsing its Location.
func (c *client) roundTrip(path string, form url.Values) *http.Response {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(form.Encode()))
	testenv.Must(c.t, err, "request")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, ck := range c.c.Jar.Cookies(req.URL) {
		req.AddCookie(ck)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	testenv.Must(c.t, err, "post "+path)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// hostileNext are next (and back) values that would send a browser to
// another site, or to something other than a page of the dashboard.
var hostileNext = []string{
	`/x/../\evil.com`, `//evil.com`, `/\evil.com`, `\\evil.com`, `\/evil.com`, `///evil.com`, `/.//evil.com`, `/x/..//evil.com`,
	`/./\evil.com`, `/%2F/evil.com`, `/%2f%2fevil.com`, `/%5Cevil.com`, `/%5c%5cevil.com`, `%2F%2Fevil.com`, `https://evil.com`,
	`http:/evil.com`, `javascript:alert(1)`, `data:text/html,hi`, "/\t/evil.com", "/\n/evil.com", "/\r\n/evil.com", " //evil.com",
	"\x00//evil.com", "/\x7f/evil.com", "//evil.com/%2e%2e", `/\/evil.com`, "/\u3000/evil.com", "//evil.com@dash", `@evil.com`,
	`evil.com`, `/dead-letters/../../\evil.com`, "/%09/evil.com", "/%0a/evil.com", `//%65vil.com`, `/%252F/evil.com`,
}

// offSite reports whether a Location header could take a browser away from
// the dashboard under prefix: a browser reads '\' as '/' and drops tabs and
// newlines, so both are refused outright.
func offSite(loc, prefix string) bool {
	u, err := url.Parse(loc)
	return err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(loc, prefix+"/") ||
		strings.HasPrefix(loc, "//") || strings.ContainsAny(loc, "\\\t\r\n ") || strings.IndexFunc(loc, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0
}

// After logging in, the browser goes back to the page it asked for, and to
// nothing else: a next naming another site, by whatever spelling, sends it
// to the overview.
func TestLoginRedirect(t *testing.T) {
	f := newFixture(t, []string{"orders"}, []string{"x"})
	const token = "a-token-of-32-characters-or-so.."
	for _, prefix := range []string{"", "/courier"} {
		h, err := dashboard.New(dashboard.Config{Database: f.drv, Token: token, Prefix: prefix})
		testenv.Must(t, err, "new")
		mux := http.NewServeMux()
		mux.Handle(prefix+"/", h)
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		c := newClient(t, srv.URL)
		_, page := c.get(prefix + "/login")
		csrf := csrfOf(t, page)
		for _, next := range append(hostileNext, "/dead-letters?topic=orders") {
			resp := c.roundTrip(prefix+"/login", url.Values{"csrf": {csrf}, "token": {token}, "next": {next}})
			loc := resp.Header.Get("Location")
			if resp.StatusCode != http.StatusSeeOther || offSite(loc, prefix) {
				t.Errorf("prefix %q, login with next %q: %d, Location %q; want a page of the dashboard", prefix, next, resp.StatusCode, loc)
			}
			if next == "/dead-letters?topic=orders" && loc != prefix+next {
				t.Errorf("prefix %q, login with next %q: Location %q, want %q", prefix, next, loc, prefix+next)
			}
		}
		for _, next := range hostileNext {
			_, page := c.get(prefix + "/login?next=" + url.QueryEscape(next))
			m := nextRe.FindStringSubmatch(page)
			if m == nil || offSite(html.UnescapeString(m[1]), "") {
				t.Errorf("prefix %q, login page with next %q: its form carries next %q", prefix, next, m)
			}
		}
	}
}

// After a replay or a discard, the browser goes back to the list it came
// from, never elsewhere.
func TestActionRedirect(t *testing.T) {
	f := newFixture(t, []string{"orders"}, []string{"x"})
	srv := serve(t, dashboard.Config{Database: f.drv})
	c := newClient(t, srv.URL)
	_, page := c.get("/dead-letters/confirm?action=discard&all=1")
	csrf := csrfOf(t, page)
	for _, back := range append(hostileNext, `/dead-letters/../\evil.com`, "/dead-letters/..//evil.com", `/dead-letters\..\..\evil.com`, "/dead-letters?topic=orders") {
		resp := c.roundTrip("/dead-letters/discard", url.Values{"csrf": {csrf}, "id": {"999999"}, "back": {back}})
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusSeeOther || offSite(loc, "") || !strings.HasPrefix(loc, "/dead-letters") {
			t.Errorf("discard with back %q: %d, Location %q; want the list of dead letters", back, resp.StatusCode, loc)
		}
	}
}

// counting is a request body of n bytes that counts what was read of it.
type counting struct {
	n, read int64
	part    []byte
}

func (c *counting) Read(p []byte) (int, error) {
	if c.read >= c.n {
		return 0, io.EOF
	}
	k := min(int64(len(p)), c.n-c.read)
	for i := range p[:k] {
		p[i] = c.part[(c.read+int64(i))%int64(len(c.part))]
	}
	c.read += k
	return int(k), nil
}

// A request the dashboard will refuse for want of its token is refused
// before its body is read; a body is read up to a cap, and only as a
// URL-encoded form (a multipart body could spill its parts into temporary
// files).
func TestBodies(t *testing.T) {
	f := newFixture(t, []string{"orders"}, []string{"x"})
	const token = "a-token-of-32-characters-or-so.."
	h, err := dashboard.New(dashboard.Config{Database: f.drv, Token: token})
	testenv.Must(t, err, "new")
	post := func(path, ctype string, body *counting, hdr map[string]string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, body)
		req.Host = "127.0.0.1"
		req.Header.Set("Content-Type", ctype)
		req.AddCookie(&http.Cookie{Name: "courier_csrf", Value: "a-csrf-cookie-of-some-length"})
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	form := func(n int64) *counting { return &counting{n: n, part: []byte("id=1&")} }
	multipart := func(n int64) *counting {
		return &counting{n: n, part: []byte("--b\r\nContent-Disposition: form-data; name=\"f\"; filename=\"x\"\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n")}
	}

	// Without the token: refused unread, whatever the body.
	for _, c := range []struct {
		path, ctype string
		body        *counting
	}{
		{"/dead-letters/discard", "application/x-www-form-urlencoded", form(50 << 20)},
		{"/dead-letters/discard", "multipart/form-data; boundary=b", multipart(50 << 20)},
		{"/parked/replay", "application/x-www-form-urlencoded", form(1 << 20)},
		{"/logout", "application/x-www-form-urlencoded", form(1 << 20)},
	} {
		rec := post(c.path, c.ctype, c.body, nil)
		if rec.Code != http.StatusUnauthorized || c.body.read != 0 {
			t.Errorf("POST %s (%s) without the token: %d, %d bytes of the body read; want 401 and none read", c.path, c.ctype, rec.Code, c.body.read)
		}
	}
	// With it: a form over the cap is refused having read no more than
	// the cap; a multipart body is not read at all.
	bearer := map[string]string{"Authorization": "Bearer " + token}
	body := form(50 << 20)
	if rec := post("/dead-letters/discard", "application/x-www-form-urlencoded", body, bearer); rec.Code != http.StatusRequestEntityTooLarge || body.read > 2<<20 {
		t.Errorf("a 50 MiB form: %d, %d bytes read; want 413 having read at most the cap", rec.Code, body.read)
	}
	body = multipart(50 << 20)
	if rec := post("/dead-letters/discard", "multipart/form-data; boundary=b", body, bearer); rec.Code != http.StatusUnsupportedMediaType || body.read != 0 {
		t.Errorf("a multipart body: %d, %d bytes read; want 415 and none read", rec.Code, body.read)
	}
	// The login form, which comes before any session, is capped too.
	body = form(50 << 20)
	if rec := post("/login", "application/x-www-form-urlencoded", body, nil); rec.Code != http.StatusRequestEntityTooLarge || body.read > 2<<20 {
		t.Errorf("a 50 MiB login form: %d, %d bytes read; want 413 having read at most the cap", rec.Code, body.read)
	}
	if n := len(f.deadLetters(t)); n != 1 {
		t.Fatalf("%d dead letters left, want 1", n)
	}
}

// NewServer's server bounds how long a client may take to send its
// request and to read the answer, and how long an idle connection stays.
func TestNewServer(t *testing.T) {
	srv := dashboard.NewServer(http.NotFoundHandler())
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 || srv.MaxHeaderBytes <= 0 {
		t.Fatalf("server without every timeout and a header cap: %+v", srv)
	}
	if srv.ReadTimeout < srv.ReadHeaderTimeout || srv.WriteTimeout < srv.ReadTimeout {
		t.Errorf("read header %s, read %s, write %s: each should cover the one before", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout)
	}
}

// A token shorter than MinTokenBytes, or holding spaces, is refused with
// the field and the fix.
func TestTokenStrength(t *testing.T) {
	f := newFixture(t, []string{"orders"}, []string{"x"})
	for _, bad := range []string{"a", "s3cret-token", "fifteen-bytes!!", "sixteen-bytes-ok\n", " sixteen-bytes-ok", "sixteen bytes ok!"} {
		_, err := dashboard.New(dashboard.Config{Database: f.drv, Token: bad})
		if err == nil || !strings.Contains(err.Error(), "Config.Token") || !strings.Contains(err.Error(), "openssl rand") {
			t.Errorf("token %q: %v, want an error naming Config.Token and how to make one", bad, err)
		}
	}
	if _, err := dashboard.New(dashboard.Config{Database: f.drv, Token: "sixteen-bytes-ok"}); err != nil {
		t.Errorf("a token of 16 bytes: %v", err)
	}
}

// A session ends on the server when its browser logs out: its cookie,
// replayed, opens nothing. Logging out everywhere ends every session, and
// a session ends by itself after SessionTTL.
func TestSessions(t *testing.T) {
	f := newFixture(t, []string{"orders"}, []string{"x"})
	const token = "a-token-of-32-characters-or-so.."
	clock := memstore.NewClock()
	srv := serve(t, dashboard.Config{Database: f.drv, Token: token, SessionTTL: time.Hour, Clock: clock.Now})
	login := func() *client {
		c := newClient(t, srv.URL)
		_, page := c.get("/login")
		if code, page := c.post("/login", url.Values{"csrf": {csrfOf(t, page)}, "token": {token}, "next": {"/"}}, nil); code != 200 || !strings.Contains(page, `id="dead"`) {
			t.Fatalf("login: %d\n%s", code, page)
		}
		return c
	}
	session := func(c *client) *http.Cookie {
		u, _ := url.Parse(srv.URL)
		for _, ck := range c.c.Jar.Cookies(u) {
			if ck.Name == "courier_session" {
				return ck
			}
		}
		t.Fatal("no session cookie")
		return nil
	}
	// in reports whether a browser holding only the session cookie ck
	// sees the overview.
	in := func(ck *http.Cookie) bool {
		code, _, body := send(t, http.MethodGet, srv.URL+"/", srv.Listener.Addr().String(), nil, map[string]string{"Cookie": ck.Name + "=" + ck.Value})
		return code == 200 && strings.Contains(body, `id="dead"`)
	}
	logout := func(c *client, form url.Values) {
		_, page := c.get("/")
		form.Set("csrf", csrfOf(t, page))
		if code, page := c.post("/logout", form, nil); code != 200 || !strings.Contains(page, `name="token"`) {
			t.Fatalf("logout: %d\n%s", code, page)
		}
	}

	a := login()
	ck := session(a)
	if !in(ck) {
		t.Fatal("the session cookie opens nothing")
	}
	logout(a, url.Values{})
	if in(ck) {
		t.Fatal("the session cookie still opens the dashboard after its browser logged out")
	}

	b, c := login(), login()
	bk, ck := session(b), session(c)
	if bk.Value == ck.Value {
		t.Fatal("two logins share a session id")
	}
	logout(b, url.Values{"all": {"1"}})
	if in(bk) || in(ck) {
		t.Fatal("a session survived logging out everywhere")
	}

	d := session(login())
	clock.Advance(59 * time.Minute)
	if !in(d) {
		t.Fatal("the session ended before SessionTTL")
	}
	clock.Advance(2 * time.Minute)
	if in(d) {
		t.Fatal("the session outlived SessionTTL")
	}
}
