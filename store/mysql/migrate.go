package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/schema"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// versionTable records applied migrations; applied_at is UTC.
const versionTable = `CREATE TABLE IF NOT EXISTS courier_schema_migrations (
    version     INT          NOT NULL,
    name        VARCHAR(255) NOT NULL,
    applied_at  DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;`

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrations are the embedded scripts, with what exported scripts need:
// the version table and the statement that records a migration in it.
var migrations = schema.New(migrationFS, versionTable, "MySQL 8.0, MariaDB 10.6+", "mysql.NewDriver(db).Migrate(ctx)",
	"INSERT IGNORE INTO courier_schema_migrations (version, name, applied_at) VALUES (%d, '%s', UTC_TIMESTAMP(6));")

// migrateLockTimeout bounds the wait for another Migrate.
const migrateLockTimeout = 60 * time.Second

// migrate applies the migrations the database lacks, each in order, and
// returns the versions it applied (none when the schema is current, so
// running it again is a no-op). Concurrent calls, from any process, wait for
// one another on a named lock (GET_LOCK) scoped to the database. It returns
// an error wrapping [store.ErrSchemaNewer] when the database was migrated by
// a newer Courier.
//
// MySQL commits DDL at once, so unlike on PostgreSQL or SQLite a migration
// that fails halfway leaves its first statements applied. They are all
// idempotent: fix the cause (the error names the statement) and run Migrate
// again (an index that exists is skipped). Tables are created in the database of db's DSN.
func migrate(ctx context.Context, db *sql.DB) ([]int, error) {
	applied, err := applyMigrations(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("mysql: migrate: %w", err)
	}
	return applied, nil
}

// applyMigrations is migrate without its errors' prefix.
func applyMigrations(ctx context.Context, db *sql.DB) ([]int, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := checkServer(ctx, conn); err != nil {
		return nil, err
	}
	var locked sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(CONCAT('courier_migrate_', SHA1(DATABASE())), ?)",
		int(migrateLockTimeout.Seconds())).Scan(&locked); err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if locked.Int64 != 1 {
		return nil, fmt.Errorf("lock: another Migrate has held the migration lock for %s; wait for it to finish, then run Migrate again", migrateLockTimeout)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.ExecContext(rctx, "DO RELEASE_LOCK(CONCAT('courier_migrate_', SHA1(DATABASE())))"); err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // closing the session releases the lock
		}
	}()
	if _, err := conn.ExecContext(ctx, versionTable); err != nil {
		return nil, fmt.Errorf("create version table: %w", err)
	}
	pending, err := migrations.Pending(schemaVersion(ctx, conn))
	if err != nil {
		return nil, err
	}
	var applied []int
	for _, m := range pending {
		for i, stmt := range statements(m.SQL) {
			if _, err := conn.ExecContext(ctx, stmt); err != nil && !alreadyApplied(err) {
				return applied, fmt.Errorf("apply %04d_%s, statement %d (%s): %w; MySQL commits DDL at once, so the statements before it stay applied: fix the cause and run Migrate again",
					m.Version, m.Name, i+1, firstLine(stmt), err)
			}
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO courier_schema_migrations (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(6))",
			m.Version, m.Name); err != nil {
			return applied, fmt.Errorf("record %04d_%s: %w", m.Version, m.Name, err)
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}

// statements splits a migration into its statements: each ends with a
// semicolon at the end of a line, and lines that start with -- are
// comments.
func statements(script string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.Lines(script) {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

func firstLine(stmt string) string {
	line, _, _ := strings.Cut(stmt, "\n")
	return strings.TrimSpace(line)
}

// checkServer fails with an explanation when the connection has no database
// selected or the server lacks JSON_TABLE (MySQL before 8.0.4, MariaDB
// before 10.6), which claims need.
func checkServer(ctx context.Context, q sqltx.Querier) error {
	var name sql.NullString
	if err := q.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&name); err != nil {
		return err
	}
	if !name.Valid {
		return errors.New("the connection has no database selected: name it in the DSN, e.g. user:password@tcp(host:3306)/app")
	}
	var n int
	if err := q.QueryRowContext(ctx, "SELECT COUNT(*) FROM JSON_TABLE('[1]', '$[*]' COLUMNS (x INT PATH '$')) AS t").Scan(&n); err != nil {
		var version string
		_ = q.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version)
		return fmt.Errorf("the server (version %s) lacks JSON_TABLE: courier needs MySQL 8.0 or MariaDB 10.6 or newer: %w", version, err)
	}
	return nil
}

// schemaVersion returns the highest migration version applied to the
// MySQL database behind q, 0 when Courier's schema is absent.
func schemaVersion(ctx context.Context, q sqltx.Querier) (int, error) {
	return migrations.Version(func(v *int) error {
		return q.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM courier_schema_migrations").Scan(v)
	}, func(err error) bool { return errorNumber(err) == errNoSuchTable })
}

// ExportSQL returns the MySQL migrations as scripts for an external
// migration tool (goose, golang-migrate, Atlas, Flyway…), each recording
// itself in courier_schema_migrations (see [store.ExportScripts]). A script
// holds several statements: run it with the mysql client or a tool that
// splits statements, or on a connection with multiStatements=true.
func ExportSQL() []store.Migration { return migrations.Export() }

// alreadyApplied says err is a statement's refusal to add what an earlier,
// interrupted run of its migration added: an index or a column of that name
// exists. MySQL commits DDL at once, and (unlike MariaDB) has no ADD COLUMN
// IF NOT EXISTS, so such a statement is skipped on the next run.
func alreadyApplied(err error) bool {
	n := errorNumber(err)
	return n == errDupKeyName || n == errDupFieldName
}
