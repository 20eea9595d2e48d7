package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// errHolds stops the transaction of a replay or discard that found a dead
// letter holding its key: release does those.
var errHolds = errors.New("the dead letter holds its key")

// releaseChunk is how many of a key's pending rows one statement of
// release copies: each chunk gets ids above the one before, so the rows
// keep their order.
const releaseChunk = 500

// release replays (replay true) or discards the dead letter id, which
// holds its key, in a transaction of Dialect.HoldTx, which claims wait
// for: the dead letter (replay only), its held messages by id, and its
// key's rows still in the outbox by id are inserted again into the outbox
// in that order, under new ids, so that they are published in that order,
// and the key is released. The key's rows compare in Go, never in SQL (no
// collation merges two keys).
func (a Admin) release(ctx context.Context, id int64, replay bool) error {
	what := "discard dead letter"
	if replay {
		what = "replay dead letter"
	}
	err := a.d.HoldTx(ctx, func(c sqltx.Conn) error {
		var (
			key   string
			holds bool
		)
		err := c.QueryRowContext(ctx, `SELECT ordering_key, holds FROM courier_outbox_dead_letters WHERE id = ?`+a.d.LockRow, id).Scan(&key, &holds)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		var pending []int64
		err = sqltx.QueryEach(ctx, c, `SELECT id, ordering_key FROM courier_outbox WHERE ordering_key = ? ORDER BY id`, []any{key}, func(rows *sql.Rows) error {
			var (
				rid int64
				k   string
			)
			if err := rows.Scan(&rid, &k); err != nil {
				return err
			}
			if k == key {
				pending = append(pending, rid)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("read the key's pending rows: %w", err)
		}
		if replay {
			if _, err := c.ExecContext(ctx, `INSERT INTO courier_outbox (`+columns.Names+`, created_at, history)
SELECT `+columns.Names+`, created_at, history FROM courier_outbox_dead_letters WHERE id = ?`, id); err != nil {
				return fmt.Errorf("put the dead letter back: %w", err)
			}
		}
		if _, err := c.ExecContext(ctx, `INSERT INTO courier_outbox (`+columns.Names+`, created_at)
SELECT `+columns.Names+`, created_at FROM courier_outbox_held WHERE behind = ? ORDER BY id`, id); err != nil {
			return fmt.Errorf("put the held messages back: %w", err)
		}
		for len(pending) > 0 {
			n := min(len(pending), releaseChunk)
			in := "id IN (?" + strings.Repeat(", ?", n-1) + ")"
			args := make([]any, n)
			for i, rid := range pending[:n] {
				args[i] = rid
			}
			pending = pending[n:]
			if _, err := c.ExecContext(ctx, `INSERT INTO courier_outbox (`+columns.Names+`, created_at, attempts, retry_at, last_error, history)
SELECT `+columns.Names+`, created_at, attempts, retry_at, last_error, history FROM courier_outbox WHERE `+in+` ORDER BY id`, args...); err != nil {
				return fmt.Errorf("renumber the key's pending rows: %w", err)
			}
			if _, err := c.ExecContext(ctx, `DELETE FROM courier_outbox WHERE `+in, args...); err != nil {
				return fmt.Errorf("renumber the key's pending rows: %w", err)
			}
		}
		if _, err := c.ExecContext(ctx, `DELETE FROM courier_outbox_held WHERE behind = ?`, id); err != nil {
			return err
		}
		_, err = c.ExecContext(ctx, `DELETE FROM courier_outbox_dead_letters WHERE id = ?`, id)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return err
	}
	if err != nil {
		return a.d.errorf("%s %d: %w", what, id, err)
	}
	return nil
}

// heldKeySummary is the columns of a held key (store.HeldKey).
var heldKeySummary = `id, ` + columns.Preview("topic") + `, ` + columns.Preview("ordering_key") + `, dead_at,
    (SELECT COUNT(*) FROM courier_outbox_held h WHERE h.behind = courier_outbox_dead_letters.id), ` + columns.ErrorPreview

// HeldKeys implements store.Admin.
func (a Admin) HeldKeys(ctx context.Context, q store.ListQuery) ([]store.HeldKey, error) {
	q, err := q.Check()
	if err != nil {
		return nil, a.d.errorf("list held keys: %w", err)
	}
	where, args := listWhere(q, false)
	out, err := queryAll(ctx, a.d.DB, func(row interface{ Scan(...any) error }) (store.HeldKey, error) {
		var (
			k       store.HeldKey
			lastErr sql.NullString
		)
		err := row.Scan(&k.Cause, &k.Topic, &k.Key, a.d.Dest(&k.Since), &k.Held, &lastErr)
		k.LastError = lastErr.String
		return k, err
	}, `SELECT `+heldKeySummary+` FROM courier_outbox_dead_letters WHERE holds AND `+where+` ORDER BY id LIMIT ?`, args...)
	if err != nil {
		return nil, a.d.errorf("list held keys: %w", err)
	}
	return out, nil
}

// heldSummary is the columns of a held message (store.HeldMessage).
var heldSummary = `id, behind, message_id, ` + columns.Preview("topic") + `, ` + columns.Preview("ordering_key") + `, ` +
	columns.Preview("type") + `, created_at, held_at`

// ListHeld implements store.Admin.
func (a Admin) ListHeld(ctx context.Context, cause, after int64, limit int) ([]store.HeldMessage, error) {
	limit, err := store.CheckHeldLimit(limit)
	if err != nil {
		return nil, a.d.errorf("list held messages: %w", err)
	}
	out, err := queryAll(ctx, a.d.DB, func(row interface{ Scan(...any) error }) (store.HeldMessage, error) {
		var m store.HeldMessage
		err := row.Scan(&m.ID, &m.Behind, &m.MessageID, &m.Topic, &m.Key, &m.Type, a.d.Dest(&m.CreatedAt), a.d.Dest(&m.HeldAt))
		return m, err
	}, `SELECT `+heldSummary+` FROM courier_outbox_held WHERE behind = ? AND id > ? ORDER BY id LIMIT ?`, cause, after, limit)
	if err != nil {
		return nil, a.d.errorf("list held messages: %w", err)
	}
	return out, nil
}

// consumerHoldSummary is the columns of a key a consumer holds
// (store.ConsumerHold), from its cause's row of courier_inbox_dead_letters.
var consumerHoldSummary = `id, ` + columns.Preview("consumer") + `, ` + columns.Preview("COALESCE(ordering_key, '')") + `, ` +
	columns.Preview("subject") + `,
    (SELECT h.since FROM courier_inbox_holds h WHERE h.cause = courier_inbox_dead_letters.id),
    (SELECT COUNT(*) FROM courier_inbox_dead_letters b WHERE b.behind = courier_inbox_dead_letters.id), ` + columns.ErrorPreview

// ConsumerHolds implements store.Admin: the parked deliveries q selects
// that are the cause of a hold (courier_inbox_holds holds one row per key
// held, found by its cause through an index).
func (a Admin) ConsumerHolds(ctx context.Context, q store.ListQuery) ([]store.ConsumerHold, error) {
	q, err := q.Check()
	if err != nil {
		return nil, a.d.errorf("list consumer holds: %w", err)
	}
	where, args := listWhere(q, true)
	out, err := queryAll(ctx, a.d.DB, func(row interface{ Scan(...any) error }) (store.ConsumerHold, error) {
		var (
			k       store.ConsumerHold
			lastErr sql.NullString
		)
		err := row.Scan(&k.Cause, &k.Consumer, &k.Key, &k.Subject, a.d.Dest(&k.Since), &k.Held, &lastErr)
		k.LastError = lastErr.String
		return k, err
	}, `SELECT `+consumerHoldSummary+` FROM courier_inbox_dead_letters
WHERE id IN (SELECT cause FROM courier_inbox_holds) AND `+where+` ORDER BY id LIMIT ?`, args...)
	if err != nil {
		return nil, a.d.errorf("list consumer holds: %w", err)
	}
	return out, nil
}
