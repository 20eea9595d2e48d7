package dburl_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/dburl"
)

func TestMain(m *testing.M) { os.Exit(testenv.M(m).Run()) }

func TestParse(t *testing.T) {
	wd, err := os.Getwd()
	testenv.Must(t, err, "getwd")
	for _, c := range []struct {
		raw     string
		bare    bool
		dialect string
		conn    string
		where   string
	}{
		{raw: "postgres://app:secret@db:5432/shop", dialect: "postgres", conn: "postgres://app:secret@db:5432/shop", where: "postgres://app:xxxxx@db:5432/shop"},
		{raw: "postgresql://app@db/shop?search_path=orders", dialect: "postgres", conn: "postgresql://app@db/shop?search_path=orders", where: "postgresql://app@db/shop?search_path=orders"},
		{raw: "postgres://app@db/shop?password=secret&sslpassword=s2", dialect: "postgres", conn: "postgres://app@db/shop?password=secret&sslpassword=s2", where: "postgres://app@db/shop?password=xxxxx&sslpassword=xxxxx"},
		{raw: "postgres://app:p?ss@db/shop", dialect: "postgres", conn: "postgres://app:p?ss@db/shop", where: "postgres://app:xxxxx@db/shop"}, // pgx reads it as libpq does
		{raw: "mysql://app:a%40b%3Ac%2Fd@db:3306/shop", dialect: "mysql", conn: "app:a@b:c/d@tcp(db:3306)/shop", where: "mysql://app:xxxxx@db:3306/shop"},
		{raw: "mysql://app@db/shop?timeout=5s", dialect: "mysql", conn: "app@tcp(db:3306)/shop?timeout=5s", where: "mysql://app@db/shop?timeout=5s"},
		{raw: "sqlite:///var/lib/courier.db", dialect: "sqlite", conn: "/var/lib/courier.db", where: "/var/lib/courier.db"},
		{raw: "sqlite:courier.db", dialect: "sqlite", conn: "courier.db", where: filepath.Join(wd, "courier.db")},
		{raw: "file:data/courier.db", dialect: "sqlite", conn: "data/courier.db", where: filepath.Join(wd, "data/courier.db")},
		{raw: "orders.db", bare: true, dialect: "sqlite", conn: "orders.db", where: filepath.Join(wd, "orders.db")},
		{raw: "/tmp/orders.db", bare: true, dialect: "sqlite", conn: "/tmp/orders.db", where: "/tmp/orders.db"},
	} {
		u, err := dburl.Parse(c.raw, dburl.Options{BarePaths: c.bare})
		if err != nil || u.Dialect != c.dialect || u.Conn != c.conn || u.Where != c.where {
			t.Errorf("Parse(%q) = %+v, %v; want %s %q at %q", c.raw, u, err, c.dialect, c.conn, c.where)
		}
	}

	for _, c := range []struct {
		raw  string
		bare bool
		want string
	}{
		{raw: "", want: "--database-url is empty: use postgres://"},
		{raw: "orders.db", want: `--database-url "orders.db" is not a database URL Courier knows: use postgres://`},
		{raw: "redis://app:secret@cache:6379", bare: true, want: "is not a database URL Courier knows: use a SQLite file path, postgres://"},
		{raw: "mysql://nohost", want: "is not a MySQL URL"},
		{raw: "mysql://app:secret@db:3306/shop?timeout=soon", want: "is not a MySQL URL"},
		{raw: "mysql://app:100%@db/shop", want: "invalid URL escape"},
		{raw: "sqlite:", want: "names no SQLite file"},
		{raw: "mysql://app:p#secret@db/shop", want: "percent-encode"},
		{raw: "mysql://app:p/secret@db/shop", want: "percent-encode"},
		{raw: "postgres://app:p/secret@db/shop", want: "percent-encode"},
		{raw: "host=db password=secret", want: `"host=db password=xxxxx" is not a database URL`},
	} {
		_, err := dburl.Parse(c.raw, dburl.Options{Flag: "--database-url", BarePaths: c.bare})
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("Parse(%q): %v; want an error with %q and no password", c.raw, err, c.want)
		}
	}
}

