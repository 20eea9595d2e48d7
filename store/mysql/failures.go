package mysql

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/store"
)

// RecordFailure inserts the failure (an autocommit transaction of its own)
// and reads back the message's failures. failed_at is the caller's clock.
func (c consumerStore) RecordFailure(ctx context.Context, consumer string, id uuid.UUID, f store.Attempt) ([]store.Attempt, error) {
	if err := checkConsumer(consumer); err != nil {
		return nil, fmt.Errorf("mysql: record failure of %s: %w", id, err)
	}
	_, err := c.db.ExecContext(ctx, `INSERT INTO courier_inbox_failures (consumer, message_id, failed_at, error)
VALUES (?, ?, ?, ?)`, consumer, id.String(), formatTime(f.At), f.Error)
	if err != nil {
		return nil, fmt.Errorf("mysql: record failure of %s: %w", id, err)
	}
	rows, err := c.db.QueryContext(ctx, `SELECT failed_at, error FROM courier_inbox_failures
WHERE consumer = ? AND message_id = ? ORDER BY id`, consumer, id.String())
	if err != nil {
		return nil, fmt.Errorf("mysql: read failures of %s: %w", id, err)
	}
	defer rows.Close()
	var hist []store.Attempt
	for rows.Next() {
		var a store.Attempt
		if err := rows.Scan(&utcTime{t: &a.At}, &a.Error); err != nil {
			return nil, fmt.Errorf("mysql: read failures of %s: %w", id, err)
		}
		hist = append(hist, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysql: read failures of %s: %w", id, err)
	}
	return hist, nil
}

// ClearFailures implements store.ConsumerStore.
func (c consumerStore) ClearFailures(ctx context.Context, consumer string, id uuid.UUID) error {
	_, err := c.db.ExecContext(ctx, `DELETE FROM courier_inbox_failures WHERE consumer = ? AND message_id = ?`, consumer, id.String())
	if err != nil {
		return fmt.Errorf("mysql: clear failures of %s: %w", id, err)
	}
	return nil
}

// DeleteFailures implements store.ConsumerStore.
func (c consumerStore) DeleteFailures(ctx context.Context, before time.Time, limit int) (int64, error) {
	res, err := c.db.ExecContext(ctx, `DELETE FROM courier_inbox_failures WHERE failed_at < ? ORDER BY failed_at LIMIT ?`,
		formatTime(before), limit)
	if err != nil {
		return 0, fmt.Errorf("mysql: delete recorded failures: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("mysql: delete recorded failures: %w", err)
	}
	return n, nil
}
