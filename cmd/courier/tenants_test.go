package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/tenant"
)

// courier migrate creates and migrates every tenant of a tenants file
// (SQLite files, and PostgreSQL schemas when PostgreSQL is there) and the
// fleet's database; courier relay serves them all into NATS, each message
// stamped with its tenant; courier status shows them one line each, or
// one of them with --tenant.
func TestRelayServesTenants(t *testing.T) {
	natsURL := testenv.NATS(t)
	dir := t.TempDir()
	ts := []tenant.Tenant{
		{Name: "acme", URL: "sqlite:" + filepath.Join(dir, "acme.db")},
		{Name: "globex", URL: "sqlite:" + filepath.Join(dir, "globex.db")},
	}
	if base := os.Getenv(testenv.EnvPostgres); base != "" {
		schema := testenv.Name("tn_cli_")
		u, err := dburl.WithSchema(base, schema)
		testenv.Must(t, err, "schema URL")
		ts = append(ts, tenant.Tenant{Name: "initech", URL: u})
		t.Cleanup(func() { _ = dburl.DropSchema(context.Background(), u) })
	}
	var file strings.Builder
	file.WriteString("# the shop's customers\n")
	for _, tn := range ts {
		fmt.Fprintf(&file, "%s %s\n", tn.Name, tn.URL)
	}
	tenantsFile := filepath.Join(dir, "tenants")
	testenv.Must(t, os.WriteFile(tenantsFile, []byte(file.String()), 0o600), "tenants file")
	fleetDB := "sqlite:" + filepath.Join(dir, "fleet.db")
	code, out, errOut := runCLI(t, "migrate", "--tenants-file", tenantsFile, "--database-url", fleetDB)
	if code != 0 || strings.Count(out, "tenant ") != len(ts) {
		t.Fatalf("migrate: %d\n%s\n%s", code, out, errOut)
	}

	written := writeOrders(t, ts)

	stream := testenv.Name("TENANTS")
	prefix := strings.ToLower(stream) + "."
	relay := startServedRelay(t, nil, "--broker-url", natsURL, "--stream", stream, "--subject-prefix", prefix,
		"--tenants-file", tenantsFile, "--database-url", fleetDB, "--poll-interval", "20ms", "--metrics-max-tenants", "1")
	waitDrained(t, relay, ts, "--tenants-file", tenantsFile)
	// /metrics: the fleet's gauges, and the first tenant's series of its
	// own, the others summed (--metrics-max-tenants 1).
	code, body := relay.get(t, "/metrics")
	total := 20 * len(ts)
	for _, want := range []string{"courier_fleet_tenants " + fmt.Sprint(len(ts)), "courier_fleet_members 1", "courier_fleet_failing_tenants 0",
		"courier_relay_published_messages_total " + fmt.Sprint(total), `courier_tenant_published_messages_total{tenant="other tenants"}`} {
		if code != 200 || !strings.Contains(body, want) {
			t.Fatalf("/metrics: %d, no %q in\n%s", code, want, body)
		}
	}
	if strings.Count(body, "courier_tenant_published_messages_total{") != 2 {
		t.Fatalf("/metrics: want two tenant series (one tenant's, the others'):\n%s", body)
	}
	if code, body := relay.get(t, "/readyz"); code != 200 || !strings.Contains(body, "tenants served") {
		t.Fatalf("/readyz: %d %s", code, body)
	}

	code, out, errOut = runCLI(t, "cleanup", "--tenants-file", tenantsFile, "--keep-dead-letters", "1h")
	if code != 0 || strings.Count(out, "\n") != len(ts)+1 {
		t.Fatalf("cleanup over tenants: %d\n%s\n%s", code, out, errOut)
	}
	checkTenantsDelivery(t, natsURL, stream, prefix, written)

	// One tenant, by name; a name that is not one says which are.
	code, out, errOut = runCLI(t, "status", "--tenants-file", tenantsFile, "--tenant", "globex")
	if code != 0 || !strings.Contains(out, "OUTBOX") {
		t.Fatalf("status --tenant globex: %d\n%s\n%s", code, out, errOut)
	}
	code, _, errOut = runCLI(t, "dlq", "list", "--tenants-file", tenantsFile, "--tenant", "hooli")
	if code == 0 || !strings.Contains(errOut, `--tenant "hooli" is not one of the`) || !strings.Contains(errOut, "acme, globex") {
		t.Fatalf("dlq list --tenant hooli: %d %s", code, errOut)
	}
}

