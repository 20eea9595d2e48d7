package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/courier-go/courier/store/dburl"
)

// defaultDatabase is the embedded default's SQLite file.
const defaultDatabase = "courier.db"

// dbFlags selects the database.
type dbFlags struct {
	DatabaseURL string `name:"database-url" help:"Database URL: postgres://…, mysql://…, sqlite:///path/file.db or file:path.db. Default: the embedded ./courier.db (SQLite). With tenants, the fleet's own database: the catalogue --tenants-query reads, and where relays sharing the tenants keep their heartbeats." env:"COURIER_DATABASE_URL"`
	tenantFlags
}

// urlOptions are how the commands read --database-url.
var urlOptions = dburl.Options{Flag: "--database-url", Env: "COURIER_DATABASE_URL"}

// dialect returns the dialect --database-url names, sqlite (the embedded
// default) without one.
func (f dbFlags) dialect() (string, error) {
	if f.DatabaseURL == "" {
		return "sqlite", nil
	}
	u, err := dburl.Parse(f.DatabaseURL, urlOptions)
	return u.Dialect, err
}

// open connects to the database and checks that it answers: with tenants,
// the database of the one --tenant names. With no URL it opens the
// embedded default, ./courier.db, which must exist unless create.
// listenURL is the URL PostgreSQL's notifier listens on ("" for the
// database URL).
func (f dbFlags) open(ctx context.Context, create bool, listenURL string) (*dburl.DB, error) {
	if err := f.checkTenants(); err != nil {
		return nil, err
	}
	if f.tenanted() {
		t, err := f.chosenTenant(ctx)
		if err != nil {
			return nil, err
		}
		return dburl.Open(ctx, t.URL, tenantOptions(t, create))
	}
	raw := f.DatabaseURL
	if raw == "" {
		if _, err := os.Stat(defaultDatabase); err != nil && !create {
			return nil, fmt.Errorf("no database given and ./%s does not exist: pass --database-url (or COURIER_DATABASE_URL: %s), or start the embedded default with courier relay", defaultDatabase, dburl.Forms)
		}
		raw = "sqlite:" + defaultDatabase
	}
	opts := urlOptions
	opts.Create, opts.ListenURL = create, listenURL
	d, err := dburl.Open(ctx, raw, opts)
	if errors.Is(err, dburl.ErrNoFile) {
		return nil, fmt.Errorf("%v, or run courier migrate to create it", err)
	}
	return d, err
}
