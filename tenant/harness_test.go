package tenant_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/tenant"
)

// tenantKind is a kind of tenant database. The tests that matter run
// over every kind (forEachKind).
type tenantKind struct {
	name string
	// newURL returns the URL of a new database of this kind, not created
	// yet (createTenant creates it), and drop, which drops or removes it.
	// It skips the test without the kind's server.
	newURL func(t testing.TB, prefix string) (u string, drop func(context.Context) error)
}

// The kinds of tenant database package tenant serves: a SQLite file, a
// schema of a shared PostgreSQL database, a database of its own on a
// PostgreSQL server, a database of its own on a MySQL/MariaDB server.
var (
	sqliteKind     = tenantKind{"sqlite", sqliteURL}
	pgSchemaKind   = tenantKind{"postgres-schema", pgSchemaURL}
	pgDatabaseKind = tenantKind{"postgres-database", pgDatabaseURL}
	mysqlKind      = tenantKind{"mysql", mysqlDatabaseURL}
	tenantKinds    = []tenantKind{sqliteKind, pgSchemaKind, pgDatabaseKind, mysqlKind}
)

// forEachKind runs test as a subtest per kind of tenant database, each
// skipped without its server.
func forEachKind(t *testing.T, test func(t *testing.T, k tenantKind)) {
	t.Helper()
	for _, k := range tenantKinds {
		t.Run(k.name, func(t *testing.T) { test(t, k) })
	}
}

// url returns the URL of a new database of kind k, not created yet
// (createTenant creates it), dropped when the test ends.
func (k tenantKind) url(t testing.TB, prefix string) string {
	t.Helper()
	u, drop := k.newURL(t, prefix)
	t.Cleanup(func() { dropAll(t, drop) })
	return u
}

// tenants creates n migrated tenants of kind k named prefix0, prefix1, …,
// dropped when the test ends. They are created, and dropped, at the same
// time: a busy PostgreSQL server takes a second or so over each database.
func (k tenantKind) tenants(t testing.TB, prefix string, n int) []tenant.Tenant {
	t.Helper()
	ts := make([]tenant.Tenant, n)
	drops := make([]func(context.Context) error, n)
	for i := range ts {
		var u string
		u, drops[i] = k.newURL(t, prefix)
		ts[i] = tenant.Tenant{Name: prefix + strconv.Itoa(i), URL: u}
	}
	t.Cleanup(func() { dropAll(t, drops...) })
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, tn := range ts {
		wg.Go(func() { errs[i] = create(tn) })
	}
	wg.Wait()
	testenv.Must(t, errors.Join(errs...), "create the tenants")
	return ts
}

// dropAll runs the drops at the same time, logging their errors.
func dropAll(t testing.TB, drops ...func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, drop := range drops {
		wg.Go(func() {
			if err := drop(ctx); err != nil {
				t.Logf("%v", err)
			}
		})
	}
	wg.Wait()
}

// sqliteTenants creates n migrated SQLite files as tenants named
// prefix0, prefix1, ….
func sqliteTenants(t testing.TB, prefix string, n int) []tenant.Tenant {
	t.Helper()
	return sqliteKind.tenants(t, prefix, n)
}

// pgTenants creates n migrated schemas of the test's PostgreSQL as
// tenants, dropped when the test ends; it skips without PostgreSQL.
func pgTenants(t testing.TB, prefix string, n int) []tenant.Tenant {
	t.Helper()
	return pgSchemaKind.tenants(t, prefix, n)
}

// pgDatabaseTenants creates n migrated databases on the test's PostgreSQL
// server as tenants, dropped when the test ends; it skips without
// PostgreSQL.
func pgDatabaseTenants(t testing.TB, prefix string, n int) []tenant.Tenant {
	t.Helper()
	return pgDatabaseKind.tenants(t, prefix, n)
}