// courier relay --tenants serves tenants with a database of their own on
// the servers, two on MySQL/MariaDB and one on PostgreSQL, created by the
// operator and migrated by courier migrate --tenants: every message
// reaches NATS, stamped with its tenant, each key in order.
func TestRelayServesDatabaseTenants(t *testing.T) {
	natsURL := testenv.NATS(t)
	pgBase := testenv.Need(t, testenv.EnvPostgres)
	myBase := mysqlURL(t, testenv.Need(t, testenv.EnvMySQL))
	ctx := context.Background()
	var ts []tenant.Tenant
	var list []string
	for _, c := range []struct{ name, base string }{{"acme", myBase}, {"globex", myBase}, {"initech", pgBase}} {
		u, err := dburl.WithDatabase(c.base, testenv.Name("tn_cli_"))
		testenv.Must(t, err, "database URL")
		t.Cleanup(func() {
			if err := dburl.DropDatabase(context.Background(), u); err != nil {
				t.Log(err)
			}
		})
		_, err = dburl.CreateDatabase(ctx, u)
		testenv.Must(t, err, "create the database of "+c.name)
		ts = append(ts, tenant.Tenant{Name: c.name, URL: u})
		list = append(list, c.name+"="+u)
	}
	tenants := strings.Join(list, ",")
	code, out, errOut := runCLI(t, "migrate", "--tenants", tenants)
	if code != 0 || strings.Count(out, "tenant ") != len(ts) {
		t.Fatalf("migrate: %d\n%s\n%s", code, out, errOut)
	}
	written := writeOrders(t, ts)
	stream := testenv.Name("TENANTS")
	prefix := strings.ToLower(stream) + "."
	relay := startServedRelay(t, nil, "--broker-url", natsURL, "--stream", stream, "--subject-prefix", prefix,
		"--tenants", tenants, "--poll-interval", "20ms")
	waitDrained(t, relay, ts, "--tenants", tenants)
	checkTenantsDelivery(t, natsURL, stream, prefix, written)
}

// writeOrders writes 20 messages over 3 keys in each tenant's outbox, and
// returns them by tenant.
func writeOrders(t *testing.T, ts []tenant.Tenant) map[string][]courier.Message {
	t.Helper()
	written := map[string][]courier.Message{}
	for _, tn := range ts {
		msgs := make([]courier.Message, 20)
		for i := range msgs {
			msgs[i] = courier.NewMessage("orders", fmt.Sprintf("k%d", i%3), "OrderPlaced", []byte(fmt.Sprintf(`{"n":%d}`, i)))
		}
		d, err := dburl.Open(context.Background(), tn.URL, dburl.Options{})
		testenv.Must(t, err, "open "+tn.Name)
		w := outbox.New(d.Inserter(), outbox.Config{})
		testenv.Must(t, d.InTx(context.Background(), func(tx *sql.Tx) error { return w.Write(context.Background(), tx, msgs...) }), "write")
		d.Close()
		written[tn.Name] = msgs
	}
	return written
}

// waitDrained waits until courier status, given the tenants with
// tenantsFlags, shows no message pending in any of ts.
func waitDrained(t *testing.T, relay *servedRelay, ts []tenant.Tenant, tenantsFlags ...string) {
	t.Helper()
	pending := func() map[string]float64 {
		code, out, errOut := runCLI(t, append([]string{"status", "--json"}, tenantsFlags...)...)
		var lines []tenantStatus
		if err := json.Unmarshal([]byte(out), &lines); err != nil {
			t.Fatalf("status over tenants: %d %v\n%s\n%s", code, err, out, errOut)
		}
		m := map[string]float64{}
		for _, l := range lines {
			if l.Rejected != "" {
				continue // not a tenant
			}
			if l.Status == nil {
				t.Fatalf("status of tenant %s: %s", l.Tenant, l.Error)
			}
			m[l.Tenant] = float64(l.Status.Outbox.Pending)
		}
		return m
	}
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		m := pending()
		done := len(m) == len(ts)
		for _, tn := range ts {
			done = done && m[tn.Name] == 0
		}
		return done, fmt.Sprint(m)
	}, "every tenant drained; logs:\n%s", testenv.Lazy(func() any { return relay.Logs() }))
}

// checkTenantsDelivery checks that the stream holds each tenant's written
// messages, stamped with its name, each key in order.
func checkTenantsDelivery(t *testing.T, natsURL, stream, prefix string, written map[string][]courier.Message) {
	t.Helper()
	got := testenv.StreamMessages(t, testenv.Connect(t, natsURL), stream, couriernats.Config{SubjectPrefix: prefix})
	byTenant := map[string][]courier.Message{}
	for _, m := range got {
		byTenant[m.Headers[tenant.Header]] = append(byTenant[m.Headers[tenant.Header]], m)
	}
	if len(byTenant) != len(written) {
		t.Errorf("messages of %d tenants on the stream, want %d", len(byTenant), len(written))
	}
	for name, msgs := range written {
		testenv.CheckDelivery(t, msgs, byTenant[name])
	}
}

// The tenant flags fail before anything is opened, naming the flag and
// the fix.
func TestTenantFlagErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tenants")
	testenv.Must(t, os.WriteFile(file, []byte("acme sqlite:acme.db\n"), 0o600), "tenants file")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"relay", "--tenants", "a=sqlite:a.db", "--tenants-file", file}, "pass one of them"},
		{[]string{"relay", "--tenants-query", "SELECT name, url FROM tenants"}, "--tenants-query runs on the catalogue database"},
		{[]string{"relay", "--tenants", "a"}, `"a" is not NAME=URL`},
		{[]string{"relay", "--tenants", "a b=sqlite:a.db"}, "is not valid"},
		{[]string{"relay", "--tenants-file", file, "--mode", "cdc", "--database-url", "postgres://u@127.0.0.1:1/x"}, "relay tenants with --mode poll"},
		{[]string{"relay", "--tenants-file", file, "--tenant", "acme"}, "the relay serves them all"},
		{[]string{"relay", "--tenants-file", file, "--tenants-max-open", "0"}, "--tenants-max-open is 0"},
		{[]string{"status", "--tenant", "acme"}, "give the tenants too"},
		{[]string{"dlq", "list", "--tenants-file", file}, "pick the one to work on with --tenant NAME"},
	} {
		code, _, errOut := runCLI(t, c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("courier %s: exit %d, %q; want an error saying %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
}
