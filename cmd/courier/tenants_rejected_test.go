package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/tenant"
)

// rejectedRows are rows of a tenants query that are no tenants: names
// that are not valid (a path, markup, a space), a name given twice, a
// NULL URL, a URL no dialect reads.
var rejectedRows = [][2]any{
	{"../../evil<script>", "sqlite:evil.db"}, {"x y", "sqlite:xy.db"}, {"dup", "sqlite:dup1.db"}, {"dup", "sqlite:dup2.db"},
	{"nullurl", nil}, {"badurl", "ftp://example.com/db"},
}

// A catalogue whose tenants query returns rows that are no tenants among
// valid ones: courier migrate, relay, status and dashboard serve the
// valid tenants and report each bad row: the relay in /metrics
// (courier_fleet_rejected_tenants) and in its log, once per row however
// often it reads the catalogue, going on taking new tenants; status on a
// line of its own, as a failed check; the dashboard lists and shows the
// valid tenants.
func TestBadTenantRowsAreSkipped(t *testing.T) {
	ctx := context.Background()
	natsURL := testenv.NATS(t)
	dir := t.TempDir()
	cat := "sqlite:" + filepath.Join(dir, "catalogue.db")
	d, err := dburl.Open(ctx, cat, dburl.Options{Create: true})
	testenv.Must(t, err, "catalogue")
	defer d.Close()
	_, err = d.SQL().ExecContext(ctx, "CREATE TABLE customers (name TEXT, database_url TEXT)")
	testenv.Must(t, err, "customers")
	insert := func(name string, u any) {
		t.Helper()
		_, err := d.SQL().ExecContext(ctx, "INSERT INTO customers (name, database_url) VALUES (?, ?)", name, u)
		testenv.Must(t, err, "insert "+name)
	}
	for _, r := range rejectedRows {
		insert(r[0].(string), r[1])
	}
	ts := []tenant.Tenant{
		{Name: "acme", URL: "sqlite:" + filepath.Join(dir, "acme.db")},
		{Name: "globex", URL: "sqlite:" + filepath.Join(dir, "globex.db")},
		{Name: "initech", URL: "sqlite:" + filepath.Join(dir, "initech.db")},
	}
	good, late := ts[:2], ts[2]
	for _, tn := range ts {
		insert(tn.Name, tn.URL)
	}
	tenants := []string{"--tenants-query", "SELECT name, database_url FROM customers", "--database-url", cat}
	code, out, errOut := runCLI(t, append([]string{"migrate"}, tenants...)...)
	if code != 0 || strings.Count(out, "tenant ") != len(ts) {
		t.Fatalf("migrate: %d\n%s\n%s", code, out, errOut)
	}
	_, err = d.SQL().ExecContext(ctx, "DELETE FROM customers WHERE name = ?", late.Name)
	testenv.Must(t, err, "remove the late tenant for now")
	written := writeOrders(t, ts)

	stream := testenv.Name("TENANTS")
	prefix := strings.ToLower(stream) + "."
	relay := startServedRelay(t, nil, append([]string{"--broker-url", natsURL, "--stream", stream, "--subject-prefix", prefix,
		"--poll-interval", "20ms", "--tenants-refresh", "1s"}, tenants...)...)
	waitDrained(t, relay, good, tenants...)
	code, body := relay.get(t, "/metrics")
	for _, want := range []string{"courier_fleet_tenants 2", fmt.Sprintf("courier_fleet_rejected_tenants %d", len(rejectedRows))} {
		if code != 200 || !strings.Contains(body, want) {
			t.Fatalf("/metrics: %d, no %q in\n%s", code, want, body)
		}
	}
	// A tenant added to the catalogue is served: the relay read it again.
	insert(late.Name, late.URL)
	waitDrained(t, relay, ts, tenants...)
	checkTenantsDelivery(t, natsURL, stream, prefix, written)
	logged := map[string]int{}
	for line := range strings.Lines(relay.Logs()) {
		var rec struct{ Msg, Tenant, Reason string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "tenant entry rejected; the other tenants are served" {
			logged[rec.Tenant]++
		}
	}
	if want := map[string]int{"../../evil<script>": 1, "x y": 1, "dup": 2, "nullurl": 1, "badurl": 1}; fmt.Sprint(logged) != fmt.Sprint(want) {
		t.Fatalf("the rejected rows logged %v, want each once: %v\n%s", logged, want, relay.Logs())
	}

	code, out, errOut = runCLI(t, append([]string{"status"}, tenants...)...)
	for _, want := range []string{"acme ", "globex ", "initech ", "6 entries of --tenants-query rejected",
		`"../../evil<script>": the name is not valid`, `"x y": the name is not valid`, `"nullurl": the URL is NULL`, `"dup": the name is given 2 times`} {
		if code == 0 || !strings.Contains(out, want) {
			t.Errorf("status: exit %d, no %q in\n%s\n%s", code, want, out, errOut)
		}
	}

	dash := startDashboard(t, nil, append([]string{"--addr", "127.0.0.1:0"}, tenants...)...)
	code, page := dash.do(t, http.MethodGet, "/", "", nil, nil)
	if code != 200 || strings.Count(page, `class="tenant-link"`) != len(ts) || strings.Contains(page, "evil") {
		t.Fatalf("dashboard's tenant list: %d, want the %d valid tenants and no other\n%s\n%s", code, len(ts), page, dash.logs)
	}
	for _, tn := range ts {
		if code, page := dash.do(t, http.MethodGet, "/t/"+tn.Name+"/dead-letters", "", nil, nil); code != 200 {
			t.Errorf("%s's dead letters: %d\n%s", tn.Name, code, page)
		}
	}
	dash.stop(t)
	if n := strings.Count(dash.logs.String(), "tenant entry rejected"); n != len(rejectedRows) {
		t.Errorf("the dashboard logged %d rejected rows, want %d, each once:\n%s", n, len(rejectedRows), dash.logs)
	}
}
