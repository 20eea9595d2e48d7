package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// relayStore is the relay's view of a MySQL or MariaDB outbox
// ([Driver.RelayStore]). It is safe for concurrent use by any number of
// relays in any number of processes.
type relayStore struct {
	db *sql.DB
	// keepPublished copies each published message into
	// courier_outbox_published (with published_at) instead of only
	// deleting it.
	keepPublished bool
	// clock is the time lease ends, retry times and claim turns are
	// compared with and computed from; nil is the server's
	// UTC_TIMESTAMP(6).
	clock store.Clock
}

var _ store.RelayStore = (*relayStore)(nil)

// newRelayStore checks that the server has what claims need (JSON_TABLE)
// and returns the relay's store on db.
func newRelayStore(ctx context.Context, db *sql.DB, cfg store.RelayConfig, clock store.Clock) (store.RelayStore, error) {
	if err := checkServer(ctx, db); err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	return &relayStore{db: db, keepPublished: cfg.KeepPublished, clock: clock}, nil
}

// readCommitted is every transaction's isolation in the relay's store: each
// read sees the latest committed rows.
func readCommitted() *sql.TxOptions { return &sql.TxOptions{Isolation: sql.LevelReadCommitted} }

// inList returns "?, ?, …" for ids and the ids as arguments.
func inList(ids []int64) (string, []any) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", "), args
}

// exec runs the statement query on q at the store's clock (see clocked).
func (s *relayStore) exec(ctx context.Context, q sqltx.Conn, query string, args ...any) (sql.Result, error) {
	query, args = clocked(s.clock, query, args...)
	return q.ExecContext(ctx, query, args...)
}
