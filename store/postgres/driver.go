package postgres

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// Driver is PostgreSQL through pgx: a store.Driver[pgx.Tx], the one value
// that hands out every store of the database (see store.Driver for each
// method). It is the way to build them: the stores it hands out all take
// their time from its clock ([Driver.WithClock]; the server's now() by
// default). [SQLDriver] is the same for *sql.Tx transactions.
//
//   - Migrate applies the migrations the database lacks, each in order, all
//     in one transaction, and returns the versions it applied (none when
//     the schema is current). Concurrent calls wait for one another (a
//     transaction-scoped advisory lock). It returns an error wrapping
//     [store.ErrSchemaNewer] when the database was migrated by a newer
//     Courier. Tables are created in the first schema of the connection's
//     search_path, which must exist.
//   - RelayStore checks the schema and returns the relay's store (see the
//     package documentation, Claiming); its tables are resolved through the
//     pool's search_path.
//   - Notifier returns a [Notifier] on the pool's connection string; give
//     a relay behind PgBouncer in transaction mode its own, direct one
//     ([NewNotifier]). PollInterval returns [DefaultPollInterval].
//   - Operations' TryLock is a session advisory lock held on a pool
//     connection of its own; its Trim deletes batches by ctid (see
//     docs/operations.md).
//   - SerialWrites reports false; Rebind numbers ? placeholders ($1, $2,
//     …).
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

// Inserter returns [Pgx], scheduling messages on the driver's clock.
func (d Driver) Inserter() store.Inserter[pgx.Tx] { return pgxInserter{pgxScheduler{d.clock}} }

// Inbox returns the inbox for handlers that work in pgx transactions on the
// pool; processed_at is the driver's clock.
func (d Driver) Inbox() store.Inbox[pgx.Tx] { return pgxInbox{d.pool, d.clock} }

// Idempotency returns the Idempotency-Key records for handlers that work in
// pgx transactions on the pool; lock and expiry times are the driver's
// clock.
func (d Driver) Idempotency() store.Idempotency[pgx.Tx] { return pgxIdem{d.pool, d.clock} }

// Sagas returns the saga store for pgx transactions on the pool.
func (d Driver) Sagas() store.Sagas[pgx.Tx] { return pgxSagas{d.pool} }

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

// Inserter returns [DatabaseSQL], scheduling messages on the driver's
// clock.
func (d SQLDriver) Inserter() store.Inserter[*sql.Tx] { return sqlInserter{sqlScheduler{d.clock}} }

// Inbox returns the inbox for handlers that work in database/sql
// transactions on the driver's *sql.DB; processed_at is the driver's clock.
func (d SQLDriver) Inbox() store.Inbox[*sql.Tx] { return sqlInbox{d.db, d.clock} }

// Idempotency returns the Idempotency-Key records for handlers that work in
// database/sql transactions on the driver's *sql.DB; lock and expiry times
// are the driver's clock.
func (d SQLDriver) Idempotency() store.Idempotency[*sql.Tx] { return sqlIdem{d.db, d.clock} }

// Sagas returns the saga store for database/sql transactions on the
// driver's *sql.DB.
func (d SQLDriver) Sagas() store.Sagas[*sql.Tx] { return sqlSagas{d.db} }

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
