package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/store"
)

// Admin returns the operators' view of the database behind pool.
func Admin(pool *pgxpool.Pool) store.Admin { return admin{pool, nil} }

// admin has database's fields, so a database converts to its admin.
type admin struct {
	pool  *pgxpool.Pool
	clock store.Clock // for Stats; nil: now()
}

func (a admin) Stats(ctx context.Context) (store.Stats, error) { return stats(ctx, a.pool, a.clock) }

const deadColumns = `id, message_id::text, topic, ordering_key, type, version, content_type, payload, headers,
       occurred_at, created_at, attempts, last_error, history, dead_at`

func scanDead(row pgx.Row) (store.DeadLetter, error) {
	var d store.DeadLetter
	var hist []byte
	err := row.Scan(&d.ID, &d.MessageID, &d.Topic, &d.Key, &d.Type, &d.Version, &d.ContentType, &d.Payload, &d.Headers,
		&d.OccurredAt, &d.CreatedAt, &d.Attempts, &d.LastError, &hist, &d.DeadAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, store.ErrNotFound
	}
	if err != nil {
		return d, err
	}
	if len(hist) > 0 {
		if err := json.Unmarshal(hist, &d.History); err != nil {
			return d, fmt.Errorf("history of dead letter %d: %w", d.ID, err)
		}
	}
	return d, nil
}

func (a admin) DeadLetters(ctx context.Context, limit int) ([]store.DeadLetter, error) {
	rows, err := a.pool.Query(ctx, `SELECT `+deadColumns+` FROM courier_outbox_dead_letters ORDER BY dead_at, id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: list dead letters: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.DeadLetter, error) { return scanDead(r) })
}

func (a admin) DeadLetter(ctx context.Context, id int64) (store.DeadLetter, error) {
	return scanDead(a.pool.QueryRow(ctx, `SELECT `+deadColumns+` FROM courier_outbox_dead_letters WHERE id = $1`, id))
}

func (a admin) ReplayDeadLetter(ctx context.Context, id int64) error {
	tag, err := a.pool.Exec(ctx, `WITH d AS (DELETE FROM courier_outbox_dead_letters WHERE id = $1 RETURNING *)
INSERT INTO courier_outbox (id, message_id, topic, ordering_key, type, version, content_type, payload, headers,
                            occurred_at, created_at, history)
OVERRIDING SYSTEM VALUE
SELECT id, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, history
FROM d`, id)
	if err != nil {
		return fmt.Errorf("postgres: replay dead letter %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}

func (a admin) DiscardDeadLetter(ctx context.Context, id int64) error {
	return a.deleteOne(ctx, `DELETE FROM courier_outbox_dead_letters WHERE id = $1`, id)
}

func (a admin) Parked(ctx context.Context, consumer string, limit int) ([]store.Parked, error) {
	rows, err := a.pool.Query(ctx, `SELECT `+parkedColumns+` FROM courier_inbox_dead_letters
WHERE $1 = '' OR consumer = $1 ORDER BY id LIMIT $2`, consumer, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: list parked messages: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Parked, error) { return scanParked(r) })
}

func (a admin) ParkedMessage(ctx context.Context, id int64) (store.Parked, error) {
	p, err := scanParked(a.pool.QueryRow(ctx, `SELECT `+parkedColumns+` FROM courier_inbox_dead_letters WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return p, store.ErrNotFound
	}
	return p, err
}

func (a admin) RequestReplay(ctx context.Context, id int64) error {
	return a.deleteOne(ctx, `UPDATE courier_inbox_dead_letters SET replay_requested = now() WHERE id = $1`, id)
}

func (a admin) RepairParked(ctx context.Context, id int64, messageID string, headers map[string][]string) error {
	tag, err := a.pool.Exec(ctx, `UPDATE courier_inbox_dead_letters SET message_id = $2, headers = $3 WHERE id = $1`, id, messageID, headers)
	if err != nil {
		return fmt.Errorf("postgres: repair parked message %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}

func (a admin) DiscardParked(ctx context.Context, id int64) error {
	return a.deleteOne(ctx, `DELETE FROM courier_inbox_dead_letters WHERE id = $1`, id)
}

// deleteOne runs a statement that should touch exactly the row id.
func (a admin) deleteOne(ctx context.Context, sql string, id int64) error {
	tag, err := a.pool.Exec(ctx, sql, id)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}
