package mysql

import (
	"context"
	"database/sql"
	"log/slog"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// DefaultPollInterval is the relay's polling interval on MySQL. MySQL has no wake-ups across processes, so the relay polls; a poll that finds nothing costs one indexed query.
const DefaultPollInterval = 250 * time.Millisecond

// Driver is MySQL through database/sql: a store.Driver whose stores work in
// *sql.Tx transactions.
type Driver struct {
	sqlDB
	clock store.Clock // nil: the server's clock
}

var _ store.Driver[*sql.Tx] = Driver{}

// NewDriver returns the Driver on db. The database stays the caller's to
// close.
func NewDriver(db *sql.DB) Driver { return Driver{sqlDB: sqlDB{SQL: db, Prefix: "mysql: "}} }

// sqlDB gives Driver Ping, Rebind, InTx, Exec and QueryRow.
type sqlDB = sqltx.DB

// WithClock returns a copy of d whose stores take the time they compare
// with from c instead of the server's clock (see [store.Clock]).
func (d Driver) WithClock(c store.Clock) Driver {
	d.clock = c
	return d
}

// Dialect returns "mysql".
func (Driver) Dialect() string { return "mysql" }

// Migrate is [Migrate] on the driver's database.
func (d Driver) Migrate(ctx context.Context) ([]int, error) { return Migrate(ctx, d.SQL) }

// SchemaVersion is [SchemaVersion] on the driver's database.
func (d Driver) SchemaVersion(ctx context.Context) (int, error) { return SchemaVersion(ctx, d.SQL) }

// CheckSchema is [CheckSchema] on the driver's database.
func (d Driver) CheckSchema(ctx context.Context) error { return CheckSchema(ctx, d.SQL) }

// Migrations returns [Migrations].
func (Driver) Migrations() []store.Migration { return Migrations() }

// ExportSQL returns [ExportSQL].
func (Driver) ExportSQL() []store.Migration { return ExportSQL() }

// RelayStore returns [NewStore] on the driver's database.
func (d Driver) RelayStore(ctx context.Context, cfg store.RelayConfig) (store.RelayStore, error) {
	return NewStore(ctx, d.SQL, StoreConfig{KeepPublished: cfg.KeepPublished, Clock: d.clock})
}

// Notifier returns nil: MySQL has no wake-ups across processes.
func (Driver) Notifier(*slog.Logger) (store.Notifier, error) { return nil, nil }

// PollInterval returns [DefaultPollInterval].
func (Driver) PollInterval() time.Duration { return DefaultPollInterval }

// ConsumerStore returns [ConsumerStore] on the driver's database.
func (d Driver) ConsumerStore() store.ConsumerStore { return ConsumerStore(d.SQL) }

// Admin returns [Admin] on the driver's database, with the driver's clock.
func (d Driver) Admin() store.Admin { return withClock(dialect(d.SQL), d.clock).Admin() }

// SerialWrites reports false.
func (Driver) SerialWrites() bool { return false }

// Inserter returns [DatabaseSQL].
func (Driver) Inserter() store.Inserter[*sql.Tx] { return DatabaseSQL() }

// Inbox returns [SQLInbox] on the driver's database, with the driver's
// clock.
func (d Driver) Inbox() store.Inbox[*sql.Tx] { return withClock(dialect(d.SQL), d.clock).Inbox() }

// Idempotency returns [SQLIdempotency] on the driver's database, with the
// driver's clock.
func (d Driver) Idempotency() store.Idempotency[*sql.Tx] { return sqlIdempotency(d.SQL, d.clock) }

// Sagas returns [SQLSagas] on the driver's database.
func (d Driver) Sagas() store.Sagas[*sql.Tx] { return SQLSagas(d.SQL) }
