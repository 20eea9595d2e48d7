package tenant_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/tenant"
)

// sqliteTenants creates n migrated SQLite files as tenants named
// prefix0, prefix1, ….
func sqliteTenants(t testing.TB, prefix string, n int) []tenant.Tenant {
	t.Helper()
	dir := t.TempDir()
	ts := make([]tenant.Tenant, n)
	for i := range ts {
		ts[i] = tenant.Tenant{Name: prefix + strconv.Itoa(i), URL: "sqlite:" + filepath.Join(dir, fmt.Sprintf("%s%d.db", prefix, i))}
		migrateTenant(t, ts[i], dburl.Options{Create: true})
	}
	return ts
}

// pgTenants creates n migrated schemas of the test's PostgreSQL as
// tenants, dropped when the test ends; it skips without PostgreSQL.
func pgTenants(t testing.TB, prefix string, n int) []tenant.Tenant {
	t.Helper()
	base := testenv.Need(t, testenv.EnvPostgres)
	ts := make([]tenant.Tenant, n)
	for i := range ts {
		u, err := dburl.WithSchema(base, testenv.Name("tn_"+prefix+"_"))
		testenv.Must(t, err, "schema URL")
		ts[i] = tenant.Tenant{Name: prefix + strconv.Itoa(i), URL: u}
		migrateTenant(t, ts[i], dburl.Options{CreateSchema: true})
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := dburl.DropSchema(ctx, u); err != nil {
				t.Logf("drop %s: %v", ts[i].Name, err)
			}
		})
	}
	return ts
}

func migrateTenant(t testing.TB, tn tenant.Tenant, opts dburl.Options) {
	t.Helper()
	ctx := context.Background()
	d, err := dburl.Open(ctx, tn.URL, opts)
	testenv.Must(t, err, "open "+tn.Name)
	defer d.Close()
	_, err = d.Migrate(ctx)
	testenv.Must(t, err, "migrate "+tn.Name)
}

// write commits msgs in tn's outbox, one transaction, and returns them
// as written.
func write(t testing.TB, tn tenant.Tenant, msgs ...courier.Message) []courier.Message {
	t.Helper()
	ctx := context.Background()
	d, err := dburl.Open(ctx, tn.URL, dburl.Options{})
	testenv.Must(t, err, "open "+tn.Name)
	defer d.Close()
	w := outbox.New(d.Inserter(), outbox.Config{})
	testenv.Must(t, d.InTx(ctx, func(tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) }), "write to "+tn.Name)
	return msgs
}

// messages returns n messages of topic orders, keys k0…k(keys-1) in turn,
// with payloads "tenant/i".
func messages(tn tenant.Tenant, n, keys int) []courier.Message {
	out := make([]courier.Message, n)
	for i := range out {
		out[i] = courier.NewMessage("orders", "k"+strconv.Itoa(i%keys), "OrderPlaced", []byte(tn.Name+"/"+strconv.Itoa(i)))
	}
	return out
}
