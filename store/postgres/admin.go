package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
)

// admin is the operators' view of the database behind the pool
// ([Driver.Admin]). It has database's fields, so a database converts to its
// admin.
type admin struct {
	pool  *pgxpool.Pool
	clock store.Clock // nil: now()
}

func (a admin) Stats(ctx context.Context) (store.Stats, error) { return stats(ctx, a.pool, a.clock) }

// deadColumns are a dead letter's, with whether it holds its key and how
// many messages wait behind it.
var deadColumns = `id, ` + columns.Names + `, created_at, attempts, last_error, history, dead_at, holds,
    (SELECT count(*) FROM courier_outbox_held h WHERE h.behind = courier_outbox_dead_letters.id)`

func scanDead(row pgx.Row) (store.DeadLetter, error) {
	var (
		d    store.DeadLetter
		m    courier.Message
		hist []byte
	)
	err := row.Scan(append(columns.AppendDests([]any{&d.ID}, &m), &d.CreatedAt, &d.Attempts, &d.LastError, &hist, &d.DeadAt, &d.Holds, &d.Held)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, store.ErrNotFound
	}
	if err != nil {
		return d, err
	}
	columns.Finish(&m)
	columns.SetDeadLetter(&d, &m)
	return d, columns.DecodeJSON(hist, &d.History, "history of dead letter", d.ID)
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

// ReplayDeadLetter puts a dead letter that does not hold its key back
// under its own id in one statement; one that holds it, with its held
// messages and its key's (see release).
func (a admin) ReplayDeadLetter(ctx context.Context, id int64) error {
	err := a.one(ctx, "replay dead letter", id, `WITH d AS (DELETE FROM courier_outbox_dead_letters WHERE id = $1 AND NOT holds RETURNING *)
INSERT INTO courier_outbox (id, `+columns.Names+`, created_at, history)
OVERRIDING SYSTEM VALUE
SELECT id, `+columns.Names+`, created_at, history
FROM d`, id)
	if errors.Is(err, store.ErrNotFound) {
		return a.release(ctx, id, true)
	}
	return err
}

// DiscardDeadLetter deletes a dead letter that does not hold its key in
// one statement; one that holds it releases its key (see release).
func (a admin) DiscardDeadLetter(ctx context.Context, id int64) error {
	err := a.one(ctx, "discard dead letter", id, `DELETE FROM courier_outbox_dead_letters WHERE id = $1 AND NOT holds`, id)
	if errors.Is(err, store.ErrNotFound) {
		return a.release(ctx, id, false)
	}
	return err
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
	return a.one(ctx, "request replay", id, `UPDATE courier_inbox_dead_letters SET replay_requested = now() WHERE id = $1`, id)
}

func (a admin) RepairParked(ctx context.Context, id int64, messageID string, headers map[string][]string) error {
	return a.one(ctx, "repair parked message", id, `UPDATE courier_inbox_dead_letters SET message_id = $2, headers = $3 WHERE id = $1`,
		id, messageID, headers)
}

func (a admin) DiscardParked(ctx context.Context, id int64) error {
	return a.one(ctx, "discard parked message", id, `DELETE FROM courier_inbox_dead_letters WHERE id = $1`, id)
}

// one runs a statement that should touch exactly the row id (its
// arguments are args, or id alone) at the store's clock (see clocked), and
// returns store.ErrNotFound when it touched none.
func (a admin) one(ctx context.Context, what string, id int64, sql string, args ...any) error {
	if len(args) == 0 {
		args = []any{id}
	}
	sql, args = clocked(a.clock, sql, args...)
	tag, err := a.pool.Exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("postgres: %s %d: %w", what, id, err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}
