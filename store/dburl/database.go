package dburl

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/courier-go/courier/internal/redact"
)

// maintenanceDB is the PostgreSQL database CreateDatabase and DropDatabase
// connect to: every server has it.
const maintenanceDB = "postgres"

// WithDatabase returns the postgres:// or mysql:// URL base with its
// database replaced by name, its user, password, hosts and parameters
// kept. It fails for the URLs of other dialects and an empty name.
func WithDatabase(base, name string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql" && u.Scheme != "mysql") {
		return "", fmt.Errorf("%q is not a postgres:// or mysql:// URL", Redact(base))
	}
	if name == "" || strings.Contains(name, "/") {
		return "", fmt.Errorf("database name %q: use a name without '/'", name)
	}
	u.Path, u.RawPath = "/"+name, ""
	return u.String(), nil
}

// CreateDatabase creates the database a postgres:// or mysql:// URL names
// when it does not exist, and reports whether it did; an existing database
// is left as it is. It connects as the URL's user, on PostgreSQL to the
// server's database postgres, so that user needs the right to create
// databases (CREATEDB on PostgreSQL, CREATE on MySQL). It fails for a
// SQLite URL: Open with Options.Create creates the file.
func CreateDatabase(ctx context.Context, raw string) (created bool, err error) {
	u, name, err := serverDatabase(raw)
	if err != nil {
		return false, err
	}
	if u.Dialect == "mysql" {
		err = onMySQLServer(ctx, u, func(db *sql.DB) error {
			res, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+mysqlIdent(name))
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			created = n > 0 // 0, with a warning, when it exists
			return err
		})
	} else {
		err = onPostgresServer(ctx, u, func(conn *pgx.Conn) error {
			var exists bool
			if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil || exists {
				return err
			}
			_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: created meanwhile
				return nil
			}
			created = err == nil
			return err
		})
	}
	if err != nil {
		return false, fmt.Errorf("create database %s: %w", name, err)
	}
	return created, nil
}

// DropDatabase drops the database a postgres:// or mysql:// URL names, with
// everything in it, when it exists. On PostgreSQL it ends the database's
// sessions first (DROP DATABASE … WITH (FORCE), PostgreSQL 13 and later),
// connected to the server's database postgres. It fails for a SQLite URL:
// remove the file.
func DropDatabase(ctx context.Context, raw string) error {
	u, name, err := serverDatabase(raw)
	if err != nil {
		return err
	}
	if u.Dialect == "mysql" {
		err = onMySQLServer(ctx, u, func(db *sql.DB) error {
			_, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+mysqlIdent(name))
			return err
		})
	} else {
		err = onPostgresServer(ctx, u, func(conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// serverDatabase parses raw, a postgres:// or mysql:// URL, and returns it
// with the name of its database.
func serverDatabase(raw string) (URL, string, error) {
	u, err := Parse(raw, Options{})
	if err != nil {
		return URL{}, "", err
	}
	var name string
	switch u.Dialect {
	case "postgres":
		cfg, err := pgx.ParseConfig(u.Conn)
		if err != nil {
			return URL{}, "", fmt.Errorf("%s is malformed (%v): use postgres://user:password@host:5432/database", u.Where, redact.In(err.Error(), raw))
		}
		name = cfg.Database
	case "mysql":
		cfg, err := gomysql.ParseDSN(u.Conn)
		if err != nil {
			return URL{}, "", fmt.Errorf("%s is malformed (%v): use mysql://user:password@host:3306/database", u.Where, redact.In(err.Error(), raw))
		}
		name = cfg.DBName
	default:
		return URL{}, "", fmt.Errorf("%s names a SQLite file, not a database on a server: use a postgres:// or mysql:// URL", u.Where)
	}
	if name == "" {
		return URL{}, "", fmt.Errorf("%s names no database: use %s", u.Where, Forms)
	}
	return u, name, nil
}

// onPostgresServer runs fn on a connection to the server of u, a
// PostgreSQL URL, in its database postgres.
func onPostgresServer(ctx context.Context, u URL, fn func(conn *pgx.Conn) error) error {
	cfg, err := pgx.ParseConfig(u.Conn)
	if err != nil {
		return err
	}
	cfg.Database, cfg.ConnectTimeout = maintenanceDB, ConnectTimeout
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to the server of %s: %w", u.Where, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return fn(conn)
}

// onMySQLServer runs fn on a connection to the server of u, a MySQL URL,
// in no database.
func onMySQLServer(ctx context.Context, u URL, fn func(db *sql.DB) error) error {
	cfg, err := gomysql.ParseDSN(u.Conn)
	if err != nil {
		return err
	}
	cfg.DBName = ""
	if cfg.Timeout == 0 {
		cfg.Timeout = ConnectTimeout
	}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("connect to the server of %s: %w", u.Where, err)
	}
	return fn(db)
}

// mysqlIdent quotes a MySQL identifier.
func mysqlIdent(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }
