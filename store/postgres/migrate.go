package postgres

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/schema"
)

const versionTable = `CREATE TABLE IF NOT EXISTS courier_schema_migrations (
    version     integer     PRIMARY KEY,
    name        text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);`

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrations are the embedded scripts, with what exported scripts need:
// the version table and the statement that records a migration in it.
var migrations = schema.New(migrationFS, versionTable, "PostgreSQL", "postgres.Migrate",
	"INSERT INTO courier_schema_migrations (version, name) VALUES (%d, '%s') ON CONFLICT (version) DO NOTHING;")

// Migrations returns the PostgreSQL schema's migrations in version order.
func Migrations() []store.Migration { return migrations.Load() }

// migrateLock serialises concurrent Migrate calls on one database.
const migrateLock = int64(0x636f7572_6d696772) // "courmigr"

// Beginner starts a transaction; *pgxpool.Pool, *pgx.Conn and pgx.Tx are
// Beginners.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Migrate applies the migrations the database lacks, each in order, all in
// one transaction, and returns the versions it applied (none when the schema
// is current, so running it again is a no-op). Concurrent calls wait for one
// another. It returns an error wrapping [store.ErrSchemaNewer] when the
// database was migrated by a newer Courier.
//
// Tables are created in the first schema of the connection's search_path.
func Migrate(ctx context.Context, db Beginner) ([]int, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLock); err != nil {
		return nil, fmt.Errorf("postgres: migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, versionTable); err != nil {
		if errorCode(err) == invalidSchemaName {
			return nil, fmt.Errorf("postgres: migrate: the schema in the connection's search_path does not exist; create it first (CREATE SCHEMA …): %w", err)
		}
		return nil, fmt.Errorf("postgres: migrate: create version table: %w", err)
	}
	pending, err := migrations.Pending(SchemaVersion(ctx, tx))
	if err != nil {
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	var applied []int
	for _, m := range pending {
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return nil, fmt.Errorf("postgres: migrate: apply %04d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO courier_schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
			return nil, fmt.Errorf("postgres: migrate: record %04d_%s: %w", m.Version, m.Name, err)
		}
		applied = append(applied, m.Version)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("postgres: migrate: commit: %w", err)
	}
	return applied, nil
}

// SchemaVersion returns the highest migration version applied to the
// PostgreSQL database behind q, 0 when Courier's schema is absent.
func SchemaVersion(ctx context.Context, q Querier) (int, error) {
	return migrations.Version(func(v *int) error {
		return q.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM courier_schema_migrations").Scan(v)
	}, func(err error) bool { return errorCode(err) == undefinedTable })
}

// Querier runs a query; pools, connections and transactions are Queriers.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CheckSchema returns nil when the PostgreSQL schema behind q is at this
// binary's version ([Migrations]), else the error of [store.CheckVersion].
func CheckSchema(ctx context.Context, q Querier) error {
	return migrations.Check(SchemaVersion(ctx, q))
}

// ExportSQL returns each PostgreSQL migration followed by the INSERT that
// records it, for an external migration tool ([store.ExportScripts]).
func ExportSQL() []store.Migration { return migrations.Export() }
