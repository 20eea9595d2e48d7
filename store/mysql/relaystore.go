package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"sync"

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
	// takeovers are this store's leases claimed while another lease had
	// expired: their rows may be held by the expired lease's relay, frozen
	// while it records them, and their Complete locks the rows it can
	// first (see lockRowsSQL). A lease leaves it when it is recorded.
	takeovers sync.Map // lease id (int64) → struct{}
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

// idsIn returns the condition "id is one of ids" for a statement's text:
// runs of consecutive ids as ranges, the others as a list, as in
// "(id BETWEEN 1 AND 998 OR id IN (1000,1003))". A claim's ids mostly run
// in a row; MariaDB reads a range of the primary key in one pass, where it
// analyses and looks up 1,000 listed ids one by one (a claim's row read
// took 4 times as long). The ids are integers written by strconv, safe in
// the text; a statement without arguments also goes to the server as one
// query, where 1,000 placeholders cost a server-side prepare, its parse
// and a second round trip.
func idsIn(ids []int64) string {
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	var ranges, list []byte
	for i := 0; i < len(sorted); {
		j := i
		for j+1 < len(sorted) && sorted[j+1] == sorted[j]+1 {
			j++
		}
		if j > i {
			if len(ranges) > 0 {
				ranges = append(ranges, " OR "...)
			}
			ranges = append(ranges, "id BETWEEN "...)
			ranges = strconv.AppendInt(ranges, sorted[i], 10)
			ranges = append(ranges, " AND "...)
			ranges = strconv.AppendInt(ranges, sorted[j], 10)
		} else {
			if len(list) > 0 {
				list = append(list, ',')
			}
			list = strconv.AppendInt(list, sorted[i], 10)
		}
		i = j + 1
	}
	switch {
	case len(list) == 0:
		return "(" + string(ranges) + ")"
	case len(ranges) == 0:
		return "id IN (" + string(list) + ")"
	}
	return "(" + string(ranges) + " OR id IN (" + string(list) + "))"
}

// exec runs the statement query on q at the store's clock (see clocked).
func (s *relayStore) exec(ctx context.Context, q sqltx.Conn, query string, args ...any) (sql.Result, error) {
	query, args = clocked(s.clock, query, args...)
	return q.ExecContext(ctx, query, args...)
}
