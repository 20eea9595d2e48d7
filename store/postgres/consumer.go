package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
)

// consumerStore is the store of parked deliveries, failures and inbox
// markers on the pool ([Driver.ConsumerStore]). It has database's fields,
// so a database converts to its consumerStore.
type consumerStore struct {
	pool  *pgxpool.Pool
	clock store.Clock // parked_at's and the failed replays'; nil: now()
}

// parkSQL inserts a parked delivery, parked at now() (the store's clock: see
// clocked).
const parkSQL = `INSERT INTO courier_inbox_dead_letters
    (consumer, message_id, subject, headers, payload, reason, last_error, attempts, history, ordering_key, behind, parked_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULLIF($10::text, ''), NULLIF($11::bigint, 0), now())
RETURNING id`

func (c consumerStore) Park(ctx context.Context, p store.Parked) error {
	query, args, err := c.park(p)
	if err != nil {
		return err
	}
	_, err = c.exec(ctx, "park delivery", query, args...)
	return err
}

// park returns the statement that parks p, and its arguments.
func (c consumerStore) park(p store.Parked) (string, []any, error) {
	// NULL without a history: JSON null would become an entry of its own
	// when ReplayFailed appends to it.
	var hist []byte
	if len(p.History) > 0 {
		var err error
		if hist, err = json.Marshal(p.History); err != nil {
			return "", nil, fmt.Errorf("postgres: park delivery: encode history: %w", err)
		}
	}
	query, args := clocked(c.clock, parkSQL,
		p.Consumer, p.MessageID, p.Subject, p.Headers, p.Payload, p.Reason, p.Error, p.Attempts, hist, p.Key, p.Behind)
	return query, args, nil
}

const parkedColumns = `id, consumer, message_id, subject, headers, payload, reason, last_error, attempts, history, parked_at, replay_requested,
    coalesce(ordering_key, ''), coalesce(behind, 0)`

func scanParked(row pgx.Row) (store.Parked, error) {
	var p store.Parked
	var hist []byte
	err := row.Scan(&p.ID, &p.Consumer, &p.MessageID, &p.Subject, &p.Headers, &p.Payload, &p.Reason, &p.Error,
		&p.Attempts, &hist, &p.ParkedAt, &p.ReplayRequested, &p.Key, &p.Behind)
	if err != nil {
		return p, err
	}
	return p, columns.DecodeJSON(hist, &p.History, "history of parked delivery", p.ID)
}

func (c consumerStore) ReplayRequested(ctx context.Context, consumer string, limit int) ([]store.Parked, error) {
	rows, err := c.pool.Query(ctx, `SELECT `+parkedColumns+` FROM courier_inbox_dead_letters
WHERE consumer = $1 AND replay_requested IS NOT NULL ORDER BY id LIMIT $2`, consumer, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: parked deliveries to replay: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Parked, error) { return scanParked(r) })
}

func (c consumerStore) Unpark(ctx context.Context, id int64) error {
	if _, err := c.pool.Exec(ctx, `DELETE FROM courier_inbox_dead_letters WHERE id = $1`, id); err != nil {
		return fmt.Errorf("postgres: unpark delivery %d: %w", id, err)
	}
	return nil
}

func (c consumerStore) ReplayFailed(ctx context.Context, id int64, msg string) error {
	_, err := c.exec(ctx, fmt.Sprintf("record failed replay of %d", id), `UPDATE courier_inbox_dead_letters
SET replay_requested = NULL, last_error = $2, attempts = attempts + 1,
    history = coalesce(history, '[]') || jsonb_build_array(jsonb_build_object('at', now(), 'error', $2::text))
WHERE id = $1`, id, msg)
	return err
}

func (c consumerStore) DeleteMarkers(ctx context.Context, before time.Time, limit int) (int64, error) {
	return c.exec(ctx, "delete inbox markers", `DELETE FROM courier_inbox WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM courier_inbox WHERE processed_at < $1 LIMIT $2))`, before, limit)
}

// exec runs query at the store's clock (see clocked) and returns the
// number of rows it affected; what names it in errors.
func (c consumerStore) exec(ctx context.Context, what, query string, args ...any) (int64, error) {
	query, args = clocked(c.clock, query, args...)
	tag, err := c.pool.Exec(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("postgres: %s: %w", what, err)
	}
	return tag.RowsAffected(), nil
}
