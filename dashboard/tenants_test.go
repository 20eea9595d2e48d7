package dashboard_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/failgroup"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/dburl"
)

// tenantSet is the tenants of a test, each a migrated database of its own
// holding dead letters: SQLite files, and PostgreSQL schemas when
// COURIER_TEST_POSTGRES_URL is set. Its open is the dashboard's
// TenantsConfig.Open, and it counts the databases the dashboard holds.
type tenantSet struct {
	t   testing.TB
	fix map[string]*fixture

	mu     sync.Mutex
	urls   map[string]string // the tenants List names
	now    int               // databases the dashboard holds open
	most   int               // the most it held at once
	closed []string          // and closed
}

func newTenantSet(t testing.TB) *tenantSet {
	return &tenantSet{t: t, urls: map[string]string{}, fix: map[string]*fixture{}}
}

// sqlite adds a tenant with a SQLite file of its own and dead letters on
// each of topics.
func (s *tenantSet) sqlite(name string, topics ...string) *fixture {
	s.t.Helper()
	u := "sqlite://" + filepath.Join(s.t.TempDir(), fmt.Sprintf("tenant%d.db", len(s.urls)))
	return s.add(name, u, topics)
}

// postgres adds a tenant with a schema of its own in the test's
// PostgreSQL, dropped when the test ends.
func (s *tenantSet) postgres(name string, topics ...string) *fixture {
	s.t.Helper()
	u, err := dburl.WithSchema(os.Getenv(testenv.EnvPostgres), testenv.Name("dash_tn_"))
	testenv.Must(s.t, err, "schema URL")
	d, err := dburl.Open(context.Background(), u, dburl.Options{CreateSchema: true})
	testenv.Must(s.t, err, "create schema")
	d.Close()
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dburl.DropSchema(ctx, u); err != nil {
			s.t.Logf("drop the schema of %s: %v", name, err)
		}
	})
	return s.add(name, u, topics)
}

func (s *tenantSet) add(name, u string, topics []string) *fixture {
	s.t.Helper()
	f := newFixtureAt(s.t, u, topics, []string{"rejected by the broker"})
	s.urls[name], s.fix[name] = u, f
	return f
}

// broken adds a tenant whose database cannot be opened: its SQLite file
// does not exist.
func (s *tenantSet) broken(name string) {
	s.urls[name] = "sqlite://" + filepath.Join(s.t.TempDir(), "missing", "tenant.db")
}

// remove takes a tenant out of the list.
func (s *tenantSet) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.urls, name)
}

func (s *tenantSet) list(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.urls))
	for n := range s.urls {
		names = append(names, n)
	}
	return names, nil
}

func (s *tenantSet) open(ctx context.Context, name string) (dashboard.TenantDatabase, error) {
	s.mu.Lock()
	u, ok := s.urls[name]
	s.mu.Unlock()
	if !ok {
		return dashboard.TenantDatabase{}, fmt.Errorf("tenant %q is not one of the test's", name)
	}
	d, err := dburl.Open(ctx, u, dburl.Options{Flag: "tenant " + name + "'s URL", MaxConns: 4})
	if err != nil {
		return dashboard.TenantDatabase{}, err
	}
	s.mu.Lock()
	s.now++
	s.most = max(s.most, s.now)
	s.mu.Unlock()
	var once sync.Once
	return dashboard.TenantDatabase{Database: d, Sagas: d.Sagas(), Close: func() {
		once.Do(func() {
			d.Close()
			s.mu.Lock()
			s.now--
			s.closed = append(s.closed, name)
			s.mu.Unlock()
		})
	}}, nil
}

// counts returns how many databases the dashboard holds open now and the
// most it held at once.
func (s *tenantSet) counts() (now, most int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now, s.most
}

func (s *tenantSet) closedNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.closed)
}

