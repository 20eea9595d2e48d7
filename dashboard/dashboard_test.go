package dashboard_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testenv.M(m)) }

// fixture is a migrated SQLite database holding dead letters made the way
// a relay makes them: messages written to the outbox, claimed and failed for
// the last time; and deliveries parked the way a consumer parks them.
type fixture struct {
	db  *sql.DB
	drv *dburl.DB
	// dead maps each dead letter's message id to its topic.
	dead map[string]string
}

func newFixture(t testing.TB, topics []string, errs []string) *fixture {
	return newFixtureAt(t, "sqlite://"+filepath.Join(t.TempDir(), "courier.db"), topics, errs)
}

// databases are the dialects the handler test runs on: SQLite always,
// PostgreSQL and MySQL/MariaDB when their variables are set.
var databases = map[string]func(t *testing.T) string{
	"sqlite":   func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "courier.db") },
	"postgres": func(t *testing.T) string { return testenv.Postgres(t, nil).URL },
	"mysql":    func(t *testing.T) string { return testenv.MySQL(t, nil).URL },
}

func newFixtureAt(t testing.TB, dbURL string, topics []string, errs []string) *fixture {
	t.Helper()
	ctx := context.Background()
	drv, err := dburl.Open(ctx, dbURL, dburl.Options{Create: true})
	testenv.Must(t, err, "open")
	t.Cleanup(drv.Close)
	_, err = drv.Migrate(ctx)
	testenv.Must(t, err, "migrate")
	f := &fixture{db: drv.SQL(), drv: drv, dead: map[string]string{}}
	msgs := make([]courier.Message, len(topics))
	for i, topic := range topics {
		id, _ := uuid.NewV7()
		msgs[i] = courier.Message{ID: id, Topic: topic, Key: fmt.Sprintf("k%d", i), Type: "OrderPlaced", Version: 1,
			Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), OccurredAt: time.Now()}
		f.dead[id.String()] = topic
	}
	err = drv.InTx(ctx, func(tx *sql.Tx) error { return drv.Inserter().Insert(ctx, tx, msgs) })
	testenv.Must(t, err, "insert")
	rs, err := drv.RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "relay store")
	b, err := rs.Claim(ctx, "test-relay", len(msgs), time.Minute)
	testenv.Must(t, err, "claim")
	if len(b.Records) != len(msgs) {
		t.Fatalf("claimed %d of %d", len(b.Records), len(msgs))
	}
	var o store.Outcome
	for i, r := range b.Records {
		o.Dead = append(o.Dead, store.Failure{Seq: r.Seq, Error: errs[i%len(errs)], Counted: true})
	}
	testenv.Must(t, rs.Complete(ctx, "test-relay", b.Lease, o), "complete")
	return f
}

// park parks a delivery for consumer.
func (f *fixture) park(t testing.TB, consumer, subject, why string) {
	t.Helper()
	id, _ := uuid.NewV7()
	err := f.drv.ConsumerStore().Park(context.Background(), store.Parked{Consumer: consumer, MessageID: id.String(), Subject: subject,
		Headers: map[string][]string{"Courier-Type": {"ChargeRequested"}}, Payload: []byte("x"), Reason: store.ReasonFailed,
		Error: why, Attempts: 3, History: []store.Attempt{{At: time.Now(), Error: why}}, ParkedAt: time.Now()})
	testenv.Must(t, err, "park")
}

// inOutbox reports whether the message is back in the outbox table.
func (f *fixture) inOutbox(t *testing.T, messageID string) bool {
	t.Helper()
	var n int
	err := f.db.QueryRow(f.drv.Rebind("SELECT count(*) FROM courier_outbox WHERE message_id = ?"), messageID).Scan(&n)
	testenv.Must(t, err, "count outbox")
	return n == 1
}

func (f *fixture) deadLetters(t testing.TB) []store.DeadLetter {
	t.Helper()
	d, err := f.drv.Admin().DeadLetters(context.Background(), 1000)
	testenv.Must(t, err, "dead letters")
	return d
}

// client is a browser-like HTTP client: it keeps cookies and sends the
// Sec-Fetch-Site and Origin a browser sends for the dashboard's own forms.
type client struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newClient(t *testing.T, base string) *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: t, base: base, c: &http.Client{Jar: jar}}
}

