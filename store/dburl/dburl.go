package dburl

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/internal/redact"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// Forms lists the database URLs Parse accepts, for error messages.
const Forms = "postgres://user:password@host:5432/db, mysql://user:password@host:3306/db, sqlite:///absolute/path.db, sqlite:relative.db or file:relative.db"

// ConnectTimeout bounds the connection of a PostgreSQL pool; PingTimeout
// bounds the check Open makes that the database answers.
const (
	ConnectTimeout = 5 * time.Second
	PingTimeout    = 10 * time.Second
)

// ErrNoFile is returned (wrapped) by Open for a SQLite file that does not
// exist when Options.Create is false.
var ErrNoFile = errors.New("no SQLite database")

// dialect is what this package knows of one dialect.
type dialect struct {
	name      string
	exportSQL func() []store.Migration
}

// dialects are the dialects a URL can name, in the order messages list
// them.
var dialects = []dialect{
	{"postgres", postgres.ExportSQL},
	{"mysql", mysql.ExportSQL},
	{"sqlite", sqlite.ExportSQL},
}

// Dialects returns the names of the dialects a URL can name: postgres,
// mysql and sqlite.
func Dialects() []string {
	names := make([]string, len(dialects))
	for i, d := range dialects {
		names[i] = d.name
	}
	return names
}

// ExportSQL returns the migrations of the dialect named name as scripts
// for external migration tools (see store.Database.ExportSQL), without a
// database. It fails for a name Dialects does not list.
func ExportSQL(name string) ([]store.Migration, error) {
	i := slices.IndexFunc(dialects, func(d dialect) bool { return d.name == name })
	if i < 0 {
		return nil, fmt.Errorf("dburl: dialect %q is not one Courier knows: use %s", name, strings.Join(Dialects(), ", "))
	}
	return dialects[i].exportSQL(), nil
}

// Options says how to read and open a URL. The zero value opens an
// existing database, and errors call the URL "database URL".
type Options struct {
	// Flag is how error messages name the URL, such as "--database-url".
	// Default: "database URL".
	Flag string
	// Env is the environment variable that also sets the URL, named in
	// the message of a database that does not answer. Default: none.
	Env string
	// BarePaths reads a string without a scheme (orders.db, /tmp/x.db) as
	// a SQLite file. Default: such a string is refused.
	BarePaths bool
	// Create creates a SQLite file that does not exist. Default: Open
	// fails with ErrNoFile.
	Create bool
	// CreateSchema creates the first schema of a PostgreSQL URL's
	// search_path when it does not exist, so that services can each have
	// a schema of their own in one database. Default: the schema must
	// exist.
	CreateSchema bool
	// ListenURL is the PostgreSQL URL the Notifier LISTENs on: a direct
	// session connection, not PgBouncer in transaction mode. Default: the
	// database URL.
	ListenURL string
	// MaxConns bounds the connections the DB opens, and closes those idle
	// for a minute (PostgreSQL, MySQL; a SQLite file is opened as its
	// driver opens it). Default: the driver's bound.
	MaxConns int
	// ConnectTimeout bounds connecting to PostgreSQL and checking that the
	// database answers. Default: ConnectTimeout, and PingTimeout for the
	// check.
	ConnectTimeout time.Duration
}

// idleConnTime is how long a connection of a bounded DB (Options.MaxConns)
// stays open unused.
const idleConnTime = time.Minute

func (o Options) flag() string {
	if o.Flag == "" {
		return "database URL"
	}
	return o.Flag
}

// forms lists the accepted URLs, with bare paths when they are.
func (o Options) forms() string {
	if o.BarePaths {
		return "a SQLite file path, " + Forms
	}
	return Forms
}

// URL is a parsed database URL.
type URL struct {
	// Dialect is "postgres", "mysql" or "sqlite".
	Dialect string
	// Conn is what the dialect's driver opens: the PostgreSQL URL, the
	// DSN of github.com/go-sql-driver/mysql, or the SQLite file's path.
	Conn string
	// Where is the URL without its password, or the SQLite file's
	// absolute path: what messages and logs may show.
	Where string
}