// serve serves the dashboard of the set's tenants, with cfg's other
// settings, mounted under cfg.Prefix; when the test ends it stops the
// server, closes the dashboard and checks that every database it opened
// is closed.
func (s *tenantSet) serve(cfg dashboard.TenantsConfig) *httptest.Server {
	s.t.Helper()
	cfg.List, cfg.Open = s.list, s.open
	h, err := dashboard.NewTenants(cfg)
	testenv.Must(s.t, err, "new dashboard of tenants")
	var root http.Handler = h
	if cfg.Prefix != "" {
		mux := http.NewServeMux()
		mux.Handle(cfg.Prefix+"/", h)
		root = mux
	}
	srv := httptest.NewServer(root)
	s.t.Cleanup(func() {
		srv.Close()
		h.Close()
		if now, _ := s.counts(); now != 0 {
			s.t.Errorf("%d tenants' databases are still open after Close", now)
		}
	})
	return srv
}

// tenantRowRe finds the tenant list's rows: the name, the link and the
// rest of the row.
var tenantRowRe = regexp.MustCompile(`(?s)<tr data-tenant="([^"]*)">\s*<td><a href="([^"]+)" class="tenant-link">.*?</tr>`)

// listed reads the tenant list: each tenant's link and row, by name.
func listed(t *testing.T, page string) (links, rows map[string]string) {
	t.Helper()
	links, rows = map[string]string{}, map[string]string{}
	for _, m := range tenantRowRe.FindAllStringSubmatch(page, -1) {
		name := html.UnescapeString(m[1])
		links[name], rows[name] = html.UnescapeString(m[2]), m[0]
	}
	return links, rows
}

// deadIn returns the dead letter count a row of the tenant list shows.
func deadIn(row string) string {
	m := regexp.MustCompile(`class="num dead"><a[^>]*>(\d+)<`).FindStringSubmatch(row)
	if m == nil {
		return ""
	}
	return m[1]
}

