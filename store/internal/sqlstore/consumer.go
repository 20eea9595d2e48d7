package sqlstore

import (
	"context"
	"database/sql"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqltx"
)

const parkedColumns = `id, consumer, message_id, subject, headers, payload, reason, last_error, attempts, history, parked_at, replay_requested, ordering_key, behind`

// ParkSQL inserts a parked delivery; parked_at, its last column, is the
// dialect's Now.
func (d Dialect) ParkSQL() string {
	return `INSERT INTO courier_inbox_dead_letters
    (consumer, message_id, subject, headers, payload, reason, last_error, attempts, history, ordering_key, behind, parked_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ` + d.Now + `)`
}

func (d Dialect) scanParked(row interface{ Scan(...any) error }) (store.Parked, error) {
	var (
		p             store.Parked
		headers, hist []byte
		replay        time.Time
		key           sql.NullString
		behind        sql.NullInt64
	)
	replayed := d.Dest(&replay)
	err := row.Scan(&p.ID, &p.Consumer, &p.MessageID, &p.Subject, &headers, &p.Payload, &p.Reason, &p.Error,
		&p.Attempts, &hist, d.Dest(&p.ParkedAt), replayed, &key, &behind)
	if err != nil {
		return p, err
	}
	p.Key, p.Behind = key.String, behind.Int64
	p.Payload = columns.Payload(p.Payload)
	if err := columns.DecodeJSON(headers, &p.Headers, "headers of parked delivery", p.ID); err != nil {
		return p, err
	}
	if err := columns.DecodeJSON(hist, &p.History, "history of parked delivery", p.ID); err != nil {
		return p, err
	}
	if replayed.Valid {
		p.ReplayRequested = &replay
	}
	return p, nil
}

// checkConsumer applies Dialect.CheckConsumer.
func (d Dialect) checkConsumer(consumer string) error {
	if d.CheckConsumer == nil {
		return nil
	}
	return d.CheckConsumer(consumer)
}

// Park implements store.ConsumerStore.
func (c Consumers) Park(ctx context.Context, p store.Parked) error {
	args, err := c.parkArgs(p)
	if err != nil {
		return err
	}
	if _, err := c.d.DB.ExecContext(ctx, c.d.ParkSQL(), args...); err != nil {
		return c.d.errorf("park delivery: %w", err)
	}
	return nil
}

// parkArgs returns the arguments of ParkSQL that park p.
func (c Consumers) parkArgs(p store.Parked) ([]any, error) {
	if err := c.d.checkConsumer(p.Consumer); err != nil {
		return nil, c.d.errorf("park delivery: %w", err)
	}
	headers, err := columns.JSONOrNull(p.Headers, len(p.Headers))
	if err != nil {
		return nil, c.d.errorf("park delivery: encode headers: %w", err)
	}
	hist, err := columns.JSONOrNull(p.History, len(p.History))
	if err != nil {
		return nil, c.d.errorf("park delivery: encode history: %w", err)
	}
	key := sql.NullString{String: p.Key, Valid: p.Key != ""}
	behind := sql.NullInt64{Int64: p.Behind, Valid: p.Behind != 0}
	return append([]any{p.Consumer, p.MessageID, p.Subject, headers, columns.Payload(p.Payload),
		p.Reason, p.Error, p.Attempts, hist, key, behind}, c.d.now()...), nil
}

// ReplayRequested implements store.ConsumerStore.
func (c Consumers) ReplayRequested(ctx context.Context, consumer string, limit int) ([]store.Parked, error) {
	ps, err := queryAll(ctx, c.d.DB, c.d.scanParked, `SELECT `+parkedColumns+` FROM courier_inbox_dead_letters
WHERE consumer = ? AND replay_requested IS NOT NULL ORDER BY id LIMIT ?`, consumer, limit)
	if err != nil {
		return nil, c.d.errorf("parked deliveries to replay: %w", err)
	}
	return ps, nil
}

// Unpark implements store.ConsumerStore.
func (c Consumers) Unpark(ctx context.Context, id int64) error {
	if _, err := c.d.DB.ExecContext(ctx, `DELETE FROM courier_inbox_dead_letters WHERE id = ?`, id); err != nil {
		return c.d.errorf("unpark delivery %d: %w", id, err)
	}
	return nil
}

// ReplayFailed implements store.ConsumerStore.
func (c Consumers) ReplayFailed(ctx context.Context, id int64, msg string) error {
	query, args, err := c.d.ReplayFailed(id, msg)
	if err == nil {
		_, err = c.d.DB.ExecContext(ctx, query, args...)
	}
	if err != nil {
		return c.d.errorf("record failed replay of %d: %w", id, err)
	}
	return nil
}

// DeleteMarkers implements store.ConsumerStore.
func (c Consumers) DeleteMarkers(ctx context.Context, before time.Time, limit int) (int64, error) {
	return c.deleteBefore(ctx, "delete inbox markers", c.d.DeleteMarkersSQL, before, limit)
}

