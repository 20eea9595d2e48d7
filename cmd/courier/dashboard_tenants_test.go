package main

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/tenant"
)

// withDeadLetters migrates the database of t (creating a SQLite file or a
// PostgreSQL schema) and gives it n dead letters made the way a relay
// makes them; it returns their message ids.
func withDeadLetters(t *testing.T, tn tenant.Tenant, n int) []string {
	t.Helper()
	ctx := context.Background()
	d, err := dburl.Open(ctx, tn.URL, dburl.Options{Create: true, CreateSchema: true})
	testenv.Must(t, err, "open "+tn.Name)
	defer d.Close()
	_, err = d.Migrate(ctx)
	testenv.Must(t, err, "migrate "+tn.Name)
	msgs := make([]courier.Message, n)
	ids := make([]string, n)
	for i := range msgs {
		msgs[i] = courier.NewMessage("orders", fmt.Sprintf("k%d", i), "OrderPlaced", []byte(tn.Name))
		ids[i] = msgs[i].ID.String()
	}
	testenv.Must(t, d.InTx(ctx, func(tx *sql.Tx) error { return d.Inserter().Insert(ctx, tx, msgs) }), "insert")
	rs, err := d.RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "relay store")
	b, err := rs.Claim(ctx, "test-relay", n, time.Minute)
	testenv.Must(t, err, "claim")
	var o store.Outcome
	for _, r := range b.Records {
		o.Dead = append(o.Dead, store.Failure{Seq: r.Seq, Error: "rejected by the broker", Counted: true})
	}
	testenv.Must(t, rs.Complete(ctx, "test-relay", b.Lease, o), "complete")
	return ids
}

// tenantState reads a tenant's dead letters' message ids and its pending
// count from its database.
func tenantState(t *testing.T, tn tenant.Tenant) (dead []string, pending int64) {
	t.Helper()
	ctx := context.Background()
	d, err := dburl.Open(ctx, tn.URL, dburl.Options{})
	testenv.Must(t, err, "open "+tn.Name)
	defer d.Close()
	dl, err := d.Admin().DeadLetters(ctx, 100)
	testenv.Must(t, err, "dead letters of "+tn.Name)
	for _, x := range dl {
		dead = append(dead, x.MessageID)
	}
	st, err := d.Admin().Stats(ctx)
	testenv.Must(t, err, "stats of "+tn.Name)
	return dead, st.Pending
}

// servedDashboard is a courier dashboard process.
type servedDashboard struct {
	cmd  *exec.Cmd
	base string // http://127.0.0.1:PORT
	line string // what it printed first
	logs *strings.Builder
}

// startDashboard runs courier dashboard with args and the environment
// variables env, and waits for the line naming its address.
func startDashboard(t *testing.T, env []string, args ...string) *servedDashboard {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"dashboard"}, args...)...)
	cmd.Env = append(append(os.Environ(), "COURIER_TEST_BE_CLI=1"), env...)
	stdout, err := cmd.StdoutPipe()
	testenv.Must(t, err, "stdout")
	s := &servedDashboard{cmd: cmd, logs: &strings.Builder{}}
	cmd.Stderr = s.logs
	testenv.Must(t, cmd.Start(), "start dashboard")
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	s.line, err = bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Wait()
		t.Fatalf("read the address line: %v\n%s", err, s.logs)
	}
	m := regexp.MustCompile(`http://\S+:(\d+)/`).FindStringSubmatch(s.line)
	if m == nil {
		t.Fatalf("no address in %q", s.line)
	}
	s.base = "http://127.0.0.1:" + m[1]
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return s
}

