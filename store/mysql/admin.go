package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/courier-go/courier/store"
)

// Admin returns the operators' view of the database behind db: the outbox's
// state and both kinds of dead letters.
func Admin(db *sql.DB) store.Admin { return admin{db} }

type admin struct{ db *sql.DB }

func (a admin) Stats(ctx context.Context) (store.Stats, error) { return Stats(ctx, a.db) }

const deadColumns = `id, message_id, topic, ordering_key, type, version, content_type, payload, headers,
       occurred_at, created_at, attempts, last_error, history, dead_at`

func scanDead(row interface{ Scan(...any) error }) (store.DeadLetter, error) {
	var (
		d             store.DeadLetter
		headers, hist []byte
	)
	err := row.Scan(&d.ID, &d.MessageID, &d.Topic, &d.Key, &d.Type, &d.Version, &d.ContentType, &d.Payload, &headers,
		&utcTime{t: &d.OccurredAt}, &utcTime{t: &d.CreatedAt}, &d.Attempts, &d.LastError, &hist, &utcTime{t: &d.DeadAt})
	if errors.Is(err, sql.ErrNoRows) {
		return d, store.ErrNotFound
	}
	if err != nil {
		return d, err
	}
	if len(headers) > 0 {
		if err := json.Unmarshal(headers, &d.Headers); err != nil {
			return d, fmt.Errorf("headers of dead letter %d: %w", d.ID, err)
		}
	}
	if len(hist) > 0 {
		if err := json.Unmarshal(hist, &d.History); err != nil {
			return d, fmt.Errorf("history of dead letter %d: %w", d.ID, err)
		}
	}
	if d.Payload == nil {
		d.Payload = []byte{}
	}
	return d, nil
}

func (a admin) DeadLetters(ctx context.Context, limit int) ([]store.DeadLetter, error) {
	rows, err := a.db.QueryContext(ctx, `SELECT `+deadColumns+` FROM courier_outbox_dead_letters ORDER BY dead_at, id LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("mysql: list dead letters: %w", err)
	}
	defer rows.Close()
	var out []store.DeadLetter
	for rows.Next() {
		d, err := scanDead(rows)
		if err != nil {
			return nil, fmt.Errorf("mysql: list dead letters: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysql: list dead letters: %w", err)
	}
	return out, nil
}

func (a admin) DeadLetter(ctx context.Context, id int64) (store.DeadLetter, error) {
	d, err := scanDead(a.db.QueryRowContext(ctx, `SELECT `+deadColumns+` FROM courier_outbox_dead_letters WHERE id = ?`, id))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return d, fmt.Errorf("mysql: read dead letter %d: %w", id, err)
	}
	return d, err
}

// replaySQL copies a dead letter back into the outbox under its own id, so
// it keeps its place among its key's messages; attempts start again at 0 and
// the history stays. The id is below the table's AUTO_INCREMENT counter
// (which MySQL 8.0 and MariaDB 10.6 keep across restarts), so no other
// message has it.
const replaySQL = `INSERT INTO courier_outbox (id, message_id, topic, ordering_key, type, version, content_type, payload, headers,
                            occurred_at, created_at, history)
SELECT id, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, history
FROM courier_outbox_dead_letters WHERE id = ?`

// ReplayDeadLetter locks the dead letter first, so concurrent replays of one
// dead letter wait for each other and all but the first find it gone.
func (a admin) ReplayDeadLetter(ctx context.Context, id int64) error {
	err := inTx(ctx, a.db, readCommitted(), "", func(tx *sql.Tx) error {
		var one int64
		err := tx.QueryRowContext(ctx, `SELECT id FROM courier_outbox_dead_letters WHERE id = ? FOR UPDATE`, id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, replaySQL, id); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM courier_outbox_dead_letters WHERE id = ?`, id)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return err
	}
	if err != nil {
		return fmt.Errorf("mysql: replay dead letter %d: %w", id, err)
	}
	return nil
}

func (a admin) DiscardDeadLetter(ctx context.Context, id int64) error {
	return a.one(ctx, "discard dead letter", `DELETE FROM courier_outbox_dead_letters WHERE id = ?`, id)
}

func (a admin) Parked(ctx context.Context, consumer string, limit int) ([]store.Parked, error) {
	ps, err := queryParked(ctx, a.db, `SELECT `+parkedColumns+` FROM courier_inbox_dead_letters
WHERE ? = '' OR consumer = ? ORDER BY id LIMIT ?`, consumer, consumer, limit)
	if err != nil {
		return nil, fmt.Errorf("mysql: list parked messages: %w", err)
	}
	return ps, nil
}

func (a admin) ParkedMessage(ctx context.Context, id int64) (store.Parked, error) {
	p, err := scanParked(a.db.QueryRowContext(ctx, `SELECT `+parkedColumns+` FROM courier_inbox_dead_letters WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return p, store.ErrNotFound
	}
	if err != nil {
		return p, fmt.Errorf("mysql: read parked message %d: %w", id, err)
	}
	return p, nil
}

// RepairParked replaces a parked delivery's message id and headers. As in
// RequestReplay, an UPDATE that changes nothing reports no rows, so the
// row's existence decides ErrNotFound.
func (a admin) RepairParked(ctx context.Context, id int64, messageID string, headers map[string][]string) error {
	h, err := jsonOrNull(headers, len(headers))
	if err != nil {
		return fmt.Errorf("mysql: repair parked message %d: encode headers: %w", id, err)
	}
	if _, err := a.db.ExecContext(ctx, `UPDATE courier_inbox_dead_letters SET message_id = ?, headers = ? WHERE id = ?`, messageID, h, id); err != nil {
		return fmt.Errorf("mysql: repair parked message %d: %w", id, err)
	}
	var exists bool
	if err := a.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM courier_inbox_dead_letters WHERE id = ?)`, id).Scan(&exists); err != nil {
		return fmt.Errorf("mysql: repair parked message %d: %w", id, err)
	}
	if !exists {
		return store.ErrNotFound
	}
	return nil
}

// RequestReplay sets replay_requested to now. An UPDATE that changes nothing
// reports no rows (unless the DSN sets clientFoundRows), so the row's
// existence is what decides ErrNotFound.
func (a admin) RequestReplay(ctx context.Context, id int64) error {
	res, err := a.db.ExecContext(ctx, `UPDATE courier_inbox_dead_letters SET replay_requested = UTC_TIMESTAMP(6) WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("mysql: request replay %d: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("mysql: request replay %d: %w", id, err)
	} else if n > 0 {
		return nil
	}
	var exists bool
	if err := a.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM courier_inbox_dead_letters WHERE id = ?)`, id).Scan(&exists); err != nil {
		return fmt.Errorf("mysql: request replay %d: %w", id, err)
	}
	if !exists {
		return store.ErrNotFound
	}
	return nil
}

func (a admin) DiscardParked(ctx context.Context, id int64) error {
	return a.one(ctx, "discard parked message", `DELETE FROM courier_inbox_dead_letters WHERE id = ?`, id)
}

// one runs a DELETE of the row id and returns store.ErrNotFound when there
// was none.
func (a admin) one(ctx context.Context, what, query string, id int64) error {
	res, err := a.db.ExecContext(ctx, query, id)
	if err != nil {
		return fmt.Errorf("mysql: %s %d: %w", what, id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("mysql: %s %d: %w", what, id, err)
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}
