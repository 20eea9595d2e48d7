package postgres

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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

// Dialect returns "postgres".
func (database) Dialect() string { return "postgres" }

// Ping checks that the database answers.
func (d database) Ping(ctx context.Context) error { return d.pool.Ping(ctx) }

// Migrate applies the migrations the database lacks (see [Driver]).
func (d database) Migrate(ctx context.Context) ([]int, error) { return migrate(ctx, d.pool) }

// SchemaVersion returns the highest migration applied, 0 when Courier's
// schema is absent.
func (d database) SchemaVersion(ctx context.Context) (int, error) {
	return schemaVersion(ctx, d.pool)
}

// CheckSchema returns nil when the schema is the one this binary knows,
// else the error of [store.CheckVersion].
func (d database) CheckSchema(ctx context.Context) error { return checkSchema(ctx, d.pool) }

// Migrations returns the PostgreSQL schema's migrations, oldest first.
func (database) Migrations() []store.Migration { return migrations.Load() }

// ExportSQL returns [ExportSQL].
func (database) ExportSQL() []store.Migration { return ExportSQL() }

// RelayStore returns the relay's store on the pool, on the driver's clock.
func (d database) RelayStore(ctx context.Context, cfg store.RelayConfig) (store.RelayStore, error) {
	return newRelayStore(ctx, d.pool, cfg, d.clock)
}

// Notifier returns a [Notifier] on the pool's connection string.
func (d database) Notifier(log *slog.Logger) (store.Notifier, error) {
	return NewNotifier(d.pool.Config().ConnString(), log)
}

// PollInterval returns [DefaultPollInterval].
func (database) PollInterval() time.Duration { return DefaultPollInterval }

// ConsumerStore returns the consumer runtime's store on the pool, on the
// driver's clock.
func (d database) ConsumerStore() store.ConsumerStore { return consumerStore(d) }

// Admin returns the operators' view on the pool, on the driver's clock.
func (d database) Admin() store.Admin { return admin(d) }

// Operations returns the operators' maintenance view on the pool, on the
// driver's clock.
func (d database) Operations() store.Operations { return operations(d.pool, d.clock) }

// ReplayRuns returns the record of guarded replays on the pool, on the
// driver's clock.
func (d database) ReplayRuns() store.ReplayRuns { return replayRuns(d.pool, d.clock) }

// Delivery returns the audit watches and latency samples on the pool, on
// the driver's clock.
func (d database) Delivery() store.Delivery { return delivery(d.pool, d.clock) }

// SerialWrites reports false: PostgreSQL runs write transactions side by
// side.
func (database) SerialWrites() bool { return false }

// Rebind numbers the ? placeholders of query ($1, $2, …).
func (database) Rebind(query string) string { return sqltx.Dollar(query) }
