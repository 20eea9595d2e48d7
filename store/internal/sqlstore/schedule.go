package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// Schedules is the store.Scheduler of a dialect's database/sql
// transactions: scheduled messages wait in courier_outbox_scheduled until
// a release ([Release]) moves them into courier_outbox.
type Schedules struct{ d Dialect }

var _ store.Scheduler[*sql.Tx] = Schedules{}

// Schedules returns the scheduler of d's database.
func (d Dialect) Schedules() Schedules { return Schedules{d} }

// The statements of a cancel: the delete, then, when it found nothing to
// delete, what is known of the id (a read of the latest committed row, so
// that it sees a release that committed while the delete waited).
const (
	cancelSQL       = `DELETE FROM courier_outbox_scheduled WHERE message_id = ? AND released_at IS NULL`
	cancelStatusSQL = `SELECT released_at IS NOT NULL FROM courier_outbox_scheduled WHERE message_id = ?`
)

// Schedule writes msgs (at most a statement's worth: the dialect's
// inserter's chunks) due at due in tx.
func (s Schedules) Schedule(ctx context.Context, tx *sql.Tx, due store.Due, msgs []courier.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	dueSQL, dueArgs := s.due(due)
	q, args := columns.InsertInto("courier_outbox_scheduled", msgs, s.d.Encode, ", due_at, created_at",
		", "+dueSQL+", "+s.d.Now, append(dueArgs, s.d.now()...)...)
	_, err := tx.ExecContext(ctx, q, args...)
	return s.d.WriteError(err, fmt.Sprintf("schedule %d messages", len(msgs)))
}

// due returns the SQL of due's time and its arguments.
func (s Schedules) due(due store.Due) (string, []any) {
	if !due.At.IsZero() {
		return "?", []any{s.d.Encode(due.At)}
	}
	return s.d.Later(max(due.After, 0))
}

// Cancel implements store.Scheduler.
func (s Schedules) Cancel(ctx context.Context, tx *sql.Tx, id uuid.UUID) error {
	n, err := sqltx.Exec(ctx, tx, cancelSQL, id.String())
	if err != nil {
		return s.d.WriteError(err, "cancel scheduled message "+id.String())
	}
	if n == 1 {
		return nil
	}
	var released bool
	err = tx.QueryRowContext(ctx, cancelStatusSQL+s.d.ReadLatest, id.String()).Scan(&released)
	switch {
	case errors.Is(err, sql.ErrNoRows) || err == nil && !released:
		return s.d.errorf("cancel %s: %w", id, store.ErrNotScheduled)
	case err != nil:
		return s.d.WriteError(err, "cancel scheduled message "+id.String())
	}
	return s.d.errorf("cancel %s: %w", id, store.ErrAlreadyDue)
}

// The statements of a release, run in one transaction of the dialect's
// relay store (see [Release]).
const (
	dueSQL = `SELECT id FROM courier_outbox_scheduled
WHERE released_at IS NULL AND due_at <= ?
ORDER BY due_at, id
LIMIT ?`
	releaseMarkSQL = `UPDATE courier_outbox_scheduled SET released_at = ?, payload = NULL, headers = NULL WHERE id IN (%s)`
	nextDueSQL     = `SELECT MIN(due_at) FROM courier_outbox_scheduled WHERE released_at IS NULL`
)

// releaseInsertSQL copies released messages into the outbox: a payload
// NULL in the scheduled row is an empty one, and a message occurs when it
// is due.
var releaseInsertSQL = `INSERT INTO courier_outbox (` + columns.Names + `, created_at)
SELECT ` + columns.ListWith("s.", map[string]string{"payload": "coalesce(s.payload, '')", "occurred_at": "s.due_at"}) + `, ?
FROM courier_outbox_scheduled s%s
WHERE s.id IN (%s)
ORDER BY s.due_at, s.id%s`

// Guard is what keeps a release's insert to the release's turn, on a
// dialect whose releases take turns through a lease (MySQL's claim turn): a
// join of the turn's row and its arguments, such that the insert inserts
// nothing once the turn is over. The zero Guard guards nothing (SQLite's
// one writer is the turn).
type Guard struct {
	// Join follows the FROM of the insert, e.g. " JOIN t ON …".
	Join string
	// Args are Join's arguments.
	Args []any
	// Lock ends the insert's read, e.g. " FOR UPDATE", so that the next
	// turn's taker waits for it.
	Lock string
}

