package dburl

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Schema returns the schema a postgres:// URL's search_path names first,
// unquoted: "" for the URLs of other dialects and a PostgreSQL URL without
// search_path.
func Schema(raw string) (string, error) {
	cfg, err := schemaConfig(raw)
	if cfg == nil {
		return "", err
	}
	return firstSchema(cfg.RuntimeParams["search_path"]), nil
}

// schemaConfig returns the connection settings of a postgres:// URL that
// names a schema, nil for other URLs.
func schemaConfig(raw string) (*pgx.ConnConfig, error) {
	u, err := Parse(raw, Options{BarePaths: true})
	if err != nil || u.Dialect != "postgres" {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(u.Conn)
	if err != nil {
		return nil, err
	}
	if firstSchema(cfg.RuntimeParams["search_path"]) == "" {
		return nil, nil
	}
	cfg.ConnectTimeout = ConnectTimeout
	return cfg, nil
}

// schemaConn connects to the database of a postgres:// URL and returns the
// schema its search_path names first; conn is nil (and nothing is done)
// for the URLs of other dialects and a PostgreSQL URL without search_path.
func schemaConn(ctx context.Context, raw string) (conn *pgx.Conn, schema string, err error) {
	cfg, err := schemaConfig(raw)
	if cfg == nil {
		return nil, "", err
	}
	schema = firstSchema(cfg.RuntimeParams["search_path"])
	if conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
		return nil, "", fmt.Errorf("connect to %s: %w", Redact(raw), err)
	}
	return conn, schema, nil
}

// schemaComment reads whether schema exists and its comment ("" when it
// has none).
func schemaComment(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema string) (exists bool, comment string, err error) {
	var c *string
	err = q.QueryRow(ctx, `SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1`, schema).Scan(&c)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("look up schema %s: %w", schema, err)
	}
	if c != nil {
		comment = *c
	}
	return true, comment, nil
}

// SchemaMarked reports whether the schema a postgres:// URL's search_path
// names exists, and whether its comment (COMMENT ON SCHEMA) is mark: the
// mark a program gave the schemas it created (CreateSchema), which tells
// them from others' schemas. Both are false for the URLs of other dialects
// and a PostgreSQL URL without search_path.
func SchemaMarked(ctx context.Context, raw, mark string) (exists, marked bool, err error) {
	conn, schema, err := schemaConn(ctx, raw)
	if conn == nil {
		return false, false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	exists, comment, err := schemaComment(ctx, conn, schema)
	return exists, exists && comment == mark, err
}

// CreateSchema creates the schema a postgres:// URL's search_path names,
// with mark as its comment, unless it exists (an existing schema is left
// as it is, its comment too), and reports whether it created it. It does
// nothing for the URLs of other dialects and a PostgreSQL URL without
// search_path.
func CreateSchema(ctx context.Context, raw, mark string) (created bool, err error) {
	conn, schema, err := schemaConn(ctx, raw)
	if conn == nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		exists, _, err := schemaComment(ctx, tx, schema)
		if err != nil || exists {
			return err
		}
		if _, err := tx.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return fmt.Errorf("create schema %s: %w", schema, err)
		}
		// COMMENT takes no parameters: the server quotes the mark.
		var stmt string
		if err := tx.QueryRow(ctx, `SELECT format('COMMENT ON SCHEMA %I IS %L', $1::text, $2::text)`, schema, mark).Scan(&stmt); err != nil {
			return fmt.Errorf("mark schema %s: %w", schema, err)
		}
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("mark schema %s: %w", schema, err)
		}
		created = true
		return nil
	})
	return created, err
}

// DropMarkedSchema drops the schema a postgres:// URL's search_path names,
// with everything in it, when its comment is mark (see CreateSchema), and
// reports whether it did; a schema without the mark is left as it is. It
// does nothing for the URLs of other dialects and a PostgreSQL URL without
// search_path.
func DropMarkedSchema(ctx context.Context, raw, mark string) (dropped bool, err error) {
	conn, schema, err := schemaConn(ctx, raw)
	if conn == nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		exists, comment, err := schemaComment(ctx, tx, schema)
		if err != nil || !exists || comment != mark {
			return err
		}
		if _, err := tx.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			return fmt.Errorf("drop schema %s: %w", schema, err)
		}
		dropped = true
		return nil
	})
	return dropped, err
}
