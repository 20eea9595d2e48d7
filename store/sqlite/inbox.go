package sqlite

import (
	"context"
	"database/sql"

	"github.com/courier-go/courier/store"
)

// markSQL inserts a dedup marker unless it exists. The transaction it runs
// in holds SQLite's write lock (see SQLInbox), so a concurrent delivery of
// the same message waits for it and then finds the marker.
const markSQL = `INSERT INTO courier_inbox (consumer, message_id, processed_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`

// SQLInbox returns the inbox for handlers that work in database/sql
// transactions on db, a pool opened with [Open] (or with a DSN of your own
// that sets a busy timeout and _txlock=immediate).
//
// InTx begins each transaction with BEGIN IMMEDIATE, taking the database's
// write lock before the marker is inserted: a concurrent delivery of the
// same message, in this process or another, waits for the lock and then
// finds the marker, or, when the first transaction rolled back, applies the
// message itself. The transactions of one inbox queue in the process (see
// [Store]), so share it between the consumers of a process, and do not
// start another of its transactions inside a handler. processed_at is this
// process's clock.
func SQLInbox(db *sql.DB) store.Inbox[*sql.Tx] { return dialect(db, newQueue()).Inbox() }

// queue lines up the write transactions of one inbox or idempotency store
// in this process, as a [Store] does its own: each starts as soon as the
// previous one ends, instead of polling for the write lock through SQLite's
// busy handler, which sleeps up to 100 ms between tries and leaves the lock
// idle meanwhile. Blocked senders on a channel are served in arrival order.
type queue chan struct{}

func newQueue() queue { return make(queue, 1) }

// run calls fn in its turn, or returns ctx's error when ctx ends first.
func (q queue) run(ctx context.Context, fn func() error) error {
	select {
	case q <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-q }()
	return fn()
}

// ConsumerStore returns the store of parked deliveries, failures and inbox
// markers on db. parked_at and the history's times are this process's
// clock; a recorded failure's time is the caller's.
func ConsumerStore(db *sql.DB) store.ConsumerStore {
	return dialect(db, nil).Consumers()
}
