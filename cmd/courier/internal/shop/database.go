package shop

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/courier-go/courier/store/dburl"
)

// serviceDB is one service's database. Every service works in *sql.Tx,
// whatever the dialect, so one code path serves all of them: Courier's
// stores come from the store.Driver, and the services' own statements are
// written with ? placeholders that q rewrites for the dialect. Only the DDL
// of the services' tables differs (schema.go).
type serviceDB struct {
	*dburl.DB
	sql *sql.DB
}

// openDB opens the database at rawURL (see Config.DatabaseURL), creating a
// SQLite file or a PostgreSQL schema (search_path) when it is missing, and
// checks that it answers.
func openDB(ctx context.Context, rawURL string) (*serviceDB, error) {
	d, err := dburl.Open(ctx, rawURL, dburl.Options{BarePaths: true, Create: true, CreateSchema: true})
	if err != nil {
		return nil, err
	}
	return &serviceDB{d, d.SQL()}, nil
}

// q rewrites a statement written with ? placeholders for the dialect.
func (d *serviceDB) q(query string) string { return d.Rebind(query) }

// migrate applies Courier's migrations, then the service's own tables.
func (d *serviceDB) migrate(ctx context.Context, tables []string) error {
	if _, err := d.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate %s: %w", d, err)
	}
	for _, t := range tables {
		if _, err := d.sql.ExecContext(ctx, ddl(d.Dialect(), t)); err != nil {
			return fmt.Errorf("create the service's tables in %s: %w", d, err)
		}
	}
	return nil
}