// Parse reads raw. It fails, with a message that names Options.Flag and
// the forms it accepts, for an empty string, a scheme it does not know, a
// MySQL URL the driver would not open, or a password holding a character
// that ends it for the URL's parser (/ for PostgreSQL's, which reads URLs
// as libpq does; /, ? and # for MySQL's): the message says to
// percent-encode it. The message never holds the password.
func Parse(raw string, opts Options) (URL, error) {
	u := URL{Where: Redact(raw)}
	switch {
	case raw == "":
		return URL{}, fmt.Errorf("%s is empty: use %s", opts.flag(), opts.forms())
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		if err := redact.CheckUserinfo(raw, "/"); err != nil {
			return URL{}, fmt.Errorf("%s %q: %w", opts.flag(), u.Where, err)
		}
		u.Dialect, u.Conn = "postgres", raw
	case strings.HasPrefix(raw, "mysql://"):
		if err := redact.CheckUserinfo(raw, "/?#"); err != nil {
			return URL{}, fmt.Errorf("%s %q: %w", opts.flag(), u.Where, err)
		}
		dsn, err := mysql.DSNFromURL(raw)
		if err != nil {
			return URL{}, fmt.Errorf("%s %q is not a MySQL URL (%v): use mysql://user:password@host:3306/database, with reserved characters percent-encoded (@ as %%40)", opts.flag(), u.Where, redact.In(err.Error(), raw))
		}
		u.Dialect, u.Conn = "mysql", dsn
	case strings.HasPrefix(raw, "sqlite://"):
		u.Dialect, u.Conn = "sqlite", strings.TrimPrefix(raw, "sqlite://")
	case strings.HasPrefix(raw, "sqlite:"):
		u.Dialect, u.Conn = "sqlite", strings.TrimPrefix(raw, "sqlite:")
	case strings.HasPrefix(raw, "file:"):
		u.Dialect, u.Conn = "sqlite", strings.TrimPrefix(raw, "file:")
	case opts.BarePaths && !strings.Contains(raw, "://"):
		u.Dialect, u.Conn = "sqlite", raw
	default:
		return URL{}, fmt.Errorf("%s %q is not a database URL Courier knows: use %s", opts.flag(), u.Where, opts.forms())
	}
	if u.Dialect == "sqlite" {
		if u.Conn == "" {
			return URL{}, fmt.Errorf("%s %q names no SQLite file: use %s", opts.flag(), raw, opts.forms())
		}
		if abs, err := filepath.Abs(u.Conn); err == nil {
			u.Where = abs
		}
	}
	return u, nil
}

// DB is an open database: a store.Driver whose stores work in *sql.Tx
// transactions, whatever the dialect.
type DB struct {
	store.Driver[*sql.Tx]

	sql      *sql.DB
	pool     *pgxpool.Pool
	where    string
	notifier func(*slog.Logger) (store.Notifier, error)
}