func (c *client) get(path string) (int, string) {
	c.t.Helper()
	resp, err := c.c.Get(c.base + path)
	testenv.Must(c.t, err, "get "+path)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (c *client) post(path string, form url.Values, hdr map[string]string) (int, string) {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.c.Do(req)
	testenv.Must(c.t, err, "post "+path)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRe.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", page)
	}
	return m[1]
}

func serve(t *testing.T, cfg dashboard.Config) *httptest.Server {
	t.Helper()
	h, err := dashboard.New(cfg)
	testenv.Must(t, err, "new dashboard")
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func TestDeadLettersOverHTTP(t *testing.T) {
	for name, url := range databases {
		t.Run(name, func(t *testing.T) { testDeadLettersOverHTTP(t, url(t)) })
	}
}

func testDeadLettersOverHTTP(t *testing.T, dbURL string) {
	f := newFixtureAt(t, dbURL, []string{"orders", "orders", "payments"}, []string{"message too big", "schema rejected"})
	f.park(t, "billing", "courier.payments", "card declined")
	srv := serve(t, dashboard.Config{Database: f.drv, Sagas: f.drv.Sagas()})
	c := newClient(t, srv.URL)

	code, page := c.get("/")
	if code != 200 || !strings.Contains(page, `id="dead">3<`) || !strings.Contains(page, `id="parked">1<`) {
		t.Fatalf("overview: %d\n%s", code, page)
	}
	code, page = c.get("/dead-letters?topic=orders")
	if code != 200 || strings.Count(page, `name="id" value=`) != 2 || strings.Contains(page, "payments</td>") {
		t.Fatalf("dead letters of topic orders: %d\n%s", code, page)
	}
	code, page = c.get("/dead-letters?error=SCHEMA")
	if code != 200 || strings.Count(page, `name="id" value=`) != 1 {
		t.Fatalf("dead letters whose error has SCHEMA: %d\n%s", code, page)
	}

	// One dead letter, shown with its history, replayed after confirming.
	dead := f.deadLetters(t)
	one := dead[0]
	code, page = c.get(fmt.Sprintf("/dead-letters/%d", one.ID))
	if code != 200 || !strings.Contains(page, one.MessageID) || !strings.Contains(page, `id="history"`) {
		t.Fatalf("dead letter page: %d\n%s", code, page)
	}
	code, page = c.get(fmt.Sprintf("/dead-letters/confirm?action=replay&id=%d", one.ID))
	if code != 200 || !strings.Contains(page, "Replay 1") {
		t.Fatalf("confirmation: %d\n%s", code, page)
	}
	if f.inOutbox(t, one.MessageID) {
		t.Fatal("the confirmation page replayed the dead letter already")
	}
	token := csrfOf(t, page)
	form := url.Values{"csrf": {token}, "id": {fmt.Sprint(one.ID)}, "back": {"/dead-letters"}}

	// Without the CSRF token, or from another origin, nothing is done.
	code, page = c.post("/dead-letters/replay", url.Values{"id": {fmt.Sprint(one.ID)}}, nil)
	if code != http.StatusForbidden || !strings.Contains(page, "CSRF") {
		t.Fatalf("post without CSRF token: %d\n%s", code, page)
	}
	code, _ = c.post("/dead-letters/replay", form, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"})
	if code != http.StatusForbidden {
		t.Fatalf("cross-origin post: %d, want 403", code)
	}
	code, _ = c.post("/dead-letters/replay", url.Values{"csrf": {"forged"}, "id": {fmt.Sprint(one.ID)}}, nil)
	if code != http.StatusForbidden {
		t.Fatalf("post with a forged CSRF token: %d, want 403", code)
	}
	if f.inOutbox(t, one.MessageID) {
		t.Fatal("a refused post replayed the dead letter")
	}

	code, page = c.post("/dead-letters/replay", form, map[string]string{"Sec-Fetch-Site": "same-origin"})
	if code != 200 || !strings.Contains(page, "replayed 1") {
		t.Fatalf("replay: %d\n%s", code, page)
	}
	if !f.inOutbox(t, one.MessageID) {
		t.Fatal("the replayed dead letter is not back in the outbox")
	}

	// The rest, in bulk: every one the filter selects.
	code, page = c.get("/dead-letters/confirm?action=discard&all=1")
	if code != 200 || !strings.Contains(page, "Discard 2") {
		t.Fatalf("bulk confirmation: %d\n%s", code, page)
	}
	form = url.Values{"csrf": {csrfOf(t, page)}, "id": {fmt.Sprint(dead[1].ID), fmt.Sprint(dead[2].ID)}}
	if code, page = c.post("/dead-letters/discard", form, nil); code != 200 || !strings.Contains(page, "discarded 2") {
		t.Fatalf("bulk discard: %d\n%s", code, page)
	}
	if d := f.deadLetters(t); len(d) != 0 {
		t.Fatalf("%d dead letters left after discarding all", len(d))
	}

	// Consumer side: the consumer, its parked message, a replay request.
	code, page = c.get("/consumers")
	if code != 200 || !strings.Contains(page, "billing") {
		t.Fatalf("consumers: %d\n%s", code, page)
	}
	code, page = c.get("/parked?consumer=billing&topic=payments&error=declined")
	if code != 200 || strings.Count(page, `name="id" value=`) != 1 {
		t.Fatalf("parked of billing: %d\n%s", code, page)
	}
	parked, err := f.drv.Admin().Parked(context.Background(), "", 10)
	testenv.Must(t, err, "parked")
	code, page = c.get(fmt.Sprintf("/parked/confirm?action=replay&id=%d", parked[0].ID))
	if code != 200 {
		t.Fatalf("parked confirmation: %d\n%s", code, page)
	}
	form = url.Values{"csrf": {csrfOf(t, page)}, "id": {fmt.Sprint(parked[0].ID)}}
	if code, page = c.post("/parked/replay", form, nil); code != 200 || !strings.Contains(page, "replayed 1") {
		t.Fatalf("parked replay: %d\n%s", code, page)
	}
	p, err := f.drv.Admin().ParkedMessage(context.Background(), parked[0].ID)
	testenv.Must(t, err, "parked message")
	if p.ReplayRequested == nil {
		t.Fatal("no replay was requested for the parked message")
	}

	if code, _ = c.get("/dead-letters/999999"); code != http.StatusNotFound {
		t.Fatalf("a dead letter that does not exist: %d, want 404", code)
	}
	if code, page = c.get("/sagas/order/nope"); code != 200 || !strings.Contains(page, "No history") {
		t.Fatalf("saga without history: %d\n%s", code, page)
	}
}

func TestToken(t *testing.T) {
	f := newFixture(t, []string{"orders"}, []string{"too big"})
	srv := serve(t, dashboard.Config{Database: f.drv, Token: "s3cret-token-for-the-test"})
	c := newClient(t, srv.URL)
	code, page := c.get("/dead-letters")
	if code != 200 || !strings.Contains(page, "Log in") {
		t.Fatalf("without the token a page sends to the login: %d\n%s", code, page)
	}
	form := url.Values{"csrf": {csrfOf(t, page)}, "token": {"wrong"}, "next": {"/dead-letters"}}
	if code, _ = c.post("/login", form, nil); code != http.StatusUnauthorized {
		t.Fatalf("login with a wrong token: %d, want 401", code)
	}
	form.Set("token", "s3cret-token-for-the-test")
	if code, page = c.post("/login", form, nil); code != 200 || !strings.Contains(page, "<h1>Dead letters</h1>") {
		t.Fatalf("login goes back to the page asked for: %d\n%s", code, page)
	}
	if code, page = c.get("/"); code != 200 || !strings.Contains(page, `id="dead">1<`) {
		t.Fatalf("overview after login: %d\n%s", code, page)
	}
	dead := f.deadLetters(t)
	// A post without the session or the token is refused even with the
	// CSRF token.
	other := newClient(t, srv.URL)
	_, page = other.get("/login")
	code, _ = other.post("/dead-letters/discard", url.Values{"csrf": {csrfOf(t, page)}, "id": {fmt.Sprint(dead[0].ID)}}, nil)
	if code != http.StatusUnauthorized {
		t.Fatalf("post without the token: %d, want 401", code)
	}
	// A script sends the token as a bearer token and needs no CSRF token.
	code, _ = other.post("/dead-letters/discard", url.Values{"id": {fmt.Sprint(dead[0].ID)}}, map[string]string{"Authorization": "Bearer s3cret-token-for-the-test"})
	if code != 200 {
		t.Fatalf("post with the bearer token: %d, want 200", code)
	}
	if len(f.deadLetters(t)) != 0 {
		t.Fatal("the dead letter was not discarded")
	}
}

func TestCheckBind(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:8080", "[::1]:8080", "localhost:0"} {
		if err := dashboard.CheckBind(addr, "", "--token"); err != nil {
			t.Errorf("%s without a token: %v", addr, err)
		}
	}
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "192.168.1.4:80", "[::]:8080"} {
		err := dashboard.CheckBind(addr, "", "--token")
		if err == nil || !strings.Contains(err.Error(), "--token") {
			t.Errorf("%s without a token: %v, want an error naming --token", addr, err)
		}
		if err := dashboard.CheckBind(addr, "t", "--token"); err != nil {
			t.Errorf("%s with a token: %v", addr, err)
		}
	}
}

