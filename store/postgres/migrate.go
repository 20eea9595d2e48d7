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
var migrations = schema.New(migrationFS, versionTable, "PostgreSQL", "postgres.NewDriver(pool).Migrate(ctx)",
	"INSERT INTO courier_schema_migrations (version, name) VALUES (%d, '%s') ON CONFLICT (version) DO NOTHING;")

// migrateLock serialises concurrent Migrate calls on one database.
const migrateLock = int64(0x636f7572_6d696772) // "courmigr"

// beginner starts a transaction; *pgxpool.Pool, *pgx.Conn and pgx.Tx are
// beginners.
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// migrate applies the migrations the database lacks, each in order, all in
// one transaction, and returns the versions it applied (none when the schema
// is current, so running it again is a no-op). Concurrent calls wait for one
// another. It returns an error wrapping [store.ErrSchemaNewer] when the
// database was migrated by a newer Courier.
//
// Tables are created in the first schema of the connection's search_path.
func migrate(ctx context.Context, db beginner) ([]int, error) {
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
	pending, err := migrations.Pending(schemaVersion(ctx, tx))
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

// schemaVersion returns the highest migration version applied to the
// PostgreSQL database behind q, 0 when Courier's schema is absent.
func schemaVersion(ctx context.Context, q querier) (int, error) {
	return migrations.Version(func(v *int) error {
		return q.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM courier_schema_migrations").Scan(v)
	}, func(err error) bool { return errorCode(err) == undefinedTable })
}

// querier runs a query; pools, connections and transactions are queriers.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// checkSchema returns nil when the PostgreSQL schema behind q is at this
// binary's version, else the error of [store.CheckVersion].
func checkSchema(ctx context.Context, q querier) error {
	return migrations.Check(schemaVersion(ctx, q))
}

// ExportSQL returns each PostgreSQL migration followed by the INSERT that
// records it, for an external migration tool ([store.ExportScripts]).
func ExportSQL() []store.Migration { return migrations.Export() }