// Open parses raw (see Parse), connects to the database it names and checks
// that it answers within PingTimeout. Close closes what it opened.
//
// Besides Parse's errors it returns ErrNoFile (wrapped) for a missing
// SQLite file unless opts.Create, and an error naming opts.Flag and
// opts.Env when the database cannot be reached.
func Open(ctx context.Context, raw string, opts Options) (*DB, error) {
	u, err := Parse(raw, opts)
	if err != nil {
		return nil, err
	}
	d := &DB{where: u.Where}
	switch u.Dialect {
	case "postgres":
		err = d.openPostgres(ctx, u, opts)
	case "mysql":
		d.sql, err = sql.Open("mysql", u.Conn)
		if err != nil {
			err = fmt.Errorf("database %s: %w", d.where, err)
			break
		}
		if opts.MaxConns > 0 {
			d.sql.SetMaxOpenConns(opts.MaxConns)
			d.sql.SetMaxIdleConns(opts.MaxConns)
			d.sql.SetConnMaxIdleTime(idleConnTime)
		}
		d.Driver = mysql.NewDriver(d.sql)
	case "sqlite":
		if !opts.Create {
			if _, serr := os.Stat(u.Conn); serr != nil {
				return nil, fmt.Errorf("%w at %s: check %s", ErrNoFile, d.where, opts.flag())
			}
		}
		d.sql, err = sqlite.Open(u.Conn)
		d.Driver = sqlite.NewDriver(d.sql)
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	ping := PingTimeout
	if opts.ConnectTimeout > 0 {
		ping = opts.ConnectTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, ping)
	defer cancel()
	if err := d.Ping(pctx); err != nil {
		d.Close()
		if ctx.Err() != nil { // a signal, not the database
			return nil, fmt.Errorf("stopped while connecting to the database at %s: %w", d.where, ctx.Err())
		}
		check := opts.flag()
		if opts.Env != "" {
			check += " (" + opts.Env + ")"
		}
		return nil, fmt.Errorf("cannot reach the database at %s: %v; check %s and that the server is running",
			d.where, redact.In(strings.Join(strings.Fields(err.Error()), " "), raw), check)
	}
	return d, nil
}

// openPostgres connects d's pool, creating the search_path schema first
// when opts asks.
func (d *DB) openPostgres(ctx context.Context, u URL, opts Options) error {
	cfg, err := pgxpool.ParseConfig(u.Conn)
	if err != nil {
		return fmt.Errorf("%s is malformed (%v): use postgres://user:password@host:5432/database", opts.flag(), redact.In(err.Error(), u.Conn))
	}
	cfg.ConnConfig.ConnectTimeout = ConnectTimeout
	if opts.ConnectTimeout > 0 {
		cfg.ConnConfig.ConnectTimeout = opts.ConnectTimeout
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns, cfg.MinConns = int32(opts.MaxConns), 0
		cfg.MaxConnIdleTime, cfg.HealthCheckPeriod = idleConnTime, idleConnTime/2
	}
	if opts.CreateSchema {
		if err := createSchema(ctx, cfg.ConnConfig); err != nil {
			return fmt.Errorf("database %s: %w", d.where, err)
		}
	}
	if d.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return fmt.Errorf("database %s: %w", d.where, err)
	}
	drv := postgres.NewSQLDriver(d.pool)
	d.Driver, d.sql = drv, drv.DB()
	listen := opts.ListenURL
	if listen == "" {
		listen = u.Conn
	}
	d.notifier = func(log *slog.Logger) (store.Notifier, error) { return postgres.NewNotifier(listen, log) }
	return nil
}

// Notifier returns the dialect's wake-ups (see store.Database.Notifier);
// on PostgreSQL it LISTENs on Options.ListenURL.
func (d *DB) Notifier(log *slog.Logger) (store.Notifier, error) {
	if d.notifier != nil {
		return d.notifier(log)
	}
	return d.Driver.Notifier(log)
}

// SQL returns the *sql.DB the driver's transactions run on.
func (d *DB) SQL() *sql.DB { return d.sql }

// String returns where the database is: its URL without the password, or
// the SQLite file's absolute path.
func (d *DB) String() string { return d.where }

// Close closes the connections Open opened.
func (d *DB) Close() {
	if d.sql != nil {
		_ = d.sql.Close()
	}
	if d.pool != nil {
		d.pool.Close()
	}
}

// createSchema creates the first schema of the connection's search_path,
// if it names one.
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
// everything in it. It does nothing for the URLs of other dialects and for
// a PostgreSQL URL without search_path.
func DropSchema(ctx context.Context, raw string) error {
	u, err := Parse(raw, Options{BarePaths: true})
	if err != nil || u.Dialect != "postgres" {
		return err
	}
	cfg, err := pgx.ParseConfig(u.Conn)
	if err != nil {
		return err
	}
	cfg.ConnectTimeout = ConnectTimeout
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
// schema. It fails for the URLs of other dialects.
func WithSchema(base, schema string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("%q is not a postgres:// URL", Redact(base))
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// firstSchema returns the first schema of a search_path value, unquoted,
// or "" when it names none.
func firstSchema(searchPath string) string {
	first, _, _ := strings.Cut(searchPath, ",")
	return strings.Trim(strings.TrimSpace(first), `"`)
}

// Redact returns raw with what may be secret replaced by xxxxx: the
// password of the user information, the values of parameters such as
// password and sslpassword, and the like, whether or not raw parses (a
// password holding an unencoded /, ? or # included). It applies Courier's
// one redaction rule, which brokerurl.Redact, the CLI and the dashboard
// apply too; docs/operations.md ("Secrets in URLs") states it.
func Redact(raw string) string { return redact.URL(raw) }