// The tenant list shows each tenant with its counts, and a tenant whose
// database cannot be opened with its error; a tenant's pages show its
// database only, and a replay on one tenant changes its database and no
// other. SQLite files, and PostgreSQL schemas when PostgreSQL is there.
func TestTenantsOverHTTP(t *testing.T) {
	s := newTenantSet(t)
	s.sqlite("acme", "orders", "orders")
	s.sqlite("globex", "orders", "payments", "payments")
	if os.Getenv(testenv.EnvPostgres) != "" {
		s.postgres("initech", "orders")
		s.postgres("umbrella", "orders", "orders", "orders", "orders")
	}
	s.broken("hooli")
	s.fix["globex"].park(t, "billing", "courier.payments", "card declined")
	srv := s.serve(dashboard.TenantsConfig{})
	c := newClient(t, srv.URL)

	code, page := c.get("/")
	links, rows := listed(t, page)
	if code != 200 || len(rows) != len(s.urls) {
		t.Fatalf("tenant list: %d, %d rows, want %d\n%s", code, len(rows), len(s.urls), page)
	}
	for name, f := range s.fix {
		if got := deadIn(rows[name]); got != strconv.Itoa(len(f.dead)) {
			t.Errorf("tenant list: %s shows %q dead letters, want %d\n%s", name, got, len(f.dead), rows[name])
		}
		if links[name] != "/t/"+name+"/" {
			t.Errorf("tenant list: %s links to %q", name, links[name])
		}
	}
	if !strings.Contains(rows["globex"], `class="num parked"><a href="/t/globex/parked">1<`) {
		t.Errorf("tenant list: globex's parked message is not counted\n%s", rows["globex"])
	}
	if !strings.Contains(rows["hooli"], "no SQLite database") {
		t.Errorf("tenant list: hooli's row does not say why its database cannot be read\n%s", rows["hooli"])
	}

	// A tenant's pages show its database only.
	for name, f := range s.fix {
		code, page := c.get("/t/" + name + "/dead-letters")
		if code != 200 || !strings.Contains(page, `id="tenant"`) || !strings.Contains(page, ">"+name+"</span>") {
			t.Fatalf("%s's dead letters: %d\n%s", name, code, page)
		}
		if n := strings.Count(page, `name="id" value=`); n != len(f.dead) {
			t.Errorf("%s's dead letters: %d listed, want %d", name, n, len(f.dead))
		}
		for other, of := range s.fix {
			for id := range of.dead {
				if shown := strings.Contains(page, id); shown != (other == name) {
					t.Errorf("%s's dead letters page shows %s's dead letter %s: %v", name, other, id, shown)
				}
			}
		}
		if !strings.Contains(page, `href="/t/`+name+`/parked"`) || !strings.Contains(page, `href="/static/style.css"`) {
			t.Errorf("%s's page: its links are not under /t/%s/, or the style sheet is not the dashboard's\n%s", name, name, page)
		}
	}
	if code, page := c.get("/t/globex/consumers"); code != 200 || !strings.Contains(page, "billing") {
		t.Fatalf("globex's consumers: %d\n%s", code, page)
	}
	if code, page := c.get("/t/acme/consumers"); code != 200 || strings.Contains(page, "billing") {
		t.Fatalf("acme's consumers show globex's: %d\n%s", code, page)
	}

	// The tenant whose database cannot be opened shows why on its pages;
	// the others are served all the same.
	code, page = c.get("/t/hooli/dead-letters")
	if code != http.StatusServiceUnavailable || !strings.Contains(page, "tenant &#34;hooli&#34;") || !strings.Contains(page, "no SQLite database") {
		t.Fatalf("hooli's dead letters: %d, want 503 with the error\n%s", code, page)
	}
	if code, _ := c.get("/t/acme/"); code != 200 {
		t.Fatalf("acme's overview after hooli's failure: %d", code)
	}

	// A replay on acme changes acme's database, and no other.
	before := map[string]int{}
	for name, f := range s.fix {
		before[name] = len(f.deadLetters(t))
	}
	acme := s.fix["acme"]
	one := acme.deadLetters(t)[0]
	code, page = c.get(fmt.Sprintf("/t/acme/dead-letters/confirm?action=replay&id=%d", one.ID))
	if code != 200 || !strings.Contains(page, "Replay 1") || !strings.Contains(page, `action="/t/acme/dead-letters/replay"`) {
		t.Fatalf("acme's confirmation: %d\n%s", code, page)
	}
	form := url.Values{"csrf": {csrfOf(t, page)}, "id": {fmt.Sprint(one.ID)}, "back": {"/dead-letters"}}
	resp := c.roundTrip("/t/acme/dead-letters/replay", form)
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/t/acme/dead-letters?done=") {
		t.Fatalf("acme's replay: %d to %q, want 303 back to acme's dead letters", resp.StatusCode, loc)
	}
	if !acme.inOutbox(t, one.MessageID) {
		t.Fatal("acme's replayed dead letter is not back in acme's outbox")
	}
	for name, f := range s.fix {
		want := before[name]
		if name == "acme" {
			want--
		}
		if got := len(f.deadLetters(t)); got != want {
			t.Errorf("%s holds %d dead letters after a replay on acme, want %d", name, got, want)
		}
	}

	// A tenant's failure groups are its own, and a group's replay goes
	// back to its failures page.
	rep, err := failgroup.Collect(context.Background(), acme.drv.Admin(), failgroup.Options{})
	testenv.Must(t, err, "acme's groups")
	code, page = c.get("/t/acme/failures")
	if code != 200 || len(rep.Groups) == 0 || len(groupsOf(page)) != len(rep.Groups) || !strings.Contains(page, `href="/t/acme/failures/`+rep.Groups[0].ID+`"`) {
		t.Fatalf("acme's failures (%d): %v, want its %d groups\n%s", code, groupsOf(page), len(rep.Groups), page)
	}
	g := rep.Groups[0]
	code, page = c.get("/t/acme/" + sidePath(g.Side) + "/confirm?action=replay&group=" + g.ID)
	if code != 200 {
		t.Fatalf("acme's group confirmation: %d\n%s", code, page)
	}
	resp = c.roundTrip("/t/acme/"+sidePath(g.Side)+"/replay", url.Values{"csrf": {csrfOf(t, page)}, "id": idsOf(g.IDs), "group": {g.ID}, "back": {"/failures/" + g.ID}})
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/t/acme/failures?done=replayed") {
		t.Fatalf("acme's group replay: %d to %q, want 303 back to acme's failures", resp.StatusCode, loc)
	}

	// A tenant the list does not name is a 404 that names the list.
	code, page = c.get("/t/nope/dead-letters")
	if code != http.StatusNotFound || !strings.Contains(page, "There is no tenant &#34;nope&#34;") || !strings.Contains(page, `<a href="/" id="back">Back to the tenants</a>`) {
		t.Fatalf("unknown tenant: %d, want 404 naming the tenant list\n%s", code, page)
	}
	for _, p := range []string{"/t/", "/t/~!!/", "/nope"} {
		if code, _ := c.get(p); code != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, code)
		}
	}
	// A tenant's name without the slash after it goes to its overview.
	if code, page := c.get("/t/acme"); code != 200 || !strings.Contains(page, "<h1>Overview") {
		t.Errorf("/t/acme: %d, want acme's overview\n%s", code, page)
	}
}

