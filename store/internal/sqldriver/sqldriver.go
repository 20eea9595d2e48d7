package sqldriver

import (
	"context"
	"database/sql"
	"log/slog"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/schema"
	"github.com/courier-go/courier/store/internal/sqlsagas"
	"github.com/courier-go/courier/store/internal/sqlstore"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// Dialect is what a dialect tells its Driver.
type Dialect struct {
	// Name is the dialect's name, "mysql" or "sqlite".
	Name string
	// PollInterval is the relay's default polling interval on the dialect.
	PollInterval time.Duration
	// SerialWrites reports that the database runs one write transaction at
	// a time. The transactions of each inbox then take turns in the
	// process (see [sqltx.Queue]).
	SerialWrites bool
	// Schema is the dialect's migrations.
	Schema schema.Set
	// Migrate applies the migrations db lacks and returns the versions it
	// applied.
	Migrate func(ctx context.Context, db *sql.DB) ([]int, error)
	// SchemaVersion returns the highest migration applied to the database
	// behind q, 0 when Courier's schema is absent.
	SchemaVersion func(ctx context.Context, q sqltx.Querier) (int, error)
	// Inserter returns the inserter that writes outbox messages in the
	// caller's transaction, and schedules them on clock (nil: the
	// database's).
	Inserter func(clock store.Clock) store.Inserter[*sql.Tx]
	// Stores describes db to the stores the dialects share (package
	// sqlstore), with clock's time instead of the database's when clock is
	// not nil.
	Stores func(db *sql.DB, clock store.Clock) sqlstore.Dialect
	// RelayStore returns the relay's store on db at clock, once the Driver
	// has checked the schema.
	RelayStore func(ctx context.Context, db *sql.DB, cfg store.RelayConfig, clock store.Clock) (store.RelayStore, error)
	// Idempotency returns the Idempotency-Key records on db at clock.
	Idempotency func(db *sql.DB, clock store.Clock) store.Idempotency[*sql.Tx]
	// Operations returns the operators' maintenance view of db at clock.
	Operations func(db *sql.DB, clock store.Clock) store.Operations
	// ReplayRuns returns the record of guarded replays on db at clock.
	ReplayRuns func(db *sql.DB, clock store.Clock) store.ReplayRuns
	// Delivery returns the audit watches and latency samples on db at
	// clock.
	Delivery func(db *sql.DB, clock store.Clock) store.Delivery
}

// Driver is a store.Driver[*sql.Tx] on one database of a Dialect.
type Driver struct {
	db      *sql.DB
	dialect *Dialect
	clock   store.Clock // nil: the database's
}

var _ store.Driver[*sql.Tx] = Driver{}

// New returns the Driver of dialect on db, on the database's clock.
func New(db *sql.DB, dialect *Dialect) Driver { return Driver{db: db, dialect: dialect} }

// WithClock returns a copy of d whose stores take the time they compare
// with from c (see [store.Clock]).
func (d Driver) WithClock(c store.Clock) Driver {
	d.clock = c
	return d
}

// Dialect names the dialect.
func (d Driver) Dialect() string { return d.dialect.Name }

// Ping checks that the database answers.
func (d Driver) Ping(ctx context.Context) error { return d.db.PingContext(ctx) }

// Migrate applies the migrations the database lacks.
func (d Driver) Migrate(ctx context.Context) ([]int, error) { return d.dialect.Migrate(ctx, d.db) }

// SchemaVersion returns the highest migration applied, 0 when Courier's
// schema is absent.
func (d Driver) SchemaVersion(ctx context.Context) (int, error) {
	return d.dialect.SchemaVersion(ctx, d.db)
}

// CheckSchema returns nil when the schema is the one this binary knows,
// else the error of [store.CheckVersion].
func (d Driver) CheckSchema(ctx context.Context) error {
	return d.dialect.Schema.Check(d.SchemaVersion(ctx))
}

// Migrations returns the dialect's migrations, oldest first.
func (d Driver) Migrations() []store.Migration { return d.dialect.Schema.Load() }

// ExportSQL returns the migrations as scripts for external migration tools.
func (d Driver) ExportSQL() []store.Migration { return d.dialect.Schema.Export() }

// RelayStore checks that the database's schema is the one this binary
// knows and returns the relay's store, on the driver's clock.
func (d Driver) RelayStore(ctx context.Context, cfg store.RelayConfig) (store.RelayStore, error) {
	if err := d.CheckSchema(ctx); err != nil {
		return nil, err
	}
	return d.dialect.RelayStore(ctx, d.db, cfg, d.clock)
}

// Notifier returns nil: neither dialect has wake-ups across processes.
func (Driver) Notifier(*slog.Logger) (store.Notifier, error) { return nil, nil }

// PollInterval returns the dialect's polling interval.
func (d Driver) PollInterval() time.Duration { return d.dialect.PollInterval }

// ConsumerStore returns the consumer runtime's store, on the driver's
// clock.
func (d Driver) ConsumerStore() store.ConsumerStore { return d.stores().Consumers() }

// Admin returns the operators' view, on the driver's clock.
func (d Driver) Admin() store.Admin { return d.stores().Admin() }

// Operations returns the operators' maintenance view, on the driver's
// clock.
func (d Driver) Operations() store.Operations { return d.dialect.Operations(d.db, d.clock) }

// ReplayRuns returns the record of guarded replays, on the driver's clock.
func (d Driver) ReplayRuns() store.ReplayRuns { return d.dialect.ReplayRuns(d.db, d.clock) }

// Delivery returns the audit watches and latency samples, on the driver's
// clock.
func (d Driver) Delivery() store.Delivery { return d.dialect.Delivery(d.db, d.clock) }

// SerialWrites reports whether the database runs one write transaction at
// a time.
func (d Driver) SerialWrites() bool { return d.dialect.SerialWrites }

// Rebind returns query as it is: both dialects take ? placeholders.
func (Driver) Rebind(query string) string { return query }

// Inserter returns the dialect's outbox inserter, which schedules messages
// on the driver's clock.
func (d Driver) Inserter() store.Inserter[*sql.Tx] { return d.dialect.Inserter(d.clock) }

// Inbox returns the inbox, on the driver's clock. On a database with one
// writer its transactions take turns in the process.
func (d Driver) Inbox() store.Inbox[*sql.Tx] {
	s := d.stores()
	if d.dialect.SerialWrites {
		s = s.Queued(sqltx.NewQueue())
	}
	return s.Inbox()
}

// Idempotency returns the Idempotency-Key records, on the driver's clock.
func (d Driver) Idempotency() store.Idempotency[*sql.Tx] {
	return d.dialect.Idempotency(d.db, d.clock)
}

// Sagas returns the saga store.
func (d Driver) Sagas() store.Sagas[*sql.Tx] { return sqlsagas.New(d.stores()) }

// InTx runs fn in a transaction of the database.
func (d Driver) InTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return sqltx.InTx(ctx, d.db, nil, d.dialect.Name+": ", fn)
}

// Exec runs query in tx and returns the rows it affected.
func (Driver) Exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (int64, error) {
	return sqltx.Exec(ctx, tx, query, args...)
}

// QueryRow runs query in tx and scans its row into dest.
func (Driver) QueryRow(ctx context.Context, tx *sql.Tx, query string, dest []any, args ...any) error {
	return sqltx.QueryRow(ctx, tx, query, dest, args...)
}

// stores describes the database to the shared stores, on the driver's
// clock.
func (d Driver) stores() sqlstore.Dialect { return d.dialect.Stores(d.db, d.clock) }