// do sends a request with the Host header host ("" for the address's) and
// the headers hdr, following redirects, and returns its status and body.
func (s *servedDashboard) do(t *testing.T, method, path, host string, form url.Values, hdr map[string]string) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, s.base+path, body)
	testenv.Must(t, err, "request")
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	testenv.Must(t, err, method+" "+path)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// stop sends SIGTERM and checks that the dashboard stops cleanly.
func (s *servedDashboard) stop(t *testing.T) {
	t.Helper()
	testenv.Must(t, s.cmd.Process.Signal(syscall.SIGTERM), "sigterm")
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("dashboard exit after SIGTERM: %v\n%s", err, s.logs)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("dashboard did not stop after SIGTERM\n%s", s.logs)
	}
	if !strings.Contains(s.logs.String(), "dashboard stopped") {
		t.Fatalf("no clean stop in the logs:\n%s", s.logs)
	}
}

// courier dashboard given tenants and no --tenant serves them all: the
// tenant list (a tenant whose database cannot be opened shows why), each
// tenant's pages under /t/NAME/, a replay that changes its tenant's
// database only; one token for all, other hosts refused. SQLite files,
// and a PostgreSQL schema when PostgreSQL is there.
func TestDashboardTenants(t *testing.T) {
	const token = "t0ken-for-the-tenants-test"
	dir := t.TempDir()
	ts := []tenant.Tenant{
		{Name: "acme", URL: "sqlite:" + filepath.Join(dir, "acme.db")},
		{Name: "globex", URL: "sqlite:" + filepath.Join(dir, "globex.db")},
	}
	if base := os.Getenv(testenv.EnvPostgres); base != "" {
		u, err := dburl.WithSchema(base, testenv.Name("tn_dash_"))
		testenv.Must(t, err, "schema URL")
		ts = append(ts, tenant.Tenant{Name: "initech", URL: u})
		t.Cleanup(func() { _ = dburl.DropSchema(context.Background(), u) })
	}
	dead := map[string][]string{}
	for i, tn := range ts {
		dead[tn.Name] = withDeadLetters(t, tn, i+2)
	}
	var file strings.Builder
	for _, tn := range ts {
		fmt.Fprintf(&file, "%s %s\n", tn.Name, tn.URL)
	}
	fmt.Fprintf(&file, "hooli sqlite:%s\n", filepath.Join(dir, "missing", "hooli.db"))
	tenantsFile := filepath.Join(dir, "tenants")
	testenv.Must(t, os.WriteFile(tenantsFile, []byte(file.String()), 0o600), "tenants file")

	d := startDashboard(t, []string{"COURIER_DASHBOARD_TOKEN=" + token}, "--addr", "127.0.0.1:0", "--tenants-file", tenantsFile,
		"--tenants-max-open", "1", "--allowed-host", "courier.example.com")
	if want := fmt.Sprintf("dashboard of %d tenants (--tenants-file", len(ts)+1); !strings.Contains(d.line, want) {
		t.Fatalf("first line %q, want it to say %q", d.line, want)
	}
	bearer := map[string]string{"Authorization": "Bearer " + token}

	// The list: each tenant with its dead letters, hooli with its error.
	code, page := d.do(t, http.MethodGet, "/", "", nil, bearer)
	if code != 200 {
		t.Fatalf("tenant list: %d\n%s", code, page)
	}
	for _, tn := range ts {
		want := fmt.Sprintf(`<a href="/t/%s/dead-letters">%d</a>`, tn.Name, len(dead[tn.Name]))
		if !strings.Contains(page, want) {
			t.Errorf("tenant list: no %q\n%s", want, page)
		}
	}
	if !regexp.MustCompile(`(?s)data-tenant="hooli".*no SQLite database`).MatchString(page) {
		t.Errorf("tenant list: hooli's error is not shown\n%s", page)
	}

	// A tenant's dead letters are its own.
	for _, tn := range ts {
		code, page := d.do(t, http.MethodGet, "/t/"+tn.Name+"/dead-letters", "", nil, bearer)
		if code != 200 {
			t.Fatalf("%s's dead letters: %d\n%s", tn.Name, code, page)
		}
		for other, ids := range dead {
			for _, id := range ids {
				if shown := strings.Contains(page, id); shown != (other == tn.Name) {
					t.Errorf("%s's dead letters page shows %s's %s: %v", tn.Name, other, id, shown)
				}
			}
		}
	}
	if code, page := d.do(t, http.MethodGet, "/t/hooli/", "", nil, bearer); code != http.StatusServiceUnavailable || !strings.Contains(page, "no SQLite database") {
		t.Errorf("hooli's overview: %d, want 503 with its error\n%s", code, page)
	}

	// A replay on acme changes acme's database only.
	before := map[string][]string{}
	for _, tn := range ts {
		before[tn.Name], _ = tenantState(t, tn)
	}
	code, page = d.do(t, http.MethodGet, "/t/acme/dead-letters/1", "", nil, bearer)
	replayed := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`).FindString(page)
	if code != 200 || replayed == "" {
		t.Fatalf("acme's dead letter 1: %d\n%s", code, page)
	}
	if code, page := d.do(t, http.MethodPost, "/t/acme/dead-letters/replay", "", url.Values{"id": {"1"}}, bearer); code != 200 || !strings.Contains(page, "replayed 1") {
		t.Fatalf("replay on acme: %d\n%s", code, page)
	}
	for _, tn := range ts {
		after, pending := tenantState(t, tn)
		switch {
		case tn.Name == "acme" && (len(after) != len(before["acme"])-1 || pending != 1 || strings.Contains(strings.Join(after, " "), replayed)):
			t.Errorf("acme after the replay: dead letters %v (before %v), %d pending; want %s back in the outbox", after, before["acme"], pending, replayed)
		case tn.Name != "acme" && (len(after) != len(before[tn.Name]) || pending != 0):
			t.Errorf("%s changed by a replay on acme: dead letters %v (before %v), %d pending", tn.Name, after, before[tn.Name], pending)
		}
	}

	// Unknown tenants, other hosts, requests without the token.
	if code, page := d.do(t, http.MethodGet, "/t/nope/", "", nil, bearer); code != http.StatusNotFound || !strings.Contains(page, "There is no tenant &#34;nope&#34;") {
		t.Errorf("unknown tenant: %d, want 404\n%s", code, page)
	}
	for host, want := range map[string]int{"evil.example": http.StatusMisdirectedRequest, "courier.example.com": http.StatusOK} {
		if code, _ := d.do(t, http.MethodGet, "/t/globex/dead-letters", host, nil, bearer); code != want {
			t.Errorf("with Host %s: %d, want %d", host, code, want)
		}
	}
	if code, page := d.do(t, http.MethodGet, "/t/globex/", "", nil, nil); code != 200 || !strings.Contains(page, "Log in") {
		t.Errorf("globex without the token: %d, want the login\n%s", code, page)
	}
	if code, _ := d.do(t, http.MethodPost, "/t/globex/dead-letters/discard", "", url.Values{"id": {"1"}}, nil); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Errorf("a post without the token nor the CSRF token: %d", code)
	}
	if after, _ := tenantState(t, ts[1]); len(after) != len(before["globex"]) {
		t.Errorf("globex's dead letters changed by a refused post: %v", after)
	}
	d.stop(t)
}

// The dashboard's tenant flags are checked before it listens.
func TestDashboardTenantFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tenants")
	testenv.Must(t, os.WriteFile(file, []byte("acme sqlite:acme.db\n"), 0o600), "tenants file")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dashboard", "--tenants-file", file, "--tenants-max-open", "0"}, "--tenants-max-open is 0: use 1 or more"},
		{[]string{"dashboard", "--tenants-file", file, "--tenants", "a=sqlite:a.db"}, "pass one of them"},
		{[]string{"dashboard", "--tenants-file", filepath.Join(t.TempDir(), "none")}, "tenants file"},
		{[]string{"dashboard", "--tenants-file", file, "--tenant", "hooli"}, `--tenant "hooli" is not one of the 1 tenants`},
	} {
		code, _, errOut := runCLI(t, c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("courier %s: exit %d, %q; want an error saying %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
}