// Every tenant page passes the checks of the dashboard of one database:
// the Host header (421), the token (one login, at the dashboard's root,
// covers every tenant; logging out ends it for all), the origin and the
// CSRF token of each action (403, nothing done).
func TestTenantsSecurity(t *testing.T) {
	const token = "s3cret-token-for-the-test"
	s := newTenantSet(t)
	acme := s.sqlite("acme", "orders", "orders")
	globex := s.sqlite("globex", "orders")
	srv := s.serve(dashboard.TenantsConfig{Config: dashboard.Config{Token: token, Prefix: "/ops", AllowedHosts: []string{"courier.example.com"}}})
	port := itoa(srv.Listener.Addr().(*net.TCPAddr).Port)

	// Another host gets nothing, whatever the path and the credentials.
	for _, p := range []string{"/ops/", "/ops/t/acme/", "/ops/t/acme/dead-letters", "/ops/t/nope/", "/ops/login", "/ops/static/style.css"} {
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			code, _, body := send(t, m, srv.URL+p, "evil.example:"+port, strings.NewReader("id=1"),
				map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/x-www-form-urlencoded"})
			if code != http.StatusMisdirectedRequest || strings.Contains(body, "acme") {
				t.Errorf("%s %s for another host: %d, want 421 and nothing of the tenants\n%s", m, p, code, body)
			}
		}
	}
	code, _, _ := send(t, http.MethodGet, srv.URL+"/ops/t/acme/", "courier.example.com", nil, map[string]string{"Authorization": "Bearer " + token})
	if code != 200 {
		t.Fatalf("GET for an allowed host: %d", code)
	}

	// Without the token a tenant's page sends to the one login, which
	// goes back to it.
	c := newClient(t, srv.URL)
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Get(srv.URL + "/ops/t/acme/dead-letters")
	testenv.Must(t, err, "get")
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/ops/login?next=%2Ft%2Facme%2Fdead-letters" {
		t.Fatalf("a tenant's page without the token: %d to %q, want the login", resp.StatusCode, loc)
	}
	code, page := c.get("/ops/t/acme/dead-letters")
	if code != 200 || !strings.Contains(page, `action="/ops/login"`) {
		t.Fatalf("login page: %d\n%s", code, page)
	}
	form := url.Values{"csrf": {csrfOf(t, page)}, "token": {token}, "next": {"/t/acme/dead-letters"}}
	if code, page = c.post("/ops/login", form, nil); code != 200 || !strings.Contains(page, "<h1>Dead letters</h1>") || !strings.Contains(page, ">acme</span>") {
		t.Fatalf("login goes back to acme's dead letters: %d\n%s", code, page)
	}
	for _, p := range []string{"/ops/", "/ops/t/globex/", "/ops/t/globex/parked"} {
		if code, page := c.get(p); code != 200 || strings.Contains(page, `name="token"`) {
			t.Errorf("%s after one login: %d\n%s", p, code, page)
		}
	}
	if code, _ := c.get("/ops/t/acme/login"); code != http.StatusNotFound {
		t.Errorf("a tenant's own login page: %d, want 404 (there is one login, at the root)", code)
	}

	// Actions need the CSRF token of the browser's pages, and its origin.
	id := fmt.Sprint(acme.deadLetters(t)[0].ID)
	_, page = c.get("/ops/t/acme/dead-letters/confirm?action=discard&id=" + id)
	csrf := csrfOf(t, page)
	for _, try := range []struct {
		form url.Values
		hdr  map[string]string
	}{
		{url.Values{"id": {id}}, nil},
		{url.Values{"id": {id}, "csrf": {"forged"}}, nil},
		{url.Values{"id": {id}, "csrf": {csrf}}, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}},
		{url.Values{"id": {id}, "csrf": {csrf}}, map[string]string{"Referer": "http://evil.example/page"}},
	} {
		if code, page := c.post("/ops/t/acme/dead-letters/discard", try.form, try.hdr); code != http.StatusForbidden {
			t.Errorf("discard with %v and %v: %d, want 403\n%s", try.form, try.hdr, code, page)
		}
	}
	if n := len(acme.deadLetters(t)); n != 2 {
		t.Fatalf("%d dead letters left in acme after refused posts, want 2", n)
	}
	// Another browser, with a CSRF token of its own but no session, is
	// refused too.
	other := newClient(t, srv.URL)
	_, page = other.get("/ops/login")
	if code, _ := other.post("/ops/t/acme/dead-letters/discard", url.Values{"id": {id}, "csrf": {csrfOf(t, page)}}, nil); code != http.StatusUnauthorized {
		t.Errorf("discard without the session: %d, want 401", code)
	}
	// With the CSRF token, acme's dead letter goes, and nothing of globex.
	if code, page := c.post("/ops/t/acme/dead-letters/discard", url.Values{"id": {id}, "csrf": {csrf}}, nil); code != 200 || !strings.Contains(page, "discarded 1") {
		t.Fatalf("discard: %d\n%s", code, page)
	}
	// A script sends the bearer token and needs no CSRF token.
	id = fmt.Sprint(acme.deadLetters(t)[0].ID)
	if code, _ := other.post("/ops/t/acme/dead-letters/discard", url.Values{"id": {id}}, map[string]string{"Authorization": "Bearer " + token}); code != 200 {
		t.Errorf("discard with the bearer token: %d, want 200", code)
	}
	if n, g := len(acme.deadLetters(t)), len(globex.deadLetters(t)); n != 0 || g != 1 {
		t.Fatalf("acme holds %d dead letters and globex %d, want 0 and 1", n, g)
	}

	// Logging out ends the session for every tenant.
	_, page = c.get("/ops/")
	if code, page := c.post("/ops/logout", url.Values{"csrf": {csrfOf(t, page)}}, nil); code != 200 || !strings.Contains(page, `name="token"`) {
		t.Fatalf("logout: %d\n%s", code, page)
	}
	if code, page := c.get("/ops/t/globex/"); code != 200 || !strings.Contains(page, `name="token"`) {
		t.Fatalf("globex after logout: %d, want the login\n%s", code, page)
	}
}

