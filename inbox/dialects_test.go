package inbox_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
	"github.com/courier-go/courier/store/storetest"
)

// dialect is a database the tests run on, with the transaction type TTx its
// handlers work in.
type dialect[TTx any] struct {
	name string
	// open returns a fresh database for the test, migrated, with an effects
	// table.
	open func(t *testing.T) *database[TTx]
	// connect reaches a database that open created, from its dsn (in a
	// child process).
	connect func(t testing.TB, dsn string) *database[TTx]
}

// database is one test's database.
type database[TTx any] struct {
	// dsn is how another process reaches it.
	dsn string
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

// dialectNamed returns the dialect a child process was told to use.
func dialectNamed(name string) (pg dialect[pgx.Tx], std dialect[*sql.Tx]) {
	switch name {
	case "postgres":
		pg = postgresDialect()
	case "sqlite":
		std = sqliteDialect()
	case "mysql":
		std = mysqlDialect()
	}
	return pg, std
}

func postgresDialect() dialect[pgx.Tx] {
	on := func(t testing.TB, url string, pool *pgxpool.Pool) *database[pgx.Tx] {
		db := stdlib.OpenDBFromPool(pool)
		t.Cleanup(func() { db.Close() })
		return &database[pgx.Tx]{
			dsn: url, sql: db, rebind: storetest.DollarPlaceholders,
			inbox: postgres.PgxInbox(pool), cs: postgres.ConsumerStore(pool), admin: postgres.Admin(pool), outbox: postgres.Pgx(),
			insertEffect: func(ctx context.Context, tx pgx.Tx, consumer string, msg courier.Message) error {
				_, err := tx.Exec(ctx, "INSERT INTO effects (message_id, consumer, note) VALUES ($1, $2, $3)", msg.ID, consumer, string(msg.Payload))
				return err
			},
		}
	}
	return dialect[pgx.Tx]{
		name: "postgres",
		open: func(t *testing.T) *database[pgx.Tx] {
			pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
			_, err := pg.Pool.Exec(context.Background(), `CREATE TABLE effects (message_id uuid NOT NULL, consumer text NOT NULL, note text)`)
			testenv.Must(t, err, "effects table")
			return on(t, pg.URL, pg.Pool)
		},
		connect: func(t testing.TB, url string) *database[pgx.Tx] {
			pool, err := pgxpool.New(context.Background(), url)
			testenv.Must(t, err, "connect")
			t.Cleanup(pool.Close)
			return on(t, url, pool)
		},
	}
}

// stdDatabase is a database reached through database/sql alone.
func stdDatabase(dsn string, db *sql.DB, inbox store.Inbox[*sql.Tx], cs store.ConsumerStore, admin store.Admin, ins store.Inserter[*sql.Tx]) *database[*sql.Tx] {
	return &database[*sql.Tx]{
		dsn: dsn, sql: db, inbox: inbox, cs: cs, admin: admin, outbox: ins,
		insertEffect: func(ctx context.Context, tx *sql.Tx, consumer string, msg courier.Message) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO effects (message_id, consumer, note) VALUES (?, ?, ?)", msg.ID.String(), consumer, string(msg.Payload))
			return err
		},
	}
}

func sqliteDialect() dialect[*sql.Tx] {
	connect := func(t testing.TB, path string) *database[*sql.Tx] {
		db, err := sqlite.Open(path)
		testenv.Must(t, err, "open")
		t.Cleanup(func() { db.Close() })
		return stdDatabase(path, db, sqlite.SQLInbox(db), sqlite.ConsumerStore(db), sqlite.Admin(db), sqlite.DatabaseSQL())
	}
	return dialect[*sql.Tx]{
		name: "sqlite",
		open: func(t *testing.T) *database[*sql.Tx] {
			db := connect(t, filepath.Join(t.TempDir(), "inbox.db"))
			ctx := context.Background()
			_, err := sqlite.Migrate(ctx, db.sql)
			testenv.Must(t, err, "migrate")
			_, err = db.sql.ExecContext(ctx, `CREATE TABLE effects (message_id TEXT NOT NULL, consumer TEXT NOT NULL, note TEXT)`)
			testenv.Must(t, err, "effects table")
			return db
		},
		connect: connect,
	}
}

func mysqlDialect() dialect[*sql.Tx] {
	on := func(dsn string, db *sql.DB) *database[*sql.Tx] {
		return stdDatabase(dsn, db, mysql.SQLInbox(db), mysql.ConsumerStore(db), mysql.Admin(db), mysql.DatabaseSQL())
	}
	return dialect[*sql.Tx]{
		name: "mysql",
		open: func(t *testing.T) *database[*sql.Tx] {
			my := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
			_, err := my.DB.ExecContext(context.Background(),
				`CREATE TABLE effects (message_id CHAR(36) NOT NULL, consumer VARCHAR(255) NOT NULL, note TEXT) DEFAULT CHARSET=utf8mb4`)
			testenv.Must(t, err, "effects table")
			return on(my.DSN, my.DB)
		},
		connect: func(t testing.TB, dsn string) *database[*sql.Tx] {
			db, err := sql.Open("mysql", dsn)
			testenv.Must(t, err, "open")
			t.Cleanup(func() { db.Close() })
			return on(dsn, db)
		},
	}
}

// count runs a counting query written with ? placeholders.
func (db *database[TTx]) count(t testing.TB, query string, args ...any) (n int) {
	t.Helper()
	if db.rebind != nil {
		query = db.rebind(query)
	}
	testenv.Must(t, db.sql.QueryRowContext(context.Background(), query, args...).Scan(&n), query)
	return n
}