// Release moves up to limit scheduled messages due at now into the outbox
// in conn, a transaction of the dialect's relay store that its caller
// commits, while guard holds. It returns what store.Releaser reports, and
// an error wrapping errTurnLost when the guard no longer held.
func (d Dialect) Release(ctx context.Context, conn sqltx.Conn, now time.Time, limit int, guard Guard) (store.Released, error) {
	var ids []int64
	err := sqltx.QueryEach(ctx, conn, dueSQL+d.SkipLocked, []any{d.Encode(now), limit}, func(rows *sql.Rows) error {
		var id int64
		err := rows.Scan(&id)
		ids = append(ids, id)
		return err
	})
	if err != nil {
		return store.Released{}, d.errorf("release scheduled messages: %w", err)
	}
	if len(ids) > 0 {
		list, idArgs := placeholders(ids)
		args := append(append([]any{d.Encode(now)}, guard.Args...), idArgs...)
		n, err := sqltx.Exec(ctx, conn, fmt.Sprintf(releaseInsertSQL, guard.Join, list, guard.Lock), args...)
		if err != nil {
			return store.Released{}, d.errorf("release scheduled messages: %w", err)
		}
		if n != int64(len(ids)) {
			return store.Released{}, d.errorf("release scheduled messages: %w", ErrTurnLost)
		}
		if _, err := sqltx.Exec(ctx, conn, fmt.Sprintf(releaseMarkSQL, list), append([]any{d.Encode(now)}, idArgs...)...); err != nil {
			return store.Released{}, d.errorf("release scheduled messages: %w", err)
		}
	}
	r, err := d.NextDue(ctx, conn, now)
	r.Count = len(ids)
	return r, err
}

// NextDue reports, on q at now, whether scheduled messages wait and how
// long until the first falls due: what a Release that moves nothing
// reports. A relay store asks it before it takes the turn a release
// needs, so that a release with nothing due writes nothing.
func (d Dialect) NextDue(ctx context.Context, q sqltx.Querier, now time.Time) (store.Released, error) {
	var (
		r    store.Released
		next time.Time
	)
	dest := d.Dest(&next)
	if err := q.QueryRowContext(ctx, nextDueSQL).Scan(dest); err != nil {
		return store.Released{}, d.errorf("release scheduled messages: next due time: %w", err)
	}
	if dest.Valid {
		r.Waiting, r.Next = true, next.Sub(now)
	}
	return r, nil
}

// ErrTurnLost is returned (wrapped) by a release whose turn ended before
// it recorded anything: it moved nothing, and the next release does.
var ErrTurnLost = errors.New("the release's turn ended before it was recorded")

// placeholders returns "?, ?, …" for ids and the ids as arguments.
func placeholders[T any](ids []T) (string, []any) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", "), args
}

// ListScheduledSQL returns the query (with ? placeholders) that lists the
// scheduled messages f (checked already) selects, and its arguments, times
// encoded by encode: the columns are message_id, topic, ordering_key,
// type (texts cut to store.TextPreview characters), the payload's length,
// due_at and created_at. Every dialect takes it, row values and length()
// of bytes included.
func ListScheduledSQL(f store.ScheduleFilter, encode func(time.Time) any) (string, []any) {
	conds, args := []string{"released_at IS NULL"}, []any{}
	if f.Topic != "" {
		conds, args = append(conds, "topic = ?"), append(args, f.Topic)
	}
	if f.Key != "" {
		conds, args = append(conds, "ordering_key = ?"), append(args, f.Key)
	}
	if !f.DueBefore.IsZero() {
		conds, args = append(conds, "due_at < ?"), append(args, encode(f.DueBefore))
	}
	if len(f.IDs) > 0 {
		conds = append(conds, "message_id IN ("+strings.TrimSuffix(strings.Repeat("?, ", len(f.IDs)), ", ")+")")
		for _, id := range f.IDs {
			args = append(args, id.String())
		}
	}
	if f.After != uuid.Nil {
		conds = append(conds, "(due_at, id) > (SELECT a.due_at, a.id FROM courier_outbox_scheduled a WHERE a.message_id = ?)")
		args = append(args, f.After.String())
	}
	return `SELECT message_id, ` + columns.Preview("topic") + `, ` + columns.Preview("ordering_key") + `, ` + columns.Preview("type") + `,
       coalesce(length(payload), 0), due_at, created_at
FROM courier_outbox_scheduled WHERE ` + strings.Join(conds, " AND ") + `
ORDER BY due_at, id LIMIT ?`, append(args, f.Limit)
}

// ListScheduled implements store.Admin.
func (a Admin) ListScheduled(ctx context.Context, f store.ScheduleFilter) ([]store.ScheduledMessage, error) {
	f, err := f.Check()
	if err != nil {
		return nil, a.d.errorf("list scheduled messages: %w", err)
	}
	q, args := ListScheduledSQL(f, a.d.Encode)
	var out []store.ScheduledMessage
	err = sqltx.QueryEach(ctx, a.d.DB, q, args, func(rows *sql.Rows) error {
		var m store.ScheduledMessage
		if err := rows.Scan(&m.ID, &m.Topic, &m.Key, &m.Type, &m.Size, a.d.Dest(&m.Due), a.d.Dest(&m.Created)); err != nil {
			return err
		}
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, a.d.errorf("list scheduled messages: %w", err)
	}
	return out, nil
}

// CancelScheduled implements store.Admin.
func (a Admin) CancelScheduled(ctx context.Context, id uuid.UUID) error {
	var cerr error
	err := a.d.InTx(ctx, func(tx *sql.Tx) error {
		cerr = a.d.Schedules().Cancel(ctx, tx, id)
		return cerr
	})
	if cerr != nil {
		return cerr
	}
	return err
}
