package store

import (
	"context"
	"log/slog"
	"time"

	"github.com/courier-go/courier"
)

// Database is one database as a dialect sees it: every store it provides
// that does not take the caller's transaction, its schema and its defaults.
// Wiring code (the CLI, a daemon, tests) asks a Database for what it needs
// instead of switching over dialect names. A Driver is a Database.
type Database interface {
	// Dialect names the dialect: "postgres", "mysql" or "sqlite".
	Dialect() string
	// Ping checks that the database answers.
	Ping(ctx context.Context) error

	// Migrate applies the migrations the database lacks and returns the
	// versions it applied.
	Migrate(ctx context.Context) ([]int, error)
	// SchemaVersion returns the highest migration applied, 0 when Courier's
	// schema is absent.
	SchemaVersion(ctx context.Context) (int, error)
	// CheckSchema returns ErrSchemaOutdated or ErrSchemaNewer (wrapped, with
	// the fix) unless the schema is the one this binary expects.
	CheckSchema(ctx context.Context) error
	// Migrations returns the dialect's migrations, oldest first.
	Migrations() []Migration
	// ExportSQL returns the migrations as scripts for external migration
	// tools, each recording its version in Courier's version table.
	ExportSQL() []Migration

	// RelayStore returns the relay's store; it checks the schema first.
	RelayStore(ctx context.Context, cfg RelayConfig) (RelayStore, error)
	// Notifier returns the wake-ups a relay in another process than the
	// writers can receive, or nil when the dialect has none (the relay then
	// polls every PollInterval).
	Notifier(log *slog.Logger) (Notifier, error)
	// PollInterval is the relay's default polling interval on this
	// dialect: long where Notifier delivers wake-ups, short where polling
	// is all there is.
	PollInterval() time.Duration
	// ConsumerStore returns the consumer runtime's store of parked
	// deliveries, failed runs and inbox retention.
	ConsumerStore() ConsumerStore
	// Admin returns the operators' view of the outbox and the dead letters.
	Admin() Admin
	// Operations returns the operators' maintenance view: status,
	// reconciliation, retention and the maintenance lock.
	Operations() Operations
	// ReplayRuns returns the record of guarded replays of dead letters.
	ReplayRuns() ReplayRuns
	// Delivery returns what watches delivery from end to end: the state
	// of each continuous audit and the consumers' latency samples.
	Delivery() Delivery
	// SerialWrites reports that the database runs one write transaction at
	// a time (SQLite): a writer waits until the one writing has ended.
	SerialWrites() bool
	// Rebind rewrites a statement written with ? placeholders into the
	// dialect's own ($1, $2, … on PostgreSQL), as Driver.Exec does, for
	// statements run outside the Driver (on a *sql.DB, say). It does not
	// look inside string literals: the statement must not hold a literal ?.
	Rebind(query string) string
}

// Driver is a Database together with the stores that work in the caller's
// transactions, of type TTx (pgx.Tx, *sql.Tx, …). A dialect offers one
// Driver per transaction type it supports.
type Driver[TTx any] interface {
	Database

	// Inserter writes outbox messages in the caller's transaction.
	Inserter() Inserter[TTx]
	// Inbox records consumed message ids in the handler's transaction.
	Inbox() Inbox[TTx]
	// Idempotency keeps Idempotency-Key records.
	Idempotency() Idempotency[TTx]
	// Sagas keeps saga instances and their history.
	Sagas() Sagas[TTx]

	// InTx runs fn in a new transaction, commits it when fn returns nil and
	// rolls it back (returning fn's error) otherwise.
	InTx(ctx context.Context, fn func(tx TTx) error) error
	// Exec runs one statement in tx and returns the rows it affected. The
	// statement is written with ? placeholders, which Exec rewrites into
	// the driver's own.
	Exec(ctx context.Context, tx TTx, query string, args ...any) (int64, error)
	// QueryRow runs a query written as for Exec in tx and scans its only
	// row into dest.
	QueryRow(ctx context.Context, tx TTx, query string, dest []any, args ...any) error
}

// RelayConfig configures the RelayStore a Database hands out.
type RelayConfig struct {
	// KeepPublished moves published rows to the published table instead
	// of deleting them.
	KeepPublished bool
}

// Clock is the time source of the store operations that compare with "now"
// (lease ends, retry times, Idempotency-Key locks and expiries) and of the
// times the stores record (inbox markers, parked deliveries, replay
// requests and failed replays, dead letters). It is courier.Clock, with one
// difference in meaning: a nil Clock is the database's own clock (the
// server's on PostgreSQL and MySQL, the process's on SQLite), which is what
// production wants: relays on several hosts then share one clock. Tests set
// a Clock they control and move time forward instead of sleeping until a
// deadline passes: each dialect's Driver has a WithClock that returns a
// Driver whose stores all use it.
type Clock = courier.Clock