// RecordFailure implements store.ConsumerStore: it inserts the failure (an
// autocommit transaction of its own) and reads back the message's
// failures. failed_at is the caller's clock.
func (c Consumers) RecordFailure(ctx context.Context, consumer string, id uuid.UUID, f store.Attempt) ([]store.Attempt, error) {
	if err := c.d.checkConsumer(consumer); err != nil {
		return nil, c.d.errorf("record failure of %s: %w", id, err)
	}
	_, err := c.d.DB.ExecContext(ctx, `INSERT INTO courier_inbox_failures (consumer, message_id, failed_at, error, counted)
VALUES (?, ?, ?, ?, ?)`, consumer, id.String(), c.d.Encode(f.At), f.Error, !f.Uncounted)
	if err != nil {
		return nil, c.d.errorf("record failure of %s: %w", id, err)
	}
	hist, err := queryAll(ctx, c.d.DB, func(row interface{ Scan(...any) error }) (store.Attempt, error) {
		var a store.Attempt
		var counted bool
		err := row.Scan(c.d.Dest(&a.At), &a.Error, &counted)
		a.Uncounted = !counted
		return a, err
	}, `SELECT failed_at, error, counted FROM courier_inbox_failures WHERE consumer = ? AND message_id = ? ORDER BY id`, consumer, id.String())
	if err != nil {
		return nil, c.d.errorf("read failures of %s: %w", id, err)
	}
	return hist, nil
}

// ClearFailures implements store.ConsumerStore.
func (c Consumers) ClearFailures(ctx context.Context, consumer string, id uuid.UUID) error {
	_, err := c.d.DB.ExecContext(ctx, `DELETE FROM courier_inbox_failures WHERE consumer = ? AND message_id = ?`, consumer, id.String())
	if err != nil {
		return c.d.errorf("clear failures of %s: %w", id, err)
	}
	return nil
}

// DeleteFailures implements store.ConsumerStore.
func (c Consumers) DeleteFailures(ctx context.Context, before time.Time, limit int) (int64, error) {
	return c.deleteBefore(ctx, "delete recorded failures", c.d.DeleteFailuresSQL, before, limit)
}

// InTx implements store.Inbox with Dialect.InTx.
func (i Inbox) InTx(ctx context.Context, fn func(*sql.Tx) error) error { return i.d.InTx(ctx, fn) }

// Mark implements store.Inbox with Dialect.MarkSQL.
func (i Inbox) Mark(ctx context.Context, tx *sql.Tx, consumer string, id uuid.UUID) (bool, error) {
	if err := i.d.checkConsumer(consumer); err != nil {
		return false, i.d.errorf("inbox marker: %w", err)
	}
	n, err := sqltx.Exec(ctx, tx, i.d.MarkSQL, append([]any{consumer, id.String()}, i.d.now()...)...)
	if err != nil {
		return false, i.d.errorf("inbox marker: %w", err)
	}
	if err := clearFailures(ctx, tx, consumer, id.String()); err != nil {
		return false, i.d.errorf("clear failures of %s: %w", id, err)
	}
	return n == 1, nil
}

// clearFailuresBatch is how many failures one DELETE of clearFailures
// names.
const clearFailuresBatch = 500

// clearFailures deletes in tx the failures recorded for messages ids of
// consumer (store.Inbox.Mark). It reads their ids without locking anything
// and deletes those rows by primary key. A DELETE by consumer and message
// would, under InnoDB's REPEATABLE READ, lock the gap of the index where the
// message's failures would go, usually its end (message ids grow with
// time), until the handler's transaction ends: every other message's
// RecordFailure would wait for it. The read, an index lookup, mostly finds
// nothing (most messages never failed), and then nothing is deleted. A
// failure committed after the read is deleted by the next delivery, a
// duplicate.
func clearFailures(ctx context.Context, tx *sql.Tx, consumer string, messages ...string) error {
	var ids []int64
	for batch := range slices.Chunk(messages, markGroupBatch) {
		list, args := placeholders(batch)
		some, err := Column[int64](ctx, tx, `SELECT id FROM courier_inbox_failures WHERE consumer = ? AND message_id IN (`+list+`)`,
			append([]any{consumer}, args...)...)
		if err != nil {
			return err
		}
		ids = append(ids, some...)
	}
	for batch := range slices.Chunk(ids, clearFailuresBatch) {
		list, args := placeholders(batch)
		if _, err := tx.ExecContext(ctx, `DELETE FROM courier_inbox_failures WHERE id IN (`+list+`)`, args...); err != nil {
			return err
		}
	}
	return nil
}

// deleteBefore runs query, a DELETE of up to limit rows from before
// (oldest first), and returns how many it deleted; what names it in errors.
func (c Consumers) deleteBefore(ctx context.Context, what, query string, before time.Time, limit int) (int64, error) {
	n, err := sqltx.Exec(ctx, c.d.DB, query, c.d.Encode(before), limit)
	if err != nil {
		return 0, c.d.errorf("%s: %w", what, err)
	}
	return n, nil
}
