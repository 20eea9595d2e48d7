package tenant_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/tenant"
)

// badEntries are catalogue rows that name no tenant: a name that is not
// valid, one given twice, a NULL URL, a URL no dialect reads.
var badEntries = [][2]any{
	{"../../evil<script>", "sqlite:evil.db"}, {"x y", "sqlite:xy.db"}, {"dup", "sqlite:dup1.db"}, {"dup", "sqlite:dup2.db"},
	{"nullurl", nil}, {"badurl", "ftp://example.com/db"},
}

// A catalogue whose query returns rows that are no tenants among valid
// ones: the fleet serves the valid tenants, reports each bad row in
// Status and logs it once however often the catalogue is read, and goes
// on taking new tenants; a consumer over the same catalogue applies the
// valid tenants' messages in their databases. A tenants file with bad
// lines reads the same.
func TestBadTenantEntriesAreSkipped(t *testing.T) {
	ctx := context.Background()
	ts := consumerTenants(t, 3)
	good, late := ts[:2], ts[2]
	cat, err := dburl.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "catalogue.db"), dburl.Options{Create: true})
	testenv.Must(t, err, "catalogue")
	t.Cleanup(cat.Close)
	_, err = cat.SQL().ExecContext(ctx, "CREATE TABLE tenants (name TEXT, url TEXT)")
	testenv.Must(t, err, "tenants table")
	insert := func(name string, u any) {
		t.Helper()
		_, err := cat.SQL().ExecContext(ctx, "INSERT INTO tenants (name, url) VALUES (?, ?)", name, u)
		testenv.Must(t, err, "insert "+name)
	}
	for _, e := range badEntries {
		insert(e[0].(string), e[1])
	}
	for _, tn := range good {
		insert(tn.Name, tn.URL)
	}
	var reads atomic.Int32
	query := tenant.Query(cat.SQL(), "SELECT name, url FROM tenants")
	src := tenant.SourceFunc(func(ctx context.Context) ([]tenant.Tenant, error) {
		defer reads.Add(1)
		return query.Tenants(ctx)
	})
	for _, tn := range ts {
		write(t, tn, messages(tn, 5, 2)...)
	}

	var logs testenv.Buffer
	pub := memory.NewPublisher()
	f, _ := runFleet(t, pub, tenant.Config{Source: src, Relay: fastRelay, Refresh: time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		return len(byTenant(t, pub)) == len(good) && reads.Load() >= 2, fmt.Sprint(published(pub), " published, ", reads.Load(), " reads")
	}, "the valid tenants' messages published, the catalogue read twice: %v; logs:\n%s", testenv.Lazy(func() any { return summary(f) }), &logs)
	checkOrder(t, byTenant(t, pub), good, 5, 2)
	st := f.Status()
	var names []string
	for _, r := range st.Rejected {
		names = append(names, r.Name)
	}
	if n := strings.Count(logs.String(), "tenant entry rejected"); n != len(badEntries) {
		t.Errorf("%d log lines of rejected entries after %d reads, want one per entry, %d:\n%s", n, reads.Load(), len(badEntries), &logs)
	}
	slices.Sort(names)
	if want := []string{"../../evil<script>", "badurl", "dup", "dup", "nullurl", "x y"}; !slices.Equal(names, want) || st.Tenants != len(good) || st.SourceError != "" {
		t.Fatalf("status: %d tenants, rejected %q, source error %q; want %d tenants and %q rejected", st.Tenants, names, st.SourceError, len(good), want)
	}

	// A tenant added to the catalogue is served.
	insert(late.Name, late.URL)
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { return len(byTenant(t, pub)) == len(ts), published(pub) },
		"the added tenant served: %v", testenv.Lazy(func() any { return summary(f) }))

	// A consumer over the same catalogue.
	e := newConsumerEnv(t)
	msgs := []courier.Message{of(good[0], "k", "a"), of(late, "k", "b")}
	e.publish(msgs...)
	c := e.run("billing", applyEffect, tenant.ConsumerConfig{Source: src})
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { m := c.Metrics(); return m.Applied == 2, m },
		"both messages applied")
	for i, tn := range []tenant.Tenant{good[0], late} {
		if n := count(t, tn, "SELECT count(*) FROM effects WHERE message_id = ?", msgs[i].ID.String()); n != 1 {
			t.Errorf("message of %s applied %d times in its database, want once", tn.Name, n)
		}
	}

	// A tenants file with bad lines: its valid lines are tenants, each
	// bad one is rejected, named by its line.
	file := filepath.Join(t.TempDir(), "tenants")
	content := "# tenants\n" + good[0].Name + " " + good[0].URL + "\n../../evil<script> sqlite:evil.db\nx y sqlite:xy.db\nlonely\n" + good[1].Name + " " + good[1].URL + "\n"
	testenv.Must(t, os.WriteFile(file, []byte(content), 0o600), "tenants file")
	got, err := tenant.File(file).Tenants(ctx)
	var re *tenant.RejectedError
	if !errors.As(err, &re) || len(got) != 2 || !slices.Contains(got, good[0]) || !slices.Contains(got, good[1]) || len(re.Rejected) != 3 ||
		!strings.Contains(re.Rejected[0].Reason, "line 4") || re.Rejected[2].Name != "../../evil<script>" {
		t.Fatalf("tenants file with bad lines: %v, %v; want its 2 tenants and its 3 bad lines rejected", got, err)
	}
	sieve := tenant.NewSieve(tenant.File(file), nil)
	if got, err := sieve.Tenants(ctx); err != nil || len(got) != 2 || len(sieve.Rejected()) != 3 {
		t.Fatalf("sieve of the file: %v, %v, rejected %v", got, err, sieve.Rejected())
	}
}
