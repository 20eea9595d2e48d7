package idempotency_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// dialect is a database the tests run on, with the transaction type TTx its
// handlers work in.
type dialect[TTx any] struct {
	name string
	// openAt returns a fresh database for the test, migrated, with an
	// orders table, whose key store compares with clock (nil: the
	// database's clock).
	openAt func(t *testing.T, clock store.Clock) *database[TTx]
}

// open returns a fresh database whose key store uses the database's clock.
func (d dialect[TTx]) open(t *testing.T) *database[TTx] { return d.openAt(t, nil) }

// database is one test's database.
type database[TTx any] struct {
	// sql is for assertions.
	sql    *sql.DB
	keys   store.Idempotency[TTx]
	outbox store.Inserter[TTx]
	// insertOrder inserts an order in tx and returns its id.
	insertOrder func(ctx context.Context, tx TTx, item string) (int64, error)
	// exec runs a statement in tx.
	exec func(ctx context.Context, tx TTx, query string) error
}

// onEachDialect runs a test on PostgreSQL (with pgx.Tx), SQLite and MySQL
// (with *sql.Tx), as parallel subtests; each skips when its database is not
// configured. Pass the generic test body twice: Go instantiates it once per
// transaction type.
func onEachDialect(t *testing.T, pg func(*testing.T, dialect[pgx.Tx]), std func(*testing.T, dialect[*sql.Tx])) {
	t.Run("postgres", func(t *testing.T) { t.Parallel(); pg(t, postgresDialect()) })
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); std(t, sqliteDialect()) })
	t.Run("mysql", func(t *testing.T) { t.Parallel(); std(t, mysqlDialect()) })
}

func postgresDialect() dialect[pgx.Tx] {
	return dialect[pgx.Tx]{
		name: "postgres",
		openAt: func(t *testing.T, clock store.Clock) *database[pgx.Tx] {
			pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
			_, err := pg.Pool.Exec(context.Background(), `CREATE TABLE orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, item text NOT NULL)`)
			testenv.Must(t, err, "orders table")
			db := stdlib.OpenDBFromPool(pg.Pool)
			t.Cleanup(func() { db.Close() })
			return &database[pgx.Tx]{
				sql: db, keys: postgres.NewDriver(pg.Pool).WithClock(clock).Idempotency(), outbox: postgres.Pgx(),
				insertOrder: func(ctx context.Context, tx pgx.Tx, item string) (id int64, err error) {
					err = tx.QueryRow(ctx, "INSERT INTO orders (item) VALUES ($1) RETURNING id", item).Scan(&id)
					return id, err
				},
				exec: func(ctx context.Context, tx pgx.Tx, query string) error {
					_, err := tx.Exec(ctx, query)
					return err
				},
			}
		},
	}
}

// insertOrder inserts an order through database/sql, where RETURNING is not
// portable.
func insertOrder(ctx context.Context, tx *sql.Tx, item string) (int64, error) {
	res, err := tx.ExecContext(ctx, "INSERT INTO orders (item) VALUES (?)", item)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// execSQL runs a statement in a database/sql transaction.
func execSQL(ctx context.Context, tx *sql.Tx, query string) error {
	_, err := tx.ExecContext(ctx, query)
	return err
}

func sqliteDialect() dialect[*sql.Tx] {
	return dialect[*sql.Tx]{
		name: "sqlite",
		openAt: func(t *testing.T, clock store.Clock) *database[*sql.Tx] {
			db, err := sqlite.Open(filepath.Join(t.TempDir(), "shop.db"))
			testenv.Must(t, err, "open")
			t.Cleanup(func() { db.Close() })
			ctx := context.Background()
			_, err = sqlite.Migrate(ctx, db)
			testenv.Must(t, err, "migrate")
			_, err = db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, item TEXT NOT NULL)`)
			testenv.Must(t, err, "orders table")
			keys := sqlite.NewDriver(db).WithClock(clock).Idempotency()
			return &database[*sql.Tx]{sql: db, keys: keys, outbox: sqlite.DatabaseSQL(), insertOrder: insertOrder, exec: execSQL}
		},
	}
}

func mysqlDialect() dialect[*sql.Tx] {
	return dialect[*sql.Tx]{
		name: "mysql",
		openAt: func(t *testing.T, clock store.Clock) *database[*sql.Tx] {
			my := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
			_, err := my.DB.ExecContext(context.Background(),
				`CREATE TABLE orders (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, item TEXT NOT NULL) DEFAULT CHARSET=utf8mb4`)
			testenv.Must(t, err, "orders table")
			keys := mysql.NewDriver(my.DB).WithClock(clock).Idempotency()
			return &database[*sql.Tx]{sql: my.DB, keys: keys, outbox: mysql.DatabaseSQL(), insertOrder: insertOrder, exec: execSQL}
		},
	}
}

// count returns the number of rows of table.
func (db *database[TTx]) count(t testing.TB, table string) (n int) {
	t.Helper()
	testenv.Must(t, db.sql.QueryRowContext(context.Background(), "SELECT count(*) FROM "+table).Scan(&n), "count "+table)
	return n
}
