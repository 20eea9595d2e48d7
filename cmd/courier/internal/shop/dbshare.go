package shop

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/courier-go/courier/store"
)

// database is an incarnation's use of its service's database: the handle,
// the relay's store and the inbox's.
type database struct {
	*serviceDB
	relay store.RelayStore
	inbox store.Inbox[*sql.Tx]
}

// dbShare is the database the instances of a service in this process
// share, when it runs one write transaction at a time.
type dbShare struct {
	db    *database
	users int
}

// openDatabase returns the incarnation's database, opened and migrated,
// and release, to call once the incarnation has stopped.
//
// On a server database each incarnation opens its own, as a process of its
// own would. On one that runs one write transaction at a time (SQLite),
// the instances of the service in this process share one: its pool, its
// relay store and its inbox, whose transactions then take turns in the
// process, as store/sqlite asks of the relays and consumers of one process,
// rather than through SQLite's busy handler, which is not fair and can
// keep a writer waiting for seconds (see store/sqlite, Several relays). It
// is closed once the last of them released it.
func (b *base) openDatabase(ctx context.Context) (*database, func(), error) {
	b.dbMu.Lock()
	defer b.dbMu.Unlock()
	if s := b.shared; s != nil {
		s.users++
		return s.db, b.releaseShared, nil
	}
	var db *serviceDB
	err := retry(ctx, func() error {
		var err error
		db, err = openDB(ctx, b.cfg.DatabaseURL)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("shop %s: %w", b.name, err)
	}
	d, err := b.prepare(ctx, db)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("shop %s: %w", b.name, err)
	}
	if !db.SerialWrites() {
		return d, db.Close, nil
	}
	b.shared = &dbShare{db: d, users: 1}
	return d, b.releaseShared, nil
}

// prepare migrates db with the service's tables and makes its relay and
// inbox stores.
func (b *base) prepare(ctx context.Context, db *serviceDB) (*database, error) {
	if err := retry(ctx, func() error { return db.migrate(ctx, b.spec.tables) }); err != nil {
		return nil, err
	}
	st, err := db.RelayStore(ctx, store.RelayConfig{})
	if err != nil {
		return nil, fmt.Errorf("relay store: %w", err)
	}
	return &database{serviceDB: db, relay: st, inbox: db.Inbox()}, nil
}

// releaseShared releases a use of the shared database, closing it after
// the last.
func (b *base) releaseShared() {
	b.dbMu.Lock()
	defer b.dbMu.Unlock()
	if s := b.shared; s != nil {
		if s.users--; s.users == 0 {
			s.db.Close()
			b.shared = nil
		}
	}
}

// retry runs fn up to three times, 100ms apart, until it succeeds: the
// instances of a service that start at once open, create and fill the
// same database, and the one that loses a race finds the work done the
// next time (SQLite can answer SQLITE_BUSY to an open beside another that
// sets the file up; PostgreSQL can fail a CREATE TABLE IF NOT EXISTS that
// runs beside another on its catalog's unique index; of two inserts of
// one row, the second fails).
func retry(ctx context.Context, fn func() error) error {
	var err error
	for range 3 {
		if err = fn(); err == nil || !sleep(ctx, 100*time.Millisecond) {
			return err
		}
	}
	return err
}
