package inbox_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
)

// dialect is a database the tests run on, with the transaction type TTx its
// handlers work in.
type dialect[TTx any] struct {
	name string
	// open returns a fresh database for the test, migrated, with an effects
	// table, whose seq numbers the effects in the order inserted.
	open func(t *testing.T) *database[TTx]
	// connect reaches a database that open created, from its URL (in a
	// child process).
	connect func(t testing.TB, url string) *database[TTx]
}

// database is one test's database.
type database[TTx any] struct {
	// url is how another process reaches it.
	url string
	// driver gives the stores below.
	driver store.Driver[TTx]
	// sql is for assertions, written with ? placeholders and passed through
	// rebind.
	sql    *sql.DB
	rebind func(string) string
	inbox  store.Inbox[TTx]
	cs     store.ConsumerStore
	admin  store.Admin
	outbox store.Inserter[TTx]
	// insertEffect records in tx that consumer applied msg.
	insertEffect func(ctx context.Context, tx TTx, consumer string, msg courier.Message) error
}

// onEachDialect runs a test on PostgreSQL (with pgx.Tx), SQLite and MySQL
// (with *sql.Tx), as parallel subtests; each skips when its database is not
// configured. Pass the generic test body twice: Go instantiates it once per
// transaction type.
func onEachDialect(t *testing.T, pg func(*testing.T, dialect[pgx.Tx]), std func(*testing.T, dialect[*sql.Tx])) {
	t.Run("postgres", func(t *testing.T) { pg(t, postgresDialect()) })
	t.Run("sqlite", func(t *testing.T) { std(t, sqliteDialect()) })
	t.Run("mysql", func(t *testing.T) { std(t, mysqlDialect()) })
}

// txType names the transaction type TTx, which tells a child process
// which dialect value to connect with (see childDialect).
func txType[TTx any]() string { return reflect.TypeFor[TTx]().String() }

// childDialect returns the dialect a child process connects with, given
// the transaction type its parent's handlers ran in: pgx.Tx (PostgreSQL
// through pgx) or *sql.Tx (any database URL, through store/dburl).
func childDialect(tx string) (pg dialect[pgx.Tx], std dialect[*sql.Tx]) {
	if tx == txType[pgx.Tx]() {
		return postgresDialect(), std
	}
	return pg, dialect[*sql.Tx]{connect: connectURL}
}

// on is the database at url, its stores taken from d; sqlDB runs the
// assertions.
func on[TTx any](url string, sqlDB *sql.DB, d store.Driver[TTx]) *database[TTx] {
	return &database[TTx]{
		url: url, driver: d, sql: sqlDB, rebind: d.Rebind,
		inbox: d.Inbox(), cs: d.ConsumerStore(), admin: d.Admin(), outbox: d.Inserter(),
		insertEffect: func(ctx context.Context, tx TTx, consumer string, msg courier.Message) error {
			_, err := d.Exec(ctx, tx, "INSERT INTO effects (message_id, consumer, note) VALUES (?, ?, ?)", msg.ID.String(), consumer, string(msg.Payload))
			return err
		},
	}
}

func postgresDialect() dialect[pgx.Tx] {
	onPool := func(t testing.TB, url string, pool *pgxpool.Pool) *database[pgx.Tx] {
		db := stdlib.OpenDBFromPool(pool)
		t.Cleanup(func() { db.Close() })
		return on(url, db, store.Driver[pgx.Tx](postgres.NewDriver(pool)))
	}
	return dialect[pgx.Tx]{
		name: "postgres",
		open: func(t *testing.T) *database[pgx.Tx] {
			pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
			_, err := pg.Pool.Exec(context.Background(), `CREATE TABLE effects (seq bigserial PRIMARY KEY, message_id uuid NOT NULL, consumer text NOT NULL, note text)`)
			testenv.Must(t, err, "effects table")
			return onPool(t, pg.URL, pg.Pool)
		},
		connect: func(t testing.TB, url string) *database[pgx.Tx] {
			pool, err := pgxpool.New(context.Background(), url)
			testenv.Must(t, err, "connect")
			t.Cleanup(pool.Close)
			return onPool(t, url, pool)
		},
	}
}

// connectURL opens the database at url through store/dburl, creating a
// SQLite file that does not exist.
func connectURL(t testing.TB, url string) *database[*sql.Tx] {
	db, err := dburl.Open(context.Background(), url, dburl.Options{Create: true})
	testenv.Must(t, err, "open")
	t.Cleanup(db.Close)
	return on(url, db.SQL(), store.Driver[*sql.Tx](db))
}

func sqliteDialect() dialect[*sql.Tx] {
	return dialect[*sql.Tx]{
		name: "sqlite",
		open: func(t *testing.T) *database[*sql.Tx] {
			db := connectURL(t, "sqlite://"+filepath.Join(t.TempDir(), "inbox.db"))
			ctx := context.Background()
			_, err := db.driver.Migrate(ctx)
			testenv.Must(t, err, "migrate")
			_, err = db.sql.ExecContext(ctx, `CREATE TABLE effects (seq INTEGER PRIMARY KEY, message_id TEXT NOT NULL, consumer TEXT NOT NULL, note TEXT)`)
			testenv.Must(t, err, "effects table")
			return db
		},
		connect: connectURL,
	}
}

func mysqlDialect() dialect[*sql.Tx] {
	return dialect[*sql.Tx]{
		name: "mysql",
		open: func(t *testing.T) *database[*sql.Tx] {
			my := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
			_, err := my.DB.ExecContext(context.Background(),
				`CREATE TABLE effects (seq BIGINT AUTO_INCREMENT PRIMARY KEY, message_id CHAR(36) NOT NULL, consumer VARCHAR(255) NOT NULL, note TEXT) DEFAULT CHARSET=utf8mb4`)
			testenv.Must(t, err, "effects table")
			return on(my.URL, my.DB, store.Driver[*sql.Tx](mysql.NewDriver(my.DB)))
		},
		connect: connectURL,
	}
}

// count runs a counting query written with ? placeholders.
func (db *database[TTx]) count(t testing.TB, query string, args ...any) (n int) {
	t.Helper()
	query = db.rebind(query)
	testenv.Must(t, db.sql.QueryRowContext(context.Background(), query, args...).Scan(&n), query)
	return n
}