// mysqlTenants creates n migrated databases on the test's MySQL/MariaDB
// server as tenants, dropped when the test ends; it skips without MySQL.
func mysqlTenants(t testing.TB, prefix string, n int) []tenant.Tenant {
	t.Helper()
	return mysqlKind.tenants(t, prefix, n)
}

// sqliteURL is the URL of a new SQLite file in a directory the test
// removes.
func sqliteURL(t testing.TB, prefix string) (string, func(context.Context) error) {
	return "sqlite:" + filepath.Join(t.TempDir(), prefix+".db"), func(context.Context) error { return nil }
}

// pgSchemaURL is the URL of a new schema of the test's PostgreSQL
// database.
func pgSchemaURL(t testing.TB, prefix string) (string, func(context.Context) error) {
	t.Helper()
	u, err := dburl.WithSchema(testenv.Need(t, testenv.EnvPostgres), testenv.Name("tn_"+prefix+"_"))
	testenv.Must(t, err, "schema URL")
	return u, func(ctx context.Context) error { return dburl.DropSchema(ctx, u) }
}

// pgDatabaseURL is the URL of a new database on the test's PostgreSQL
// server.
func pgDatabaseURL(t testing.TB, prefix string) (string, func(context.Context) error) {
	t.Helper()
	return serverDatabaseURL(t, testenv.Need(t, testenv.EnvPostgres), prefix)
}

// mysqlDatabaseURL is the mysql:// URL of a new database on the test's
// MySQL/MariaDB server.
func mysqlDatabaseURL(t testing.TB, prefix string) (string, func(context.Context) error) {
	t.Helper()
	dsn := testenv.Need(t, testenv.EnvMySQL)
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil || cfg.Net != "tcp" {
		t.Fatalf("%s must be a go-sql-driver DSN over TCP, such as root@tcp(127.0.0.1:3306)/test: %q (%v)", testenv.EnvMySQL, dsn, err)
	}
	base := url.URL{Scheme: "mysql", User: url.UserPassword(cfg.User, cfg.Passwd), Host: cfg.Addr, Path: "/" + cfg.DBName}
	if cfg.Passwd == "" {
		base.User = url.User(cfg.User)
	}
	// The DSN's parameters, as the driver writes them back.
	formatted := cfg.FormatDSN()
	_, base.RawQuery, _ = strings.Cut(formatted[strings.LastIndex(formatted, "@")+1:], "?")
	return serverDatabaseURL(t, base.String(), prefix)
}

// serverDatabaseURL is base with the name of a new database.
func serverDatabaseURL(t testing.TB, base, prefix string) (string, func(context.Context) error) {
	t.Helper()
	u, err := dburl.WithDatabase(base, testenv.Name("tn_"+prefix+"_"))
	testenv.Must(t, err, "database URL")
	return u, func(ctx context.Context) error { return dburl.DropDatabase(ctx, u) }
}

// createTenant creates tn's database (its SQLite file, its schema or its
// database on the server) and migrates it.
func createTenant(t testing.TB, tn tenant.Tenant) {
	t.Helper()
	testenv.Must(t, create(tn), "create tenant "+tn.Name)
}

func create(tn tenant.Tenant) error {
	ctx := context.Background()
	u, err := dburl.Parse(tn.URL, dburl.Options{})
	if err != nil {
		return err
	}
	schema, err := dburl.Schema(tn.URL)
	if err != nil {
		return err
	}
	if u.Dialect == "mysql" || (u.Dialect == "postgres" && schema == "") {
		if _, err := dburl.CreateDatabase(ctx, tn.URL); err != nil {
			return fmt.Errorf("tenant %s: %w", tn.Name, err)
		}
	}
	d, err := dburl.Open(ctx, tn.URL, dburl.Options{Create: true, CreateSchema: true})
	if err != nil {
		return fmt.Errorf("tenant %s: %w", tn.Name, err)
	}
	defer d.Close()
	if _, err = d.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate tenant %s: %w", tn.Name, err)
	}
	return nil
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