// Config.Validate names each bad field and its fix, as New does.
func TestConfigValidate(t *testing.T) {
	f := newFixture(t, []string{"orders"}, []string{"x"})
	if err := (dashboard.Config{Database: f.drv}).Validate(); err != nil {
		t.Fatalf("zero fields take their defaults: %v", err)
	}
	for _, c := range []struct {
		cfg  dashboard.Config
		want string
	}{
		{dashboard.Config{Limit: -1}, "dashboard: Config.Limit is -1: use 1 to 1000"},
		{dashboard.Config{Limit: 1001}, "dashboard: Config.Limit is 1001: use 1 to 1000"},
		{dashboard.Config{PageSize: -1}, "dashboard: Config.PageSize is -1: use 1 to 999"},
		{dashboard.Config{PageSize: 1000}, "dashboard: Config.PageSize is 1000: use 1 to 999"},
		{dashboard.Config{Prefix: "ops"}, "dashboard: Config.Prefix \"ops\" must start with /"},
		{dashboard.Config{SessionTTL: -time.Hour}, "dashboard: Config.SessionTTL is -1h0m0s: use a positive duration"},
		{dashboard.Config{SampleEvery: -time.Second}, "dashboard: Config.SampleEvery is -1s: use a positive duration"},
		{dashboard.Config{History: -time.Hour}, "dashboard: Config.History is -1h0m0s, less than twice Config.SampleEvery"},
		{dashboard.Config{AllowedHosts: []string{"https://x"}}, "dashboard: Config.AllowedHosts"},
		{dashboard.Config{Token: "short"}, "dashboard: Config.Token"},
	} {
		c.cfg.Database = f.drv
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate: %v, want %q", err, c.want)
		}
		if _, err := dashboard.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v, want %q", err, c.want)
		}
	}
	if err := (dashboard.Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "dashboard: Config.Database is nil") {
		t.Errorf("no database: %v", err)
	}
}

func TestConfig(t *testing.T) {
	if _, err := dashboard.New(dashboard.Config{}); err == nil || !strings.Contains(err.Error(), "Config.Database") {
		t.Fatalf("no database: %v", err)
	}
	f := newFixture(t, []string{"orders"}, []string{"x"})
	if _, err := dashboard.New(dashboard.Config{Database: f.drv, Prefix: "courier"}); err == nil || !strings.Contains(err.Error(), "Config.Prefix") {
		t.Fatalf("prefix without a slash: %v", err)
	}
	// Mounted under a prefix, its links carry it.
	h, err := dashboard.New(dashboard.Config{Database: f.drv, Prefix: "/ops/courier"})
	testenv.Must(t, err, "new")
	mux := http.NewServeMux()
	mux.Handle("/ops/courier/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL)
	code, page := c.get("/ops/courier/dead-letters")
	if code != 200 || !strings.Contains(page, `href="/ops/courier/dead-letters/`) {
		t.Fatalf("under a prefix: %d\n%s", code, page)
	}
}
