package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/schema"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// versionTable records applied migrations. applied_at is informational; its
// default (SQLite's clock, in microseconds like every other time Courier
// keeps) serves the exported scripts, Migrate writes Go's clock.
const versionTable = `CREATE TABLE IF NOT EXISTS courier_schema_migrations (
    version     INTEGER PRIMARY KEY,
    name        TEXT    NOT NULL,
    applied_at  INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))
);`

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrations are the embedded scripts, with what exported scripts need:
// the version table and the statement that records a migration in it.
var migrations = schema.New(migrationFS, versionTable, "SQLite", "sqlite.NewDriver(db).Migrate(ctx)",
	"INSERT OR IGNORE INTO courier_schema_migrations (version, name) VALUES (%d, '%s');")

// migrate applies the migrations the database lacks, each in order, all in
// one transaction, and returns the versions it applied (none when the schema
// is current, so running it again is a no-op). The transaction starts with
// BEGIN IMMEDIATE, so concurrent calls, in this process or another on the
// same file, wait for one another (up to the connection's busy timeout). It
// returns an error wrapping [store.ErrSchemaNewer] when the database was
// migrated by a newer Courier.
//
// Tables are created in the main database of db's connections.
func migrate(ctx context.Context, db *sql.DB) ([]int, error) {
	var applied []int
	err := immediate(ctx, db, func(conn *sql.Conn) error {
		if _, err := conn.ExecContext(ctx, versionTable); err != nil {
			return fmt.Errorf("create version table: %w", err)
		}
		pending, err := migrations.Pending(schemaVersion(ctx, conn))
		if err != nil {
			return err
		}
		for _, m := range pending {
			if _, err := conn.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("apply %04d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := conn.ExecContext(ctx, "INSERT INTO courier_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
				m.Version, m.Name, time.Now().UnixMicro()); err != nil {
				return fmt.Errorf("record %04d_%s: %w", m.Version, m.Name, err)
			}
			applied = append(applied, m.Version)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: migrate: %w", err)
	}
	return applied, nil
}

// schemaVersion returns the highest migration version applied to the
// SQLite database behind q, 0 when Courier's schema is absent.
func schemaVersion(ctx context.Context, q sqltx.Querier) (int, error) {
	var tables int
	if err := q.QueryRowContext(ctx,
		"SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'courier_schema_migrations'").Scan(&tables); err != nil {
		return 0, fmt.Errorf("sqlite: read schema version: %w", err)
	}
	if tables == 0 {
		return 0, nil
	}
	var v int
	if err := q.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM courier_schema_migrations").Scan(&v); err != nil {
		return 0, fmt.Errorf("sqlite: read schema version: %w", err)
	}
	return v, nil
}

// ExportSQL returns the SQLite migrations as scripts for tools like goose or
// golang-migrate ([store.ExportScripts] says what they hold). Run each
// script once, in one transaction, as those tools do.
func ExportSQL() []store.Migration { return migrations.Export() }
