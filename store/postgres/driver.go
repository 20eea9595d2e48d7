package postgres

import (
	"context"
	"database/sql"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// DefaultPollInterval is the relay's polling interval on PostgreSQL, where
// LISTEN/NOTIFY wakes it as soon as writers commit: polling only covers a
// lost connection.
const DefaultPollInterval = time.Second

// database is what both drivers share: everything that goes through the
// pool, and the clock its stores compare with (nil: the server's now()).
type database struct {
	pool  *pgxpool.Pool
	clock store.Clock
}

func (database) Dialect() string                              { return "postgres" }
func (d database) Ping(ctx context.Context) error             { return d.pool.Ping(ctx) }
func (d database) Migrate(ctx context.Context) ([]int, error) { return Migrate(ctx, d.pool) }
func (d database) SchemaVersion(ctx context.Context) (int, error) {
	return SchemaVersion(ctx, d.pool)
}
func (d database) CheckSchema(ctx context.Context) error { return CheckSchema(ctx, d.pool) }
func (database) Migrations() []store.Migration           { return Migrations() }
func (database) ExportSQL() []store.Migration            { return ExportSQL() }
func (d database) RelayStore(ctx context.Context, cfg store.RelayConfig) (store.RelayStore, error) {
	return NewStore(ctx, d.pool, StoreConfig{KeepPublished: cfg.KeepPublished, Clock: d.clock})
}
func (d database) Notifier(log *slog.Logger) (store.Notifier, error) {
	return NewNotifier(d.pool.Config().ConnString(), log)
}
func (database) PollInterval() time.Duration          { return DefaultPollInterval }
func (d database) ConsumerStore() store.ConsumerStore { return ConsumerStore(d.pool) }
func (d database) Admin() store.Admin                 { return admin(d) }
func (database) SerialWrites() bool                   { return false }
func (database) Rebind(query string) string           { return sqltx.Dollar(query) }

// Driver is PostgreSQL through pgx: a store.Driver whose stores work in
// pgx.Tx transactions.
type Driver struct{ database }

var _ store.Driver[pgx.Tx] = Driver{}

// NewDriver returns the pgx Driver on pool. The pool stays the caller's to
// close.
func NewDriver(pool *pgxpool.Pool) Driver { return Driver{database{pool: pool}} }

// WithClock returns a copy of d whose stores take the time they compare
// with from c instead of the server's clock (see [store.Clock]).
func (d Driver) WithClock(c store.Clock) Driver {
	d.clock = c
	return d
}

// Inserter returns [Pgx].
func (Driver) Inserter() store.Inserter[pgx.Tx] { return Pgx() }

// Inbox returns [PgxInbox] on the pool, with the driver's clock.
func (d Driver) Inbox() store.Inbox[pgx.Tx] { return pgxInbox{d.pool, d.clock} }

// Idempotency returns [PgxIdempotency] on the pool, with the driver's clock.
func (d Driver) Idempotency() store.Idempotency[pgx.Tx] { return pgxIdem{d.pool, d.clock} }

// Sagas returns [PgxSagas] on the pool.
func (d Driver) Sagas() store.Sagas[pgx.Tx] { return PgxSagas(d.pool) }

// InTx runs fn in a transaction of the pool.
func (d Driver) InTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, d.pool, fn)
}

// Exec runs query, written with ? placeholders, in tx.
func (Driver) Exec(ctx context.Context, tx pgx.Tx, query string, args ...any) (int64, error) {
	tag, err := tx.Exec(ctx, sqltx.Dollar(query), args...)
	return tag.RowsAffected(), err
}

// QueryRow runs query, written with ? placeholders, in tx and scans its row
// into dest.
func (Driver) QueryRow(ctx context.Context, tx pgx.Tx, query string, dest []any, args ...any) error {
	return tx.QueryRow(ctx, sqltx.Dollar(query), args...).Scan(dest...)
}

// SQLDriver is PostgreSQL through database/sql (pgx's stdlib driver): a
// store.Driver whose stores work in *sql.Tx transactions. The relay's
// store and the other transaction-free stores still use the pgx pool.
type SQLDriver struct {
	database
	db *sql.DB
}

var _ store.Driver[*sql.Tx] = SQLDriver{}

// NewSQLDriver returns the database/sql Driver on pool: its transactions
// are *sql.Tx on a *sql.DB that shares the pool's connections. The pool
// stays the caller's to close.
func NewSQLDriver(pool *pgxpool.Pool) SQLDriver {
	return SQLDriver{database{pool: pool}, stdlib.OpenDBFromPool(pool)}
}

// WithClock returns a copy of d whose stores take the time they compare
// with from c instead of the server's clock (see [store.Clock]). The copy
// shares d's *sql.DB.
func (d SQLDriver) WithClock(c store.Clock) SQLDriver {
	d.clock = c
	return d
}

// DB returns the *sql.DB the driver's transactions run on.
func (d SQLDriver) DB() *sql.DB { return d.db }

// Inserter returns [DatabaseSQL].
func (SQLDriver) Inserter() store.Inserter[*sql.Tx] { return DatabaseSQL() }

// Inbox returns [SQLInbox] on the driver's *sql.DB, with its clock.
func (d SQLDriver) Inbox() store.Inbox[*sql.Tx] { return sqlInbox{d.db, d.clock} }

// Idempotency returns [SQLIdempotency] on the driver's *sql.DB, with its
// clock.
func (d SQLDriver) Idempotency() store.Idempotency[*sql.Tx] { return sqlIdem{d.db, d.clock} }

// Sagas returns [SQLSagas] on the driver's *sql.DB.
func (d SQLDriver) Sagas() store.Sagas[*sql.Tx] { return SQLSagas(d.db) }

// InTx runs fn in a transaction of the driver's *sql.DB.
func (d SQLDriver) InTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return sqltx.InTx(ctx, d.db, nil, "postgres: ", fn)
}

// Exec runs query, written with ? placeholders, in tx.
func (SQLDriver) Exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (int64, error) {
	return sqltx.Exec(ctx, tx, sqltx.Dollar(query), args...)
}

// QueryRow runs query, written with ? placeholders, in tx and scans its row
// into dest.
func (SQLDriver) QueryRow(ctx context.Context, tx *sql.Tx, query string, dest []any, args ...any) error {
	return sqltx.QueryRow(ctx, tx, sqltx.Dollar(query), dest, args...)
}
