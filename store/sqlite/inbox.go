package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
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
func SQLInbox(db *sql.DB) store.Inbox[*sql.Tx] { return &sqlInbox{db: db, turn: newQueue()} }

type sqlInbox struct {
	db   *sql.DB
	turn queue
}

func (i *sqlInbox) InTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return i.turn.run(ctx, func() error { return inTx(ctx, i.db, fn) })
}

func (*sqlInbox) Mark(ctx context.Context, tx *sql.Tx, consumer string, id uuid.UUID) (bool, error) {
	res, err := tx.ExecContext(ctx, markSQL, consumer, id.String(), time.Now().UnixMicro())
	if err != nil {
		return false, fmt.Errorf("sqlite: inbox marker: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlite: inbox marker: %w", err)
	}
	return n == 1, nil
}

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

// inTx runs fn in a database/sql transaction on db and commits it when fn
// returns nil. With [Open]'s DSN the transaction begins with BEGIN
// IMMEDIATE. The transaction is rolled back whenever it is not committed,
// also when fn panics: left open, it would keep the database's write lock.
func inTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: begin: %w", err)
	}
	defer func() {
		if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) && err != nil {
			err = errors.Join(err, rerr)
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: commit: %w", err)
	}
	return nil
}

// ConsumerStore returns the store of parked deliveries and inbox markers on
// db. parked_at and the history's times are this process's clock.
func ConsumerStore(db *sql.DB) store.ConsumerStore { return consumerStore{db} }

type consumerStore struct{ db *sql.DB }

const parkSQL = `INSERT INTO courier_inbox_dead_letters
    (consumer, message_id, subject, headers, payload, reason, last_error, attempts, history, parked_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

func (c consumerStore) Park(ctx context.Context, p store.Parked) error {
	headers, err := jsonOrNull(p.Headers, len(p.Headers))
	if err != nil {
		return fmt.Errorf("sqlite: park delivery: encode headers: %w", err)
	}
	hist, err := jsonOrNull(p.History, len(p.History))
	if err != nil {
		return fmt.Errorf("sqlite: park delivery: encode history: %w", err)
	}
	_, err = c.db.ExecContext(ctx, parkSQL, p.Consumer, p.MessageID, p.Subject, headers, columns.Payload(p.Payload),
		p.Reason, p.Error, p.Attempts, hist, time.Now().UnixMicro())
	if err != nil {
		return fmt.Errorf("sqlite: park delivery: %w", err)
	}
	return nil
}

// jsonOrNull encodes v as JSON text, or returns nil (NULL) when n, its
// length, is 0.
func jsonOrNull(v any, n int) (any, error) {
	if n == 0 {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

const parkedColumns = `id, consumer, message_id, subject, headers, payload, reason, last_error, attempts, history, parked_at, replay_requested`

func scanParked(row interface{ Scan(...any) error }) (store.Parked, error) {
	var (
		p               store.Parked
		headers, hist   []byte
		parked          int64
		replayRequested sql.NullInt64
	)
	err := row.Scan(&p.ID, &p.Consumer, &p.MessageID, &p.Subject, &headers, &p.Payload, &p.Reason, &p.Error,
		&p.Attempts, &hist, &parked, &replayRequested)
	if err != nil {
		return p, err
	}
	if len(headers) > 0 {
		if err := json.Unmarshal(headers, &p.Headers); err != nil {
			return p, fmt.Errorf("headers of parked delivery %d: %w", p.ID, err)
		}
	}
	if len(hist) > 0 {
		if err := json.Unmarshal(hist, &p.History); err != nil {
			return p, fmt.Errorf("history of parked delivery %d: %w", p.ID, err)
		}
	}
	if p.Payload == nil {
		p.Payload = []byte{}
	}
	p.ParkedAt = time.UnixMicro(parked).UTC()
	if replayRequested.Valid {
		t := time.UnixMicro(replayRequested.Int64).UTC()
		p.ReplayRequested = &t
	}
	return p, nil
}

// queryParked runs a query of parkedColumns.
func queryParked(ctx context.Context, db *sql.DB, query string, args ...any) ([]store.Parked, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Parked
	for rows.Next() {
		p, err := scanParked(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

func (c consumerStore) ReplayRequested(ctx context.Context, consumer string, limit int) ([]store.Parked, error) {
	ps, err := queryParked(ctx, c.db, `SELECT `+parkedColumns+` FROM courier_inbox_dead_letters
WHERE consumer = ? AND replay_requested IS NOT NULL ORDER BY id LIMIT ?`, consumer, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: parked deliveries to replay: %w", err)
	}
	return ps, nil
}

func (c consumerStore) Unpark(ctx context.Context, id int64) error {
	if _, err := c.db.ExecContext(ctx, `DELETE FROM courier_inbox_dead_letters WHERE id = ?`, id); err != nil {
		return fmt.Errorf("sqlite: unpark delivery %d: %w", id, err)
	}
	return nil
}

// replayFailedSQL appends ?3, a JSON history entry, to the history. json()
// makes the parameter JSON, not a string holding JSON.
const replayFailedSQL = `UPDATE courier_inbox_dead_letters
SET replay_requested = NULL, last_error = ?2, attempts = attempts + 1,
    history = json_insert(coalesce(history, '[]'), '$[#]', json(?3))
WHERE id = ?1`

func (c consumerStore) ReplayFailed(ctx context.Context, id int64, msg string) error {
	entry, err := json.Marshal(store.Attempt{At: time.Now().UTC().Truncate(time.Microsecond), Error: msg})
	if err != nil {
		return fmt.Errorf("sqlite: record failed replay of %d: %w", id, err)
	}
	if _, err := c.db.ExecContext(ctx, replayFailedSQL, id, msg, string(entry)); err != nil {
		return fmt.Errorf("sqlite: record failed replay of %d: %w", id, err)
	}
	return nil
}

const deleteMarkersSQL = `DELETE FROM courier_inbox WHERE (consumer, message_id) IN (
    SELECT consumer, message_id FROM courier_inbox WHERE processed_at < ? LIMIT ?)`

func (c consumerStore) DeleteMarkers(ctx context.Context, before time.Time, limit int) (int64, error) {
	res, err := c.db.ExecContext(ctx, deleteMarkersSQL, before.UnixMicro(), limit)
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete inbox markers: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete inbox markers: %w", err)
	}
	return n, nil
}
