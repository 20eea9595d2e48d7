package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/store"
)

// RecordFailure inserts the failure (an autocommit transaction of its own)
// and reads back the message's failures. Times are kept in microseconds.
func (c consumerStore) RecordFailure(ctx context.Context, consumer string, id uuid.UUID, f store.Attempt) ([]store.Attempt, error) {
	_, err := c.db.ExecContext(ctx, `INSERT INTO courier_inbox_failures (consumer, message_id, failed_at, error)
VALUES (?, ?, ?, ?)`, consumer, id.String(), f.At.UnixMicro(), f.Error)
	if err != nil {
		return nil, fmt.Errorf("sqlite: record failure of %s: %w", id, err)
	}
	hist, err := queryFailures(ctx, c.db, consumer, id)
	if err != nil {
		return nil, fmt.Errorf("sqlite: read failures of %s: %w", id, err)
	}
	return hist, nil
}

func queryFailures(ctx context.Context, db *sql.DB, consumer string, id uuid.UUID) ([]store.Attempt, error) {
	rows, err := db.QueryContext(ctx, `SELECT failed_at, error FROM courier_inbox_failures
WHERE consumer = ? AND message_id = ? ORDER BY id`, consumer, id.String())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var hist []store.Attempt
	for rows.Next() {
		var at int64
		var a store.Attempt
		if err := rows.Scan(&at, &a.Error); err != nil {
			return nil, err
		}
		a.At = time.UnixMicro(at).UTC()
		hist = append(hist, a)
	}
	return hist, rows.Err()
}

// ClearFailures implements store.ConsumerStore.
func (c consumerStore) ClearFailures(ctx context.Context, consumer string, id uuid.UUID) error {
	_, err := c.db.ExecContext(ctx, `DELETE FROM courier_inbox_failures WHERE consumer = ? AND message_id = ?`, consumer, id.String())
	if err != nil {
		return fmt.Errorf("sqlite: clear failures of %s: %w", id, err)
	}
	return nil
}

// DeleteFailures implements store.ConsumerStore.
func (c consumerStore) DeleteFailures(ctx context.Context, before time.Time, limit int) (int64, error) {
	res, err := c.db.ExecContext(ctx, `DELETE FROM courier_inbox_failures WHERE id IN (
    SELECT id FROM courier_inbox_failures WHERE failed_at < ? LIMIT ?)`, before.UnixMicro(), limit)
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete recorded failures: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete recorded failures: %w", err)
	}
	return n, nil
}
