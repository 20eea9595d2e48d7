package sqlstore

import (
	"context"
	"database/sql"
	"errors"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// deadColumns are a dead letter's, with whether it holds its key and how
// many messages wait behind it.
var deadColumns = `id, ` + columns.Names + `, created_at, attempts, last_error, history, dead_at, holds,
    (SELECT COUNT(*) FROM courier_outbox_held h WHERE h.behind = courier_outbox_dead_letters.id)`

// ReplaySQL copies a dead letter back into the outbox under its own id, so
// it keeps its place among its key's messages; attempts start again at 0
// and the history stays. The id is below the outbox's AUTO_INCREMENT
// counter (which MySQL 8.0 and MariaDB 10.6 keep across restarts, and which
// SQLite's AUTOINCREMENT never hands out twice), so no other message has it.
var ReplaySQL = `INSERT INTO courier_outbox (id, ` + columns.Names + `, created_at, history)
SELECT id, ` + columns.Names + `, created_at, history
FROM courier_outbox_dead_letters WHERE id = ?`

func (a Admin) scanDead(row interface{ Scan(...any) error }) (store.DeadLetter, error) {
	var (
		d    store.DeadLetter
		m    courier.Message
		hist []byte
	)
	dests := columns.DeadLetterDests([]any{&d.ID}, &d, &m, a.d.dest)
	err := row.Scan(append(dests, a.d.Dest(&d.CreatedAt), &d.Attempts, &d.LastError, &hist, a.d.Dest(&d.DeadAt), &d.Holds, &d.Held)...)
	if errors.Is(err, sql.ErrNoRows) {
		return d, store.ErrNotFound
	}
	if err != nil {
		return d, err
	}
	if err := columns.DecodeSQL(&m, dests, "dead letter", d.ID); err != nil {
		return d, err
	}
	columns.SetDeadLetter(&d, &m)
	return d, columns.DecodeJSON(hist, &d.History, "history of dead letter", d.ID)
}

// Stats implements store.Admin.
func (a Admin) Stats(ctx context.Context) (store.Stats, error) { return a.d.Stats(ctx) }

// DeadLetters implements store.Admin.
func (a Admin) DeadLetters(ctx context.Context, limit int) ([]store.DeadLetter, error) {
	ds, err := queryAll(ctx, a.d.DB, a.scanDead, `SELECT `+deadColumns+` FROM courier_outbox_dead_letters ORDER BY dead_at, id LIMIT ?`, limit)
	if err != nil {
		return nil, a.d.errorf("list dead letters: %w", err)
	}
	return ds, nil
}

// DeadLetter implements store.Admin.
func (a Admin) DeadLetter(ctx context.Context, id int64) (store.DeadLetter, error) {
	d, err := a.scanDead(a.d.DB.QueryRowContext(ctx, `SELECT `+deadColumns+` FROM courier_outbox_dead_letters WHERE id = ?`, id))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return d, a.d.errorf("read dead letter %d: %w", id, err)
	}
	return d, err
}

// ReplayDeadLetter implements store.Admin. It reads the dead letter with
// Dialect.LockRow first, so concurrent replays of one dead letter wait for
// each other and all but the first find it gone. One that holds its key is
// replayed by release.
func (a Admin) ReplayDeadLetter(ctx context.Context, id int64) error {
	err := a.d.WriteTx(ctx, func(c sqltx.Conn) error {
		var holds bool
		err := c.QueryRowContext(ctx, `SELECT holds FROM courier_outbox_dead_letters WHERE id = ?`+a.d.LockRow, id).Scan(&holds)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if holds {
			return errHolds
		}
		if _, err := c.ExecContext(ctx, ReplaySQL, id); err != nil {
			return err
		}
		_, err = c.ExecContext(ctx, `DELETE FROM courier_outbox_dead_letters WHERE id = ?`, id)
		return err
	})
	switch {
	case errors.Is(err, errHolds):
		return a.release(ctx, id, true)
	case errors.Is(err, store.ErrNotFound):
		return err
	case err != nil:
		return a.d.errorf("replay dead letter %d: %w", id, err)
	}
	return nil
}

// DiscardDeadLetter implements store.Admin. One that holds its key is
// discarded by release.
func (a Admin) DiscardDeadLetter(ctx context.Context, id int64) error {
	n, err := sqltx.Exec(ctx, a.d.DB, `DELETE FROM courier_outbox_dead_letters WHERE id = ? AND NOT holds`, id)
	if err != nil {
		return a.d.errorf("discard dead letter %d: %w", id, err)
	}
	if n > 0 {
		return nil
	}
	return a.release(ctx, id, false)
}

// Parked implements store.Admin.
func (a Admin) Parked(ctx context.Context, consumer string, limit int) ([]store.Parked, error) {
	ps, err := queryAll(ctx, a.d.DB, a.d.scanParked, `SELECT `+parkedColumns+` FROM courier_inbox_dead_letters
WHERE ? = '' OR consumer = ? ORDER BY id LIMIT ?`, consumer, consumer, limit)
	if err != nil {
		return nil, a.d.errorf("list parked messages: %w", err)
	}
	return ps, nil
}

// ParkedMessage implements store.Admin.
func (a Admin) ParkedMessage(ctx context.Context, id int64) (store.Parked, error) {
	p, err := a.d.scanParked(a.d.DB.QueryRowContext(ctx, `SELECT `+parkedColumns+` FROM courier_inbox_dead_letters WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return p, store.ErrNotFound
	}
	if err != nil {
		return p, a.d.errorf("read parked message %d: %w", id, err)
	}
	return p, nil
}

// RepairParked implements store.Admin: it replaces a parked delivery's
// message id and headers.
func (a Admin) RepairParked(ctx context.Context, id int64, messageID string, headers map[string][]string) error {
	h, err := columns.JSONOrNull(headers, len(headers))
	if err != nil {
		return a.d.errorf("repair parked message %d: encode headers: %w", id, err)
	}
	return a.one(ctx, "repair parked message", "courier_inbox_dead_letters",
		`UPDATE courier_inbox_dead_letters SET message_id = ?, headers = ? WHERE id = ?`, messageID, h, id)
}

// RequestReplay implements store.Admin: it sets replay_requested to now.
func (a Admin) RequestReplay(ctx context.Context, id int64) error {
	return a.one(ctx, "request replay", "courier_inbox_dead_letters",
		`UPDATE courier_inbox_dead_letters SET replay_requested = `+a.d.Now+` WHERE id = ?`, append(a.d.now(), id)...)
}

// DiscardParked implements store.Admin.
func (a Admin) DiscardParked(ctx context.Context, id int64) error {
	return a.one(ctx, "discard parked message", "courier_inbox_dead_letters", `DELETE FROM courier_inbox_dead_letters WHERE id = ?`, id)
}

// one runs a statement that should touch exactly the row of table whose id
// is its last argument, and returns store.ErrNotFound when there is no such
// row. An UPDATE that changes nothing reports no rows on MySQL (unless the
// DSN sets clientFoundRows), so when none is reported, the row's existence
// decides.
func (a Admin) one(ctx context.Context, what, table, query string, args ...any) error {
	id := args[len(args)-1]
	n, err := sqltx.Exec(ctx, a.d.DB, query, args...)
	if err != nil {
		return a.d.errorf("%s %v: %w", what, id, err)
	}
	if n > 0 {
		return nil
	}
	var exists bool
	if err := a.d.DB.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+table+` WHERE id = ?)`, id).Scan(&exists); err != nil {
		return a.d.errorf("%s %v: %w", what, id, err)
	}
	if !exists {
		return store.ErrNotFound
	}
	return nil
}