func TestExportSQL(t *testing.T) {
	if got := strings.Join(dburl.Dialects(), ","); got != "postgres,mysql,sqlite" {
		t.Fatalf("Dialects() = %s", got)
	}
	for _, name := range dburl.Dialects() {
		ms, err := dburl.ExportSQL(name)
		if err != nil || len(ms) == 0 || !strings.Contains(ms[0].SQL, "courier_") {
			t.Errorf("ExportSQL(%s) = %d migrations, %v", name, len(ms), err)
		}
	}
	if _, err := dburl.ExportSQL("oracle"); err == nil || !strings.Contains(err.Error(), "postgres, mysql, sqlite") {
		t.Errorf("ExportSQL(oracle): %v; want the dialects listed", err)
	}
}

func TestWithSchema(t *testing.T) {
	got, err := dburl.WithSchema("postgres://app:secret@db/shop?sslmode=disable", "orders")
	if err != nil || got != "postgres://app:secret@db/shop?search_path=orders&sslmode=disable" {
		t.Errorf("WithSchema = %q, %v", got, err)
	}
	if _, err := dburl.WithSchema("mysql://app:secret@db/shop", "orders"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("WithSchema on MySQL: %v; want an error without the password", err)
	}
	if err := dburl.DropSchema(context.Background(), "sqlite:x.db"); err != nil {
		t.Errorf("DropSchema on SQLite: %v; want nothing done", err)
	}
}

func TestOpenSQLite(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "courier.db")
	raw := "sqlite://" + path
	_, err := dburl.Open(ctx, raw, dburl.Options{Flag: "--database-url"})
	if !errors.Is(err, dburl.ErrNoFile) || !strings.Contains(err.Error(), "no SQLite database at "+path+": check --database-url") {
		t.Fatalf("Open of a missing file: %v; want ErrNoFile naming the file and the flag", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open without Create left %s behind (%v)", path, err)
	}

	db, err := dburl.Open(ctx, raw, dburl.Options{Create: true})
	testenv.Must(t, err, "open with Create")
	defer db.Close()
	if db.Dialect() != "sqlite" || db.String() != path || !db.SerialWrites() || db.SQL() == nil {
		t.Fatalf("opened %s at %s (serial %v)", db.Dialect(), db, db.SerialWrites())
	}
	checkDriver(t, db)
	if n, err := db.Notifier(nil); n != nil || err != nil {
		t.Errorf("SQLite Notifier = %v, %v; want none", n, err)
	}
}

func TestOpenPostgres(t *testing.T) {
	ctx := context.Background()
	pg := testenv.Postgres(t, nil)
	schema := testenv.Name("t_dburl_")
	raw, err := dburl.WithSchema(pg.URL, schema)
	testenv.Must(t, err, "with schema")
	t.Cleanup(func() {
		if err := dburl.DropSchema(context.Background(), raw); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})

	db, err := dburl.Open(ctx, raw, dburl.Options{CreateSchema: true})
	testenv.Must(t, err, "open with CreateSchema")
	defer db.Close()
	if db.Dialect() != "postgres" || db.SerialWrites() {
		t.Fatalf("opened %s (serial %v)", db.Dialect(), db.SerialWrites())
	}
	checkDriver(t, db)
	var inSchema int
	q := db.Rebind(`SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = 'courier_outbox'`)
	testenv.Must(t, db.SQL().QueryRowContext(ctx, q, schema).Scan(&inSchema), "look up the outbox")
	if inSchema != 1 {
		t.Errorf("courier_outbox is not in schema %s", schema)
	}
	n, err := db.Notifier(nil)
	if err != nil || n == nil {
		t.Errorf("PostgreSQL Notifier = %v, %v; want LISTEN/NOTIFY", n, err)
	}

	u, err := url.Parse(pg.URL)
	testenv.Must(t, err, "parse URL")
	u.User, u.Host = url.UserPassword("nobody", "secret"), "127.0.0.1:1"
	_, err = dburl.Open(ctx, u.String(), dburl.Options{Flag: "--database-url", Env: "COURIER_DATABASE_URL"})
	if err == nil || !strings.Contains(err.Error(), "cannot reach the database at postgres://nobody:xxxxx@127.0.0.1:1") ||
		!strings.Contains(err.Error(), "check --database-url (COURIER_DATABASE_URL)") || strings.Contains(err.Error(), "secret") {
		t.Errorf("Open of a closed port: %v; want the redacted URL and the flag", err)
	}
}

