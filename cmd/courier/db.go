package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// dbFlags selects the database.
type dbFlags struct {
	DatabaseURL string `name:"database-url" help:"PostgreSQL URL of the application database, e.g. postgres://user@localhost:5432/app." env:"COURIER_DATABASE_URL"`
}

// connect opens a pool and checks that the database answers, turning
// failures into one line that says what to fix.
func (f dbFlags) connect(ctx context.Context) (*pgxpool.Pool, error) {
	if f.DatabaseURL == "" {
		return nil, fmt.Errorf("no database given: set --database-url or COURIER_DATABASE_URL, e.g. postgres://user@localhost:5432/app")
	}
	if !strings.HasPrefix(f.DatabaseURL, "postgres://") && !strings.HasPrefix(f.DatabaseURL, "postgresql://") {
		return nil, fmt.Errorf("--database-url %q is not a PostgreSQL URL: use postgres://user:password@host:5432/database", redact(f.DatabaseURL))
	}
	cfg, err := pgxpool.ParseConfig(f.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("--database-url is malformed (%v): use postgres://user:password@host:5432/database", err)
	}
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database %s: %w", redact(f.DatabaseURL), err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach the database at %s: %v; check --database-url (COURIER_DATABASE_URL) and that PostgreSQL is running",
			redact(f.DatabaseURL), oneLine(err))
	}
	return pool, nil
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

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
