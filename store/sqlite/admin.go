package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/courier-go/courier/store"
)

// Admin returns the operators' view of the database behind db: the outbox's
// state and both kinds of dead letters. Replaying a dead letter runs in an
// immediate transaction, like a relay's claim.
func Admin(db *sql.DB) store.Admin { return admin{db} }

type admin struct{ db *sql.DB }

func (a admin) Stats(ctx context.Context) (store.Stats, error) { return Stats(ctx, a.db) }

const deadColumns = `id, message_id, topic, ordering_key, type, version, content_type, payload, headers,
       occurred_at, created_at, attempts, last_error, history, dead_at`

func scanDead(row interface{ Scan(...any) error }) (store.DeadLetter, error) {
	var (
		d                        store.DeadLetter
		headers, hist            []byte
		occurred, created, death int64
	)
	err := row.Scan(&d.ID, &d.MessageID, &d.Topic, &d.Key, &d.Type, &d.Version, &d.ContentType, &d.Payload, &headers,
		&occurred, &created, &d.Attempts, &d.LastError, &hist, &death)
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
	d.OccurredAt = time.UnixMicro(occurred).UTC()
	d.CreatedAt = time.UnixMicro(created).UTC()
	d.DeadAt = time.UnixMicro(death).UTC()
	return d, nil
}

func (a admin) DeadLetters(ctx context.Context, limit int) ([]store.DeadLetter, error) {
	rows, err := a.db.QueryContext(ctx, `SELECT `+deadColumns+` FROM courier_outbox_dead_letters ORDER BY dead_at, id LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list dead letters: %w", err)
	}
	defer rows.Close()
	var out []store.DeadLetter
	for rows.Next() {
		d, err := scanDead(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list dead letters: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list dead letters: %w", err)
	}
	return out, nil
}

func (a admin) DeadLetter(ctx context.Context, id int64) (store.DeadLetter, error) {
	d, err := scanDead(a.db.QueryRowContext(ctx, `SELECT `+deadColumns+` FROM courier_outbox_dead_letters WHERE id = ?`, id))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return d, fmt.Errorf("sqlite: read dead letter %d: %w", id, err)
	}
	return d, err
}

// replaySQL copies a dead letter back into the outbox under its own id, so
// it keeps its place among its key's messages; attempts start again at 0 and
// the history stays. AUTOINCREMENT never handed that id to another message.
const replaySQL = `INSERT INTO courier_outbox (id, message_id, topic, ordering_key, type, version, content_type, payload, headers,
                            occurred_at, created_at, history)
SELECT id, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, history
FROM courier_outbox_dead_letters WHERE id = ?`

func (a admin) ReplayDeadLetter(ctx context.Context, id int64) error {
	err := immediate(ctx, a.db, func(conn *sql.Conn) error {
		res, err := conn.ExecContext(ctx, replaySQL, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return store.ErrNotFound
		}
		_, err = conn.ExecContext(ctx, `DELETE FROM courier_outbox_dead_letters WHERE id = ?`, id)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return err
	}
	if err != nil {
		return fmt.Errorf("sqlite: replay dead letter %d: %w", id, err)
	}
	return nil
}

func (a admin) DiscardDeadLetter(ctx context.Context, id int64) error {
	return a.one(ctx, "discard dead letter", `DELETE FROM courier_outbox_dead_letters WHERE id = ?`, id)
}

func (a admin) Parked(ctx context.Context, consumer string, limit int) ([]store.Parked, error) {
	ps, err := queryParked(ctx, a.db, `SELECT `+parkedColumns+` FROM courier_inbox_dead_letters
WHERE ?1 = '' OR consumer = ?1 ORDER BY id LIMIT ?2`, consumer, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list parked messages: %w", err)
	}
	return ps, nil
}

func (a admin) ParkedMessage(ctx context.Context, id int64) (store.Parked, error) {
	p, err := scanParked(a.db.QueryRowContext(ctx, `SELECT `+parkedColumns+` FROM courier_inbox_dead_letters WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return p, store.ErrNotFound
	}
	if err != nil {
		return p, fmt.Errorf("sqlite: read parked message %d: %w", id, err)
	}
	return p, nil
}

func (a admin) RequestReplay(ctx context.Context, id int64) error {
	return a.one(ctx, "request replay", `UPDATE courier_inbox_dead_letters SET replay_requested = ? WHERE id = ?`,
		time.Now().UnixMicro(), id)
}

func (a admin) RepairParked(ctx context.Context, id int64, messageID string, headers map[string][]string) error {
	h, err := jsonOrNull(headers, len(headers))
	if err != nil {
		return fmt.Errorf("sqlite: repair parked message %d: encode headers: %w", id, err)
	}
	return a.one(ctx, "repair parked message", `UPDATE courier_inbox_dead_letters SET message_id = ?, headers = ? WHERE id = ?`,
		messageID, h, id)
}

func (a admin) DiscardParked(ctx context.Context, id int64) error {
	return a.one(ctx, "discard parked message", `DELETE FROM courier_inbox_dead_letters WHERE id = ?`, id)
}

// one runs a statement that should touch exactly one row (the last
// argument is its id), and returns store.ErrNotFound when it touched none.
func (a admin) one(ctx context.Context, what, query string, args ...any) error {
	res, err := a.db.ExecContext(ctx, query, args...)
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil && n == 0 {
			return store.ErrNotFound
		}
	}
	if err != nil {
		return fmt.Errorf("sqlite: %s %v: %w", what, args[len(args)-1], err)
	}
	return nil
}
