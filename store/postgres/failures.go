package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier/store"
)

// RecordFailure inserts the failure (an autocommit transaction of its own)
// and reads back the message's failures. Concurrent failures of one message
// on two instances may both see the other's row: each run is counted once.
func (c consumerStore) RecordFailure(ctx context.Context, consumer string, id uuid.UUID, f store.Attempt) ([]store.Attempt, error) {
	_, err := c.pool.Exec(ctx, `INSERT INTO courier_inbox_failures (consumer, message_id, failed_at, error, counted)
VALUES ($1, $2, $3, $4, $5)`, consumer, [16]byte(id), f.At, f.Error, !f.Uncounted)
	if err != nil {
		return nil, fmt.Errorf("postgres: record failure of %s: %w", id, err)
	}
	rows, err := c.pool.Query(ctx, `SELECT failed_at, error, NOT counted FROM courier_inbox_failures
WHERE consumer = $1 AND message_id = $2 ORDER BY id`, consumer, [16]byte(id))
	if err != nil {
		return nil, fmt.Errorf("postgres: read failures of %s: %w", id, err)
	}
	hist, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Attempt, error) {
		var a store.Attempt
		err := r.Scan(&a.At, &a.Error, &a.Uncounted)
		a.At = a.At.UTC()
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: read failures of %s: %w", id, err)
	}
	return hist, nil
}

// ClearFailures implements store.ConsumerStore.
func (c consumerStore) ClearFailures(ctx context.Context, consumer string, id uuid.UUID) error {
	_, err := c.exec(ctx, "clear failures of "+id.String(), `DELETE FROM courier_inbox_failures WHERE consumer = $1 AND message_id = $2`,
		consumer, [16]byte(id))
	return err
}

// DeleteFailures implements store.ConsumerStore.
func (c consumerStore) DeleteFailures(ctx context.Context, before time.Time, limit int) (int64, error) {
	return c.exec(ctx, "delete recorded failures", `DELETE FROM courier_inbox_failures WHERE id = ANY(ARRAY(
    SELECT id FROM courier_inbox_failures WHERE failed_at < $1 LIMIT $2))`, before, limit)
}
