package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqlstore"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// Scheduled messages wait in courier_outbox_scheduled until a release
// (courier_release, migration 0011) moves them into courier_outbox; see
// store.Scheduler.

// scheduleSQL writes scheduled messages: one array per column, as
// insertMany, due at $1 or, when that is NULL, $2 microseconds after
// now(); dueSQL is that time in a row of database/sql's statement.
var scheduleSQL = "INSERT INTO courier_outbox_scheduled (due_at, created_at, " + columns.Names + ") " +
	"SELECT " + dueSQL + ", now(), m.* FROM unnest(" + columns.Unnest(3) + ") AS m"

const dueSQL = "coalesce($1::timestamptz, now() + $2::bigint * interval '1 microsecond')"

// The statements of a cancel: the delete, then, when it found nothing to
// delete, what is known of the id (in a statement of its own, so that under
// READ COMMITTED it sees a release that committed while the delete waited
// for its row).
const (
	cancelSQL       = "DELETE FROM courier_outbox_scheduled WHERE message_id = $1 AND released_at IS NULL"
	cancelStatusSQL = "SELECT released_at IS NOT NULL FROM courier_outbox_scheduled WHERE message_id = $1"
)

// releaseSQL is one release, at now() or the store's clock.
const releaseSQL = "SELECT released, waiting, coalesce(next_in, '0'::interval), busy FROM courier_release($1, now())"

// scheduleArgs returns scheduleSQL's arguments for msgs due at due, on
// clock (nil: the server's now()).
func scheduleArgs(clock store.Clock, due store.Due, msgs []courier.Message) (string, []any) {
	at, after := dueArgs(due)
	args := append([]any{at, after}, columns.Arrays(len(msgs), func(i int) *courier.Message { return &msgs[i] })...)
	return clocked(clock, scheduleSQL, args...)
}

// dueArgs returns dueSQL's arguments for due.
func dueArgs(due store.Due) (*time.Time, int64) {
	if due.At.IsZero() {
		return nil, max(due.After, 0).Microseconds()
	}
	return &due.At, 0
}

// scheduleError returns err, the error of scheduling n messages, with the
// fix when the table is missing.
func scheduleError(err error, n int) error {
	return migrations.WriteError(err, fmt.Sprintf("schedule %d messages", n), errorCode(err) == undefinedTable)
}

// pgxScheduler is the store.Scheduler of pgx transactions, on a clock (nil:
// the server's).
type pgxScheduler struct{ clock store.Clock }

// Schedule implements store.Scheduler.
func (s pgxScheduler) Schedule(ctx context.Context, tx pgx.Tx, due store.Due, msgs []courier.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	q, args := scheduleArgs(s.clock, due, msgs)
	_, err := tx.Exec(ctx, q, args...)
	return scheduleError(err, len(msgs))
}

// Cancel implements store.Scheduler.
func (pgxScheduler) Cancel(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	tag, err := tx.Exec(ctx, cancelSQL, [16]byte(id))
	if err != nil {
		return cancelError(err, id)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var released bool
	return cancelled(id, tx.QueryRow(ctx, cancelStatusSQL, [16]byte(id)).Scan(&released), released)
}

// sqlScheduler is the store.Scheduler of database/sql transactions on
// PostgreSQL, on a clock (nil: the server's).
type sqlScheduler struct{ clock store.Clock }

// Schedule implements store.Scheduler.
func (s sqlScheduler) Schedule(ctx context.Context, tx *sql.Tx, due store.Due, msgs []courier.Message) error {
	for start := 0; start < len(msgs); start += sqlChunk {
		chunk := msgs[start:min(start+sqlChunk, len(msgs))]
		q, args := scheduleSQLArgs(s.clock, due, chunk)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return scheduleError(err, len(chunk))
		}
	}
	return nil
}

// scheduleSQLArgs returns the statement scheduling msgs for database/sql,
// one VALUES row a message (as sqlInserter's), and its arguments.
func scheduleSQLArgs(clock store.Clock, due store.Due, msgs []courier.Message) (string, []any) {
	at, after := dueArgs(due)
	q, args := columns.InsertInto("courier_outbox_scheduled", msgs, func(t time.Time) any { return t }, ", due_at, created_at",
		", coalesce(?::timestamptz, now() + ?::bigint * interval '1 microsecond'), now()", at, after)
	return clocked(clock, sqltx.Dollar(q), args...)
}

// Cancel implements store.Scheduler.
func (sqlScheduler) Cancel(ctx context.Context, tx *sql.Tx, id uuid.UUID) error {
	n, err := sqltx.Exec(ctx, tx, sqltx.Dollar(cancelSQL), id.String())
	if err != nil {
		return cancelError(err, id)
	}
	if n == 1 {
		return nil
	}
	var released bool
	return cancelled(id, tx.QueryRowContext(ctx, cancelStatusSQL, id.String()).Scan(&released), released)
}

// cancelError returns err, the error of cancelling id.
func cancelError(err error, id uuid.UUID) error {
	return migrations.WriteError(err, "cancel scheduled message "+id.String(), errorCode(err) == undefinedTable)
}

// cancelled returns what a cancel that deleted nothing found: err, the
// error of reading id's record; released, whether it was released.
func cancelled(id uuid.UUID, err error, released bool) error {
	switch {
	case errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("postgres: cancel %s: %w", id, store.ErrNotScheduled)
	case err != nil:
		return cancelError(err, id)
	case released:
		return fmt.Errorf("postgres: cancel %s: %w", id, store.ErrAlreadyDue)
	}
	// Deleted meanwhile by another cancel that committed.
	return fmt.Errorf("postgres: cancel %s: %w", id, store.ErrNotScheduled)
}

// release runs one release on pool at clock (nil: the server's now()).
func release(ctx context.Context, pool *pgxpool.Pool, clock store.Clock, limit int) (store.Released, error) {
	var (
		r    store.Released
		next time.Duration
	)
	q, args := clocked(clock, releaseSQL, limit)
	if err := pool.QueryRow(ctx, q, args...).Scan(&r.Count, &r.Waiting, &next, &r.Busy); err != nil {
		return store.Released{}, fmt.Errorf("postgres: release scheduled messages: %w", err)
	}
	r.Next = next
	return r, nil
}

// ListScheduled implements store.Admin.
func (a admin) ListScheduled(ctx context.Context, f store.ScheduleFilter) ([]store.ScheduledMessage, error) {
	f, err := f.Check()
	if err != nil {
		return nil, fmt.Errorf("postgres: list scheduled messages: %w", err)
	}
	q, args := sqlstore.ListScheduledSQL(f, func(t time.Time) any { return t })
	rows, err := a.pool.Query(ctx, sqltx.Dollar(q), args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list scheduled messages: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.ScheduledMessage, error) {
		var m store.ScheduledMessage
		err := r.Scan(&m.ID, &m.Topic, &m.Key, &m.Type, &m.Size, &m.Due, &m.Created)
		m.Due, m.Created = m.Due.UTC(), m.Created.UTC()
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list scheduled messages: %w", err)
	}
	return out, nil
}

// CancelScheduled implements store.Admin.
func (a admin) CancelScheduled(ctx context.Context, id uuid.UUID) error {
	var cerr error
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		cerr = pgxScheduler{a.clock}.Cancel(ctx, tx, id)
		return cerr
	})
	if cerr != nil {
		return cerr
	}
	return err
}