// hostileNames are tenant names that would break a page or a URL were
// they written as they are.
var hostileNames = []string{`<script>alert(1)</script>`, `"><img src=x onerror=alert(1)>`, `..`, `.`, `../../admin`, `a/b`, `~x`,
	`%2e%2e`, `a b?c=d#e`, `ünïcode`, `javascript:alert(1)`}

// A tenant's name is escaped wherever a page shows it, and written in
// URLs so that it leads to its tenant's pages and nowhere else, whatever
// it holds.
func TestTenantsHostileNames(t *testing.T) {
	s := newTenantSet(t)
	for _, name := range hostileNames {
		s.sqlite(name, "orders")
	}
	s.sqlite("admin", "orders", "orders")
	srv := s.serve(dashboard.TenantsConfig{})
	c := newClient(t, srv.URL)

	code, page := c.get("/")
	links, _ := listed(t, page)
	if code != 200 || len(links) != len(s.urls) {
		t.Fatalf("tenant list: %d, %d rows, want %d\n%s", code, len(links), len(s.urls), page)
	}
	for _, raw := range []string{"<script>", "<img", "<b>"} {
		if strings.Contains(page, raw) {
			t.Fatalf("the tenant list holds %q unescaped\n%s", raw, page)
		}
	}
	for _, name := range hostileNames {
		link := links[name]
		if !regexp.MustCompile(`^/t/([A-Za-z0-9._~$&+:=@-]|%[0-9A-F]{2})+/$`).MatchString(link) || link == "/t/../" || link == "/t/./" {
			t.Errorf("%q links to %q, not a segment of its own under /t/", name, link)
			continue
		}
		code, page := c.get(link + "dead-letters")
		if code != 200 || !strings.Contains(page, ">"+html.EscapeString(name)+"</span>") {
			t.Errorf("%q's dead letters at %s: %d, want its page naming it escaped\n%s", name, link, code, page)
			continue
		}
		if strings.Count(page, `name="id" value=`) != 1 || !strings.Contains(page, `href="`+link+`dead-letters/`) {
			t.Errorf("%q's dead letters: not its one dead letter, or links out of %s\n%s", name, link, page)
		}
		for _, raw := range []string{"<script>", "<img"} {
			if strings.Contains(page, raw) {
				t.Errorf("%q's page holds %q unescaped", name, raw)
			}
		}
	}

	// An action on a tenant so named goes back to its own list.
	name := hostileNames[0]
	f, link := s.fix[name], links[name]
	id := f.deadLetters(t)[0].ID
	_, page = c.get(fmt.Sprintf("%sdead-letters/confirm?action=replay&id=%d", link, id))
	resp := c.roundTrip(link+"dead-letters/replay", url.Values{"csrf": {csrfOf(t, page)}, "id": {fmt.Sprint(id)}, "back": {"/dead-letters"}})
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, link+"dead-letters?done=") {
		t.Fatalf("replay on %q: %d to %q, want back to %sdead-letters", name, resp.StatusCode, loc, link)
	}
	if len(f.deadLetters(t)) != 0 || len(s.fix["admin"].deadLetters(t)) != 2 {
		t.Fatalf("replay on %q did not change its database only", name)
	}

	// An unknown tenant's name is escaped in the 404 too.
	hostile := "<b>x</b>"
	code, page = c.get("/t/~" + base64.RawURLEncoding.EncodeToString([]byte(hostile)) + "/")
	if code != http.StatusNotFound || strings.Contains(page, hostile) || !strings.Contains(page, html.EscapeString(hostile)) {
		t.Fatalf("unknown hostile tenant: %d\n%s", code, page)
	}
}

