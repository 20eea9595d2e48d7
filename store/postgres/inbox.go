package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/store"
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

// mark returns the statement that marks id consumed by consumer, and its
// arguments, at clock's time (nil: now()).
func mark(clock store.Clock, consumer string, id any) (string, []any) {
	if clock == nil {
		return markSQL, []any{consumer, id}
	}
	return markAtSQL, []any{consumer, id, clock()}
}

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