func TestOpenMySQL(t *testing.T) {
	ctx := context.Background()
	my := testenv.MySQL(t, nil)
	cfg, err := gomysql.ParseDSN(my.DSN)
	testenv.Must(t, err, "parse DSN")
	u := url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/" + cfg.DBName, User: url.User(cfg.User)}
	if cfg.Passwd != "" {
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	}
	db, err := dburl.Open(ctx, u.String(), dburl.Options{})
	testenv.Must(t, err, "open")
	defer db.Close()
	if db.Dialect() != "mysql" || db.SerialWrites() {
		t.Fatalf("opened %s (serial %v)", db.Dialect(), db.SerialWrites())
	}
	checkDriver(t, db)
}

// checkDriver migrates db and writes and reads through its Driver.
func checkDriver(t *testing.T, db *dburl.DB) {
	t.Helper()
	ctx := context.Background()
	applied, err := db.Migrate(ctx)
	testenv.Must(t, err, "migrate")
	v, err := db.SchemaVersion(ctx)
	testenv.Must(t, err, "schema version")
	if len(applied) == 0 || v != applied[len(applied)-1] {
		t.Fatalf("applied %v, schema at version %d", applied, v)
	}
	testenv.Must(t, db.CheckSchema(ctx), "check schema")
	var n int
	err = db.InTx(ctx, func(tx *sql.Tx) error {
		return db.QueryRow(ctx, tx, `SELECT COUNT(*) FROM courier_outbox WHERE id > ?`, []any{&n}, 0)
	})
	testenv.Must(t, err, "count the outbox")
	if n != 0 {
		t.Fatalf("a new outbox holds %d rows", n)
	}
}

// Parse never fails to hide a password, wherever it sits and whatever it
// holds, in the URL it keeps for messages (Where) or in its error; and it
// never panics, whatever it is given.
func FuzzParse(f *testing.F) {
	for _, s := range [][3]string{
		{"postgres", "secret", "db:5432/shop"},
		{"mysql", "p#ss", "db:3306/shop"},
		{"mysql", "p/ss?w", "db/shop?timeout=5s"},
		{"postgres", "p?ss", "db/shop?sslmode=disable"},
		{"postgresql", "a@b", "db/shop"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, scheme, password, rest string) {
		_, _ = dburl.Parse(scheme+password+rest, dburl.Options{BarePaths: true})
		if len(password) < 4 || strings.Contains(password, "://") || strings.Trim(password, "x") == "" ||
			strings.Contains(rest, "@") || strings.ContainsAny(scheme, "@:/?#") || !plain(scheme+password+rest) {
			return // messages quote with %q: keep to what it leaves as it is
		}
		forms := []func(pw string) string{func(pw string) string { return scheme + "://app:" + pw + "@" + rest }}
		if !strings.ContainsAny(rest, "?#") { // else the parameter is part of another's value, or of a fragment
			forms = append(forms, func(pw string) string { return scheme + "://app@" + rest + "?password=" + url.QueryEscape(pw) })
		}
		for _, form := range forms {
			raw, skeleton := form(password), form("xxxxx")
			u, err := dburl.Parse(raw, dburl.Options{Flag: "--database-url"})
			shown := u.Where
			if err != nil {
				shown = err.Error()
			}
			if strings.Count(shown, password) > strings.Count(skeleton, password) {
				t.Fatalf("Parse(%q) shows the password %q: %q", raw, password, shown)
			}
		}
	})
}

// plain reports whether s is printable ASCII without quotes or backslashes.
func plain(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e || r == '"' || r == '\\' })
}
