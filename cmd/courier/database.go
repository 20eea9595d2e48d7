package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers the "mysql" driver
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// defaultDatabase is the embedded default's SQLite file.
const defaultDatabase = "courier.db"

// acceptedURLs lists the database URL forms, for error messages.
const acceptedURLs = "postgres://user:password@host:5432/db, mysql://user:password@host:3306/db, sqlite:///absolute/path.db, sqlite:relative.db or file:relative.db"

// dbFlags selects the database.
type dbFlags struct {
	DatabaseURL string `name:"database-url" help:"Database URL: postgres://…, mysql://…, sqlite:///path/file.db or file:path.db. Default: the embedded ./courier.db (SQLite)." env:"COURIER_DATABASE_URL"`
}

// database is an open database of any dialect, with what the commands need.
type database struct {
	dialect string // postgres, mysql or sqlite
	where   string // the URL without password, or the file
	pg      *pgxpool.Pool
	sql     *sql.DB
}

// parseDatabaseURL tells the dialect of raw and the driver's connection
// string.
func parseDatabaseURL(raw string) (dialect, conn string, err error) {
	switch {
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		return "postgres", raw, nil
	case strings.HasPrefix(raw, "sqlite://"):
		return "sqlite", strings.TrimPrefix(raw, "sqlite://"), nil
	case strings.HasPrefix(raw, "sqlite:"):
		return "sqlite", strings.TrimPrefix(raw, "sqlite:"), nil
	case strings.HasPrefix(raw, "file:"):
		return "sqlite", strings.TrimPrefix(raw, "file:"), nil
	case strings.HasPrefix(raw, "mysql://"):
		dsn, err := mysql.DSNFromURL(raw)
		if err != nil {
			return "", "", fmt.Errorf("--database-url %q is not a MySQL URL (%v): use mysql://user:password@host:3306/database, with reserved characters percent-encoded (@ as %%40)", redact(raw), err)
		}
		return "mysql", dsn, nil
	}
	return "", "", fmt.Errorf("--database-url %q is not a database URL Courier knows: use %s", redact(raw), acceptedURLs)
}

// open connects to the database and checks that it answers. With no URL it
// opens the embedded default, ./courier.db, which must exist unless create.
func (f dbFlags) open(ctx context.Context, create bool) (*database, error) {
	raw := f.DatabaseURL
	if raw == "" {
		if _, err := os.Stat(defaultDatabase); err != nil && !create {
			return nil, fmt.Errorf("no database given and ./%s does not exist: pass --database-url (or COURIER_DATABASE_URL: %s), or start the embedded default with courier relay", defaultDatabase, acceptedURLs)
		}
		raw = "sqlite:" + defaultDatabase
	}
	dialect, conn, err := parseDatabaseURL(raw)
	if err != nil {
		return nil, err
	}
	d := &database{dialect: dialect, where: redact(raw)}
	switch dialect {
	case "postgres":
		cfg, err := pgxpool.ParseConfig(conn)
		if err != nil {
			return nil, fmt.Errorf("--database-url is malformed (%v): use postgres://user:password@host:5432/database", err)
		}
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
		if d.pg, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return nil, fmt.Errorf("database %s: %w", d.where, err)
		}
	case "sqlite":
		if abs, err := filepath.Abs(conn); err == nil {
			d.where = abs
		}
		if !create {
			if _, err := os.Stat(conn); err != nil {
				return nil, fmt.Errorf("no SQLite database at %s: check --database-url, or run courier migrate to create it", d.where)
			}
		}
		if d.sql, err = sqlite.Open(conn); err != nil {
			return nil, err
		}
	case "mysql":
		if d.sql, err = sql.Open("mysql", conn); err != nil {
			return nil, fmt.Errorf("database %s: %w", d.where, err)
		}
	}
	if err := d.ping(ctx); err != nil {
		d.close()
		return nil, fmt.Errorf("cannot reach the database at %s: %v; check --database-url (COURIER_DATABASE_URL) and that the server is running",
			d.where, oneLine(err))
	}
	return d, nil
}

func (d *database) ping(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if d.pg != nil {
		return d.pg.Ping(pctx)
	}
	return d.sql.PingContext(pctx)
}

func (d *database) close() {
	if d.pg != nil {
		d.pg.Close()
	}
	if d.sql != nil {
		_ = d.sql.Close()
	}
}

func (d *database) migrate(ctx context.Context) ([]int, error) {
	switch d.dialect {
	case "postgres":
		return postgres.Migrate(ctx, d.pg)
	case "mysql":
		return mysql.Migrate(ctx, d.sql)
	}
	return sqlite.Migrate(ctx, d.sql)
}

func (d *database) schemaVersion(ctx context.Context) (int, error) {
	switch d.dialect {
	case "postgres":
		return postgres.SchemaVersion(ctx, d.pg)
	case "mysql":
		return mysql.SchemaVersion(ctx, d.sql)
	}
	return sqlite.SchemaVersion(ctx, d.sql)
}

func (d *database) checkSchema(ctx context.Context) error {
	switch d.dialect {
	case "postgres":
		return postgres.CheckSchema(ctx, d.pg)
	case "mysql":
		return mysql.CheckSchema(ctx, d.sql)
	}
	return sqlite.CheckSchema(ctx, d.sql)
}

func (d *database) stats(ctx context.Context) (store.Stats, error) {
	switch d.dialect {
	case "postgres":
		return postgres.Stats(ctx, d.pg)
	case "mysql":
		return mysql.Stats(ctx, d.sql)
	}
	return sqlite.Stats(ctx, d.sql)
}

func (d *database) relayStore(ctx context.Context, keepPublished bool) (store.RelayStore, error) {
	switch d.dialect {
	case "postgres":
		return postgres.NewStore(ctx, d.pg, postgres.StoreConfig{KeepPublished: keepPublished})
	case "mysql":
		return mysql.NewStore(ctx, d.sql, mysql.StoreConfig{KeepPublished: keepPublished})
	}
	return sqlite.NewStore(ctx, d.sql, sqlite.StoreConfig{KeepPublished: keepPublished})
}

// notifier returns the wake-ups a relay in its own process can have:
// PostgreSQL's LISTEN/NOTIFY, nothing elsewhere (the relay polls).
func (d *database) notifier(listenURL string, log *slog.Logger) (store.Notifier, error) {
	if d.dialect != "postgres" {
		return nil, nil
	}
	return postgres.NewNotifier(listenURL, log)
}

// pollInterval is the relay's default polling interval on dialect: long
// where wake-ups arrive, short where polling is all there is (and cheap).
func pollInterval(dialect string) time.Duration {
	switch dialect {
	case "postgres":
		return time.Second
	case "mysql":
		return 250 * time.Millisecond
	}
	return 100 * time.Millisecond
}

func (d *database) admin() store.Admin {
	switch d.dialect {
	case "postgres":
		return postgres.Admin(d.pg)
	case "mysql":
		return mysql.Admin(d.sql)
	}
	return sqlite.Admin(d.sql)
}

func exportSQL(dialect string) []store.Migration {
	switch dialect {
	case "mysql":
		return mysql.ExportSQL()
	case "sqlite":
		return sqlite.ExportSQL()
	}
	return postgres.ExportSQL()
}