// The dashboard holds at most MaxOpen tenants' databases open: it closes
// the one used least recently for another, the tenant list's reads count
// as no use, and Close closes them all.
func TestTenantsMaxOpen(t *testing.T) {
	s := newTenantSet(t)
	var names []string
	for i := range 6 {
		names = append(names, fmt.Sprintf("t%d", i))
		s.sqlite(names[i], "orders")
	}
	srv := s.serve(dashboard.TenantsConfig{MaxOpen: 3, Reads: 2})
	c := newClient(t, srv.URL)
	visit := func(name string) {
		t.Helper()
		if code, page := c.get("/t/" + name + "/"); code != 200 {
			t.Fatalf("%s's overview: %d\n%s", name, code, page)
		}
	}

	// t0, t1, t2 open; t0 again; t3 closes t1, the least recently used.
	for _, n := range []string{"t0", "t1", "t2", "t0", "t3"} {
		visit(n)
	}
	if got := s.closedNames(); !slices.Equal(got, []string{"t1"}) {
		t.Fatalf("closed %v after visiting t0 t1 t2 t0 t3 with MaxOpen 3, want [t1]", got)
	}
	// The list reads all six, two at a time: what it opens is closed
	// before the tenant used last, t0, which stays open.
	visit("t0")
	before := len(s.closedNames())
	if code, page := c.get("/"); code != 200 || strings.Count(page, `class="num dead"`) != 6 {
		t.Fatalf("tenant list: %d\n%s", code, page)
	}
	if closed := s.closedNames()[before:]; slices.Contains(closed, "t0") || len(closed) < 3 {
		t.Fatalf("reading the list closed %v: want the tenant used last, t0, kept open, and three others closed for the list's reads", closed)
	}

	// Many requests at once over every tenant never hold more than
	// MaxOpen open.
	var wg sync.WaitGroup
	errs := make(chan string, 60)
	for i := range 60 {
		wg.Go(func() {
			resp, err := http.Get(srv.URL + "/t/" + names[i%len(names)] + "/dead-letters")
			if err != nil {
				errs <- err.Error()
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- resp.Status
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if now, most := s.counts(); most > 3 || now > 3 {
		t.Fatalf("%d databases open, at most %d at once, with MaxOpen 3", now, most)
	}
}

// A tenant that List stops naming is a 404, and its database is closed.
func TestTenantsRemoved(t *testing.T) {
	s := newTenantSet(t)
	s.sqlite("acme", "orders")
	s.sqlite("globex", "orders")
	srv := s.serve(dashboard.TenantsConfig{})
	c := newClient(t, srv.URL)
	if code, _ := c.get("/t/globex/"); code != 200 {
		t.Fatalf("globex: %d", code)
	}
	s.remove("globex")
	if code, _ := c.get("/t/globex/"); code != http.StatusNotFound {
		t.Fatalf("globex once removed: %d, want 404", code)
	}
	if closed := s.closedNames(); !slices.Equal(closed, []string{"globex"}) {
		t.Fatalf("closed %v once globex was removed, want [globex]", closed)
	}
}

// TenantsConfig's mistakes are refused with the field and the fix.
func TestTenantsConfig(t *testing.T) {
	f := newFixture(t, []string{"orders"}, []string{"x"})
	list := func(context.Context) ([]string, error) { return nil, nil }
	open := func(context.Context, string) (dashboard.TenantDatabase, error) {
		return dashboard.TenantDatabase{}, nil
	}
	for _, c := range []struct {
		cfg  dashboard.TenantsConfig
		want string
	}{
		{dashboard.TenantsConfig{Open: open}, "TenantsConfig.List is nil"},
		{dashboard.TenantsConfig{List: list}, "TenantsConfig.Open is nil"},
		{dashboard.TenantsConfig{List: list, Open: open, Config: dashboard.Config{Database: f.drv}}, "leave them nil"},
		{dashboard.TenantsConfig{List: list, Open: open, MaxOpen: -1}, "TenantsConfig.MaxOpen is -1"},
		{dashboard.TenantsConfig{List: list, Open: open, Reads: -1}, "TenantsConfig.Reads is -1"},
		{dashboard.TenantsConfig{List: list, Open: open, Config: dashboard.Config{Prefix: "ops"}}, "Config.Prefix"},
		{dashboard.TenantsConfig{List: list, Open: open, Config: dashboard.Config{Token: "short"}}, "at least 16 bytes"},
		{dashboard.TenantsConfig{List: list, Open: open, Config: dashboard.Config{AllowedHosts: []string{"https://x"}}}, "Config.AllowedHosts"},
	} {
		if _, err := dashboard.NewTenants(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.cfg, err, c.want)
		}
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate %+v: %v, want an error saying %q", c.cfg, err, c.want)
		}
	}
	if err := (dashboard.TenantsConfig{List: list, Open: open}).Validate(); err != nil {
		t.Errorf("zero fields take their defaults: %v", err)
	}
}
