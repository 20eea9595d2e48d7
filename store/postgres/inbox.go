package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/marks"
	"github.com/courier-go/courier/store/internal/sqlstore"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// markSQL inserts the marker of message $2 for consumer $1 unless it
// exists, and deletes the failures recorded for them (store.Inbox.Mark),
// in one statement: the deletion adds no round trip to the hot path. The
// command's row count is the INSERT's, 1 when it inserted the marker. The
// DELETE sees the failures committed when the statement began; one that a
// concurrent run records later is deleted by the next delivery, a
// duplicate.
const markSQL = clearFailuresWith + `INSERT INTO courier_inbox (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`

// markAtSQL is markSQL for an inbox with a clock: processed_at is $3, the
// clock's time, instead of now().
const markAtSQL = clearFailuresWith + `INSERT INTO courier_inbox (consumer, message_id, processed_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`

// clearFailuresWith deletes the failures of message $2 for consumer $1, in
// a WITH clause of the statement it begins.
const clearFailuresWith = `WITH cleared AS (DELETE FROM courier_inbox_failures WHERE consumer = $1 AND message_id = $2)
`

// markGroupSQL inserts the markers of the messages of array $2 for
// consumer $1 unless they exist, and deletes the failures recorded for
// them, in one statement (store.GroupInbox.MarkGroup): it returns the id of
// each marker it inserted. ORDER BY makes it insert, and so lock, the
// markers in ascending order, so that two groups sharing messages wait for
// each other instead of deadlocking.
const markGroupSQL = clearGroupFailuresWith + `INSERT INTO courier_inbox (consumer, message_id)
SELECT $1, id FROM unnest($2::uuid[]) AS id ORDER BY id ON CONFLICT DO NOTHING RETURNING message_id`

// markGroupAtSQL is markGroupSQL for an inbox with a clock: processed_at is
// $3, the clock's time, instead of now().
const markGroupAtSQL = clearGroupFailuresWith + `INSERT INTO courier_inbox (consumer, message_id, processed_at)
SELECT $1, id, $3 FROM unnest($2::uuid[]) AS id ORDER BY id ON CONFLICT DO NOTHING RETURNING message_id`

// clearGroupFailuresWith is clearFailuresWith for the messages of array $2.
const clearGroupFailuresWith = `WITH cleared AS (DELETE FROM courier_inbox_failures WHERE consumer = $1 AND message_id = ANY($2::uuid[]))
`

// mark returns the statement that marks id consumed by consumer, and its
// arguments, at clock's time (nil: now()).
func mark(clock store.Clock, consumer string, id any) (string, []any) {
	if clock == nil {
		return markSQL, []any{consumer, id}
	}
	return markAtSQL, []any{consumer, id, clock()}
}

// markGroup returns the statement that marks ids (an array) consumed by
// consumer, and its arguments, at clock's time (nil: now()).
func markGroup(clock store.Clock, consumer string, ids any) (string, []any) {
	if clock == nil {
		return markGroupSQL, []any{consumer, ids}
	}
	return markGroupAtSQL, []any{consumer, ids, clock()}
}

// The inboxes mark a group of messages in one statement.
var (
	_ store.GroupInbox[pgx.Tx]  = pgxInbox{}
	_ store.GroupInbox[*sql.Tx] = sqlInbox{}
)

// pgxInbox is the inbox for handlers that work in pgx transactions on the
// pool ([Driver.Inbox]).
type pgxInbox struct {
	pool  *pgxpool.Pool
	clock store.Clock // processed_at's; nil: now()
}

func (i pgxInbox) InTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, i.pool, fn)
}

func (i pgxInbox) Mark(ctx context.Context, tx pgx.Tx, consumer string, id uuid.UUID) (bool, error) {
	q, args := mark(i.clock, consumer, [16]byte(id)) // uuid.UUID would be encoded through its string form
	tag, err := tx.Exec(ctx, q, args...)
	if err != nil {
		return false, fmt.Errorf("postgres: inbox marker: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

func (i pgxInbox) MarkGroup(ctx context.Context, tx pgx.Tx, consumer string, ids []uuid.UUID) ([]bool, error) {
	arr := make([][16]byte, len(ids)) // uuid.UUID would be encoded through its string form
	for n, id := range ids {
		arr[n] = id
	}
	q, args := markGroup(i.clock, consumer, arr)
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: inbox markers of %d messages: %w", len(ids), err)
	}
	inserted, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (uuid.UUID, error) {
		var id [16]byte
		err := row.Scan(&id)
		return id, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: inbox markers of %d messages: %w", len(ids), err)
	}
	return marks.Fresh(ids, inserted), nil
}

// sqlInbox is the inbox for handlers that work in database/sql
// transactions on db ([SQLDriver.Inbox]).
type sqlInbox struct {
	db    *sql.DB
	clock store.Clock // processed_at's; nil: now()
}

func (i sqlInbox) InTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return sqltx.InTx(ctx, i.db, nil, "postgres: ", fn)
}

func (i sqlInbox) Mark(ctx context.Context, tx *sql.Tx, consumer string, id uuid.UUID) (bool, error) {
	q, args := mark(i.clock, consumer, id.String())
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return false, fmt.Errorf("postgres: inbox marker: %w", err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func (i sqlInbox) MarkGroup(ctx context.Context, tx *sql.Tx, consumer string, ids []uuid.UUID) ([]bool, error) {
	arr := make([]string, len(ids))
	for n, id := range ids {
		arr[n] = id.String()
	}
	q, args := markGroup(i.clock, consumer, arr)
	inserted, err := sqlstore.Column[uuid.UUID](ctx, tx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: inbox markers of %d messages: %w", len(ids), err)
	}
	return marks.Fresh(ids, inserted), nil
}
