package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// relayStore is the relay's view of a SQLite outbox ([Driver.RelayStore]).
// It is safe for concurrent use by any number of relays in any number of
// processes that share the database file.
//
// It queues its claims and completions in the process, where the next one
// starts as soon as the previous one commits; separate relay stores (like
// separate processes) queue through SQLite's busy handler instead, which
// polls the lock with sleeps of 1 to 100 ms.
//
// Every statement takes the current time (Go's clock, or the store's, as
// Unix microseconds) as a parameter; see the package documentation.
type relayStore struct {
	db *sql.DB
	// keepPublished copies each published message into
	// courier_outbox_published (with published_at) instead of only
	// deleting it.
	keepPublished bool
	// clock is the time lease ends and retry times are compared with and
	// computed from, and the time the store records; nil is this process's
	// time.Now.
	clock store.Clock
	turn  sqltx.Queue // one transaction of this store at a time
}

var _ store.RelayStore = (*relayStore)(nil)

// newRelayStore checks that db's connections wait for the write lock (a
// busy timeout, as [Open] sets) and returns the relay's store on db.
func newRelayStore(ctx context.Context, db *sql.DB, cfg store.RelayConfig, clock store.Clock) (store.RelayStore, error) {
	var busy int64
	if err := db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
		return nil, fmt.Errorf("sqlite: read busy_timeout: %w", err)
	}
	if busy <= 0 {
		return nil, errors.New("sqlite: the database's connections have no busy_timeout, so concurrent claims and writes fail with SQLITE_BUSY: " +
			"open it with sqlite.Open, or add _pragma=busy_timeout(10000) to the DSN")
	}
	return &relayStore{db: db, keepPublished: cfg.KeepPublished, clock: clock, turn: sqltx.NewQueue()}, nil
}

// write runs fn in an immediate transaction, after the store's previous
// one has ended.
func (s *relayStore) write(ctx context.Context, fn func(conn *sql.Conn) error) error {
	return s.turn.Run(ctx, func() error { return immediate(ctx, s.db, fn) })
}
