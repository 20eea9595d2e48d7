package dburl_test

import (
	"context"
	"strings"
	"testing"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/dburl"
)

func TestWithDatabase(t *testing.T) {
	for _, c := range []struct{ base, name, want string }{
		{"postgres://app:secret@db:5432/shop?sslmode=disable", "acme", "postgres://app:secret@db:5432/acme?sslmode=disable"},
		{"postgresql://app@db-a:5432,db-b:5432/shop?search_path=orders", "acme", "postgresql://app@db-a:5432,db-b:5432/acme?search_path=orders"},
		{"postgres://app@db", "acme", "postgres://app@db/acme"},
		{"mysql://app:a%40b@db:3306/shop?timeout=5s", "acme_1", "mysql://app:a%40b@db:3306/acme_1?timeout=5s"},
	} {
		got, err := dburl.WithDatabase(c.base, c.name)
		if err != nil || got != c.want {
			t.Errorf("WithDatabase(%q, %q) = %q, %v; want %q", c.base, c.name, got, err, c.want)
		}
	}
	for _, c := range []struct{ base, name, want string }{
		{"sqlite:shop.db", "acme", "is not a postgres:// or mysql:// URL"},
		{"postgres://app:secret@db/shop", "", "use a name without '/'"},
		{"mysql://app@db/shop", "a/b", "use a name without '/'"},
	} {
		if _, err := dburl.WithDatabase(c.base, c.name); err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("WithDatabase(%q, %q): %v; want an error saying %q, without the password", c.base, c.name, err, c.want)
		}
	}
}

// CreateDatabase creates the database a URL names, once; Open then opens
// it, and DropDatabase drops it even while a session is on it
// (PostgreSQL) — on each server dialect.
func TestCreateAndDropDatabase(t *testing.T) {
	for _, c := range []struct {
		dialect string
		base    func(t *testing.T) string
	}{
		{"postgres", func(t *testing.T) string { return testenv.Need(t, testenv.EnvPostgres) }},
		{"mysql", func(t *testing.T) string { return testenv.MySQL(t, nil).URL }},
	} {
		t.Run(c.dialect, func(t *testing.T) {
			ctx := context.Background()
			raw, err := dburl.WithDatabase(c.base(t), testenv.Name("t_db_"))
			testenv.Must(t, err, "with database")
			t.Cleanup(func() { _ = dburl.DropDatabase(context.Background(), raw) })
			if _, err := dburl.Open(ctx, raw, dburl.Options{}); err == nil {
				t.Fatalf("Open of a database not created yet worked")
			}
			if created, err := dburl.CreateDatabase(ctx, raw); err != nil || !created {
				t.Fatalf("CreateDatabase = %v, %v; want it created", created, err)
			}
			if created, err := dburl.CreateDatabase(ctx, raw); err != nil || created {
				t.Fatalf("CreateDatabase of an existing database = %v, %v; want it left", created, err)
			}
			d, err := dburl.Open(ctx, raw, dburl.Options{})
			testenv.Must(t, err, "open the created database")
			defer d.Close()
			_, err = d.Migrate(ctx)
			testenv.Must(t, err, "migrate the created database")
			if c.dialect == "mysql" {
				d.Close() // MySQL waits for the sessions' locks; PostgreSQL ends the sessions
			}
			testenv.Must(t, dburl.DropDatabase(ctx, raw), "drop")
			testenv.Must(t, dburl.DropDatabase(ctx, raw), "drop a database that does not exist")
			if _, err := dburl.Open(ctx, raw, dburl.Options{}); err == nil {
				t.Fatalf("Open of a dropped database worked")
			}
		})
	}
}

// The database helpers name the fix for URLs that name no database on a
// server.
func TestDatabaseHelpersRefuseOtherURLs(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ raw, want string }{
		{"sqlite:shop.db", "names a SQLite file, not a database on a server"},
		{"postgres://app:secret@127.0.0.1:1", "names no database"},
		{"redis://db/0", "is not a database URL Courier knows"},
	} {
		if _, err := dburl.CreateDatabase(ctx, c.raw); err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("CreateDatabase(%q): %v; want an error saying %q, without the password", c.raw, err, c.want)
		}
		if err := dburl.DropDatabase(ctx, c.raw); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("DropDatabase(%q): %v; want an error saying %q", c.raw, err, c.want)
		}
	}
}
