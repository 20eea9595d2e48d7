package shop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers the "mysql" driver
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// Dialects a DatabaseURL can name.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
	MySQL    = "mysql"
)

// DB is one service's database. Every service works in *sql.Tx, whatever
// the dialect, so one code path serves all of them; only the DDL and the
// placeholders differ.
type DB struct {
	dialect string
	where   string // the URL without password, or the file
	sql     *sql.DB
	pool    *pgxpool.Pool // PostgreSQL: Courier's relay and consumer stores use pgx
}

// OpenDB opens the database at rawURL (see Config.DatabaseURL), creating a
// SQLite file or a PostgreSQL schema (search_path) when it is missing, and
// checks that it answers.
func OpenDB(ctx context.Context, rawURL string) (*DB, error) {
	dialect, conn, err := parseDatabaseURL(rawURL)
	if err != nil {
		return nil, err
	}
	d := &DB{dialect: dialect, where: redact(rawURL)}
	switch dialect {
	case SQLite:
		if abs, err := filepath.Abs(conn); err == nil {
			d.where = abs
		}
		if d.sql, err = sqlite.Open(conn); err != nil {
			return nil, err
		}
	case Postgres:
		cfg, err := pgxpool.ParseConfig(conn)
		if err != nil {
			return nil, fmt.Errorf("database URL %s is malformed (%v): use postgres://user:password@host:5432/database?search_path=schema", d.where, err)
		}
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
		if err := createSchema(ctx, cfg.ConnConfig); err != nil {
			return nil, fmt.Errorf("database %s: %w", d.where, err)
		}
		if d.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return nil, fmt.Errorf("database %s: %w", d.where, err)
		}
		d.sql = stdlib.OpenDBFromPool(d.pool)
	case MySQL:
		if d.sql, err = sql.Open("mysql", conn); err != nil {
			return nil, fmt.Errorf("database %s: %w", d.where, err)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := d.sql.PingContext(pctx); err != nil {
		d.Close()
		return nil, fmt.Errorf("cannot reach the database at %s: %v; check the database URL and that the server is running", d.where, err)
	}
	return d, nil
}

// Dialect returns SQLite, Postgres or MySQL.
func (d *DB) Dialect() string { return d.dialect }

// String returns where the database is, without its password.
func (d *DB) String() string { return d.where }

// SQL returns the database/sql pool.
func (d *DB) SQL() *sql.DB { return d.sql }

// Close closes the database.
func (d *DB) Close() {
	if d.sql != nil {
		_ = d.sql.Close()
	}
	if d.pool != nil {
		d.pool.Close()
	}
}

// q rewrites a statement written with ? placeholders for the dialect.
func (d *DB) q(query string) string {
	if d.dialect != Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// migrate applies Courier's migrations, then the service's own tables.
func (d *DB) migrate(ctx context.Context, tables []string) error {
	var err error
	switch d.dialect {
	case Postgres:
		_, err = postgres.Migrate(ctx, d.pool)
	case MySQL:
		_, err = mysql.Migrate(ctx, d.sql)
	default:
		_, err = sqlite.Migrate(ctx, d.sql)
	}
	if err != nil {
		return fmt.Errorf("migrate %s: %w", d.where, err)
	}
	for _, t := range tables {
		if _, err := d.sql.ExecContext(ctx, ddl(d.dialect, t)); err != nil {
			return fmt.Errorf("create the service's tables in %s: %w", d.where, err)
		}
	}
	return nil
}

// inTx runs fn in a transaction and commits it when fn returns nil.
func (d *DB) inTx(ctx context.Context, fn func(*sql.Tx) error) (err error) {
	tx, err := d.sql.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
				err = errors.Join(err, rerr)
			}
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

func (d *DB) outbox() store.Inserter[*sql.Tx] {
	switch d.dialect {
	case Postgres:
		return postgres.DatabaseSQL()
	case MySQL:
		return mysql.DatabaseSQL()
	}
	return sqlite.DatabaseSQL()
}

func (d *DB) relayStore(ctx context.Context) (store.RelayStore, error) {
	switch d.dialect {
	case Postgres:
		return postgres.NewStore(ctx, d.pool, postgres.StoreConfig{})
	case MySQL:
		return mysql.NewStore(ctx, d.sql, mysql.StoreConfig{})
	}
	return sqlite.NewStore(ctx, d.sql, sqlite.StoreConfig{})
}

func (d *DB) inbox() store.Inbox[*sql.Tx] {
	switch d.dialect {
	case Postgres:
		return postgres.SQLInbox(d.sql)
	case MySQL:
		return mysql.SQLInbox(d.sql)
	}
	return sqlite.SQLInbox(d.sql)
}

func (d *DB) consumerStore() store.ConsumerStore {
	switch d.dialect {
	case Postgres:
		return postgres.ConsumerStore(d.pool)
	case MySQL:
		return mysql.ConsumerStore(d.sql)
	}
	return sqlite.ConsumerStore(d.sql)
}

func (d *DB) idempotency() store.Idempotency[*sql.Tx] {
	switch d.dialect {
	case Postgres:
		return postgres.SQLIdempotency(d.sql)
	case MySQL:
		return mysql.SQLIdempotency(d.sql)
	}
	return sqlite.SQLIdempotency(d.sql)
}

// parseDatabaseURL tells the dialect of raw and the driver's connection
// string. A bare path is a SQLite file.
func parseDatabaseURL(raw string) (dialect, conn string, err error) {
	switch {
	case raw == "":
		return "", "", errors.New("database URL is empty: use " + acceptedURLs)
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		return Postgres, raw, nil
	case strings.HasPrefix(raw, "sqlite://"):
		return SQLite, strings.TrimPrefix(raw, "sqlite://"), nil
	case strings.HasPrefix(raw, "sqlite:"):
		return SQLite, strings.TrimPrefix(raw, "sqlite:"), nil
	case strings.HasPrefix(raw, "file:"):
		return SQLite, strings.TrimPrefix(raw, "file:"), nil
	case strings.HasPrefix(raw, "mysql://"):
		dsn, err := mysql.DSNFromURL(raw)
		if err != nil {
			return "", "", fmt.Errorf("database URL %q is not a MySQL URL (%v): use mysql://user:password@host:3306/database, with reserved characters percent-encoded (@ as %%40)", redact(raw), err)
		}
		return MySQL, dsn, nil
	case !strings.Contains(raw, "://"):
		return SQLite, raw, nil
	}
	return "", "", fmt.Errorf("database URL %q is not one the shop knows: use %s", redact(raw), acceptedURLs)
}

const acceptedURLs = "a SQLite file (orders.db, sqlite:orders.db, sqlite:///abs/orders.db), postgres://user:password@host:5432/db?search_path=orders or mysql://user:password@host:3306/orders"

// createSchema creates the first schema of the URL's search_path, if it
// names one, so each service can get a schema of its own in one database.
func createSchema(ctx context.Context, cfg *pgx.ConnConfig) error {
	schema := firstSchema(cfg.RuntimeParams["search_path"])
	if schema == "" {
		return nil
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("create schema %s: %w", schema, err)
	}
	return nil
}

// DropSchema drops the schema a postgres:// URL's search_path names, with
// everything in it. It does nothing for other URLs.
func DropSchema(ctx context.Context, rawURL string) error {
	dialect, conn, err := parseDatabaseURL(rawURL)
	if err != nil || dialect != Postgres {
		return err
	}
	cfg, err := pgx.ParseConfig(conn)
	if err != nil {
		return err
	}
	schema := firstSchema(cfg.RuntimeParams["search_path"])
	if schema == "" {
		return nil
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to drop schema %s: %w", schema, err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	return nil
}

// WithSchema returns the postgres:// URL base with search_path set to
// schema.
func WithSchema(base, schema string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || !strings.HasPrefix(u.Scheme, "postgres") {
		return "", fmt.Errorf("%q is not a postgres:// URL", redact(base))
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func firstSchema(searchPath string) string {
	first, _, _ := strings.Cut(searchPath, ",")
	return strings.Trim(strings.TrimSpace(first), `"`)
}

// redact hides the password in a URL.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
