package mysql

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

// maxConsumer is the longest consumer name courier_inbox holds, in bytes.
const maxConsumer = 255

// checkConsumer refuses a consumer name the schema would truncate (outside
// strict mode) or reject.
func checkConsumer(consumer string) error {
	if len(consumer) > maxConsumer {
		return fmt.Errorf("consumer name of %d bytes: courier_inbox holds names of up to %d bytes; choose a shorter one", len(consumer), maxConsumer)
	}
	return nil
}

// markSQL inserts a dedup marker unless it exists. INSERT IGNORE ignores the
// duplicate only after the transaction that inserted it ended: while it is
// open, InnoDB makes this insert wait for its row lock, so a concurrent
// delivery of the same message waits for the first, then finds its marker
// (or, when the first rolled back, inserts its own). IGNORE also turns other
// errors into warnings, which is why the consumer name is checked first and
// the message id is always 36 characters.
const markSQL = `INSERT IGNORE INTO courier_inbox (consumer, message_id, processed_at) VALUES (?, ?, UTC_TIMESTAMP(6))`

// SQLInbox returns the inbox for handlers that work in database/sql
// transactions on db. Transactions run at the server's default isolation
// level (REPEATABLE READ unless configured otherwise): the marker behaves the
// same at every level. A duplicate waits for the first delivery's
// transaction at most innodb_lock_wait_timeout (50 s by default), then fails
// and is retried by the consumer. processed_at is the server's
// UTC_TIMESTAMP(6).
func SQLInbox(db *sql.DB) store.Inbox[*sql.Tx] { return sqlInbox{db} }

type sqlInbox struct{ db *sql.DB }

func (i sqlInbox) InTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return inTx(ctx, i.db, nil, "mysql: ", fn)
}

func (sqlInbox) Mark(ctx context.Context, tx *sql.Tx, consumer string, id uuid.UUID) (bool, error) {
	if err := checkConsumer(consumer); err != nil {
		return false, fmt.Errorf("mysql: inbox marker: %w", err)
	}
	res, err := tx.ExecContext(ctx, markSQL, consumer, id.String())
	if err != nil {
		return false, fmt.Errorf("mysql: inbox marker: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("mysql: inbox marker: %w", err)
	}
	return n == 1, nil
}

// inTx runs fn in a database/sql transaction on db and commits it when fn
// returns nil. fn's error is returned as it is; those of BEGIN and COMMIT
// start with prefix, which the callers that wrap the error leave empty. The
// transaction is rolled back whenever it is not committed, also when fn
// panics: left open, it would keep its locks and its connection.
func inTx(ctx context.Context, db *sql.DB, opts *sql.TxOptions, prefix string, fn func(*sql.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("%sbegin: %w", prefix, err)
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
		return fmt.Errorf("%scommit: %w", prefix, err)
	}
	return nil
}

// ConsumerStore returns the store of parked deliveries and inbox markers on
// db. parked_at and the times of failed replays are the server's clock.
func ConsumerStore(db *sql.DB) store.ConsumerStore { return consumerStore{db} }

type consumerStore struct{ db *sql.DB }

const parkSQL = `INSERT INTO courier_inbox_dead_letters
    (consumer, message_id, subject, headers, payload, reason, last_error, attempts, history, parked_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6))`

func (c consumerStore) Park(ctx context.Context, p store.Parked) error {
	if err := checkConsumer(p.Consumer); err != nil {
		return fmt.Errorf("mysql: park delivery: %w", err)
	}
	headers, err := jsonOrNull(p.Headers, len(p.Headers))
	if err != nil {
		return fmt.Errorf("mysql: park delivery: encode headers: %w", err)
	}
	hist, err := jsonOrNull(p.History, len(p.History))
	if err != nil {
		return fmt.Errorf("mysql: park delivery: encode history: %w", err)
	}
	_, err = c.db.ExecContext(ctx, parkSQL, p.Consumer, p.MessageID, p.Subject, headers, columns.Payload(p.Payload),
		p.Reason, p.Error, p.Attempts, hist)
	if err != nil {
		return fmt.Errorf("mysql: park delivery: %w", err)
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
		p             store.Parked
		headers, hist []byte
		replay        time.Time
	)
	replayed := utcTime{t: &replay}
	err := row.Scan(&p.ID, &p.Consumer, &p.MessageID, &p.Subject, &headers, &p.Payload, &p.Reason, &p.Error,
		&p.Attempts, &hist, &utcTime{t: &p.ParkedAt}, &replayed)
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
	if replayed.valid {
		p.ReplayRequested = &replay
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
		return nil, fmt.Errorf("mysql: parked deliveries to replay: %w", err)
	}
	return ps, nil
}

func (c consumerStore) Unpark(ctx context.Context, id int64) error {
	if _, err := c.db.ExecContext(ctx, `DELETE FROM courier_inbox_dead_letters WHERE id = ?`, id); err != nil {
		return fmt.Errorf("mysql: unpark delivery %d: %w", id, err)
	}
	return nil
}

// replayFailedSQL appends an entry to the history, in the format of the
// relay's histories.
const replayFailedSQL = `UPDATE courier_inbox_dead_letters
SET replay_requested = NULL, last_error = ?, attempts = attempts + 1,
    history = JSON_ARRAY_APPEND(COALESCE(history, JSON_ARRAY()), '$',
        JSON_OBJECT('at', DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%dT%H:%i:%s.%fZ'), 'error', ?))
WHERE id = ?`

func (c consumerStore) ReplayFailed(ctx context.Context, id int64, msg string) error {
	if _, err := c.db.ExecContext(ctx, replayFailedSQL, msg, msg, id); err != nil {
		return fmt.Errorf("mysql: record failed replay of %d: %w", id, err)
	}
	return nil
}

// deleteMarkersSQL deletes the oldest markers first, along the index on
// processed_at.
const deleteMarkersSQL = `DELETE FROM courier_inbox WHERE processed_at < ? ORDER BY processed_at LIMIT ?`

func (c consumerStore) DeleteMarkers(ctx context.Context, before time.Time, limit int) (int64, error) {
	res, err := c.db.ExecContext(ctx, deleteMarkersSQL, formatTime(before), limit)
	if err != nil {
		return 0, fmt.Errorf("mysql: delete inbox markers: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("mysql: delete inbox markers: %w", err)
	}
	return n, nil
}
