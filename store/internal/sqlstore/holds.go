package sqlstore

import (
	"context"
	"database/sql"
	"errors"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// Consumers implements store.KeyHolds: the holds of a consumer's keys
// (courier_inbox_holds). Every change runs in a WriteTx that first locks
// the key's hold row (LockRow; SQLite's write transaction excludes other
// writers already), so parking behind a hold and passing it on take
// turns.
var _ store.KeyHolds = Consumers{}

// holdKey is the dialect's HoldKey.
func (d Dialect) holdKey() string {
	if d.HoldKey == "" {
		return "ordering_key = ?"
	}
	return d.HoldKey
}

// HoldOf implements store.KeyHolds.
func (c Consumers) HoldOf(ctx context.Context, consumer, key string) (int64, error) {
	cause, err := c.lockHold(ctx, c.d.DB, consumer, key, "")
	if err != nil {
		return 0, c.d.errorf("read hold of key %q: %w", key, err)
	}
	return cause, nil
}

// lockHold reads the cause of the hold of key for consumer in q, ending
// the statement with lock; 0 when the key is not held.
func (c Consumers) lockHold(ctx context.Context, q sqltx.Querier, consumer, key, lock string) (int64, error) {
	var cause int64
	err := q.QueryRowContext(ctx, `SELECT cause FROM courier_inbox_holds WHERE consumer = ? AND `+c.d.holdKey()+lock,
		consumer, key).Scan(&cause)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return cause, err
}

// ParkHolding implements store.KeyHolds. Two deliveries of one key that
// would both become its cause (instances that do not share keys) meet on
// the hold's unique key: the second parks behind the first.
func (c Consumers) ParkHolding(ctx context.Context, p store.Parked, behindOnly bool) (store.Parked, bool, error) {
	if p.Key == "" {
		return p, false, c.d.errorf("park delivery holding its key: the delivery has no key")
	}
	for try := 0; ; try++ {
		parked, ok, err := c.parkHolding(ctx, p, behindOnly)
		if err != nil && try == 0 && c.d.IsDuplicate != nil && c.d.IsDuplicate(err) {
			continue
		}
		if err != nil {
			return p, false, c.d.errorf("park delivery holding key %q: %w", p.Key, err)
		}
		return parked, ok, nil
	}
}

func (c Consumers) parkHolding(ctx context.Context, p store.Parked, behindOnly bool) (store.Parked, bool, error) {
	ok := false
	err := c.d.WriteTx(ctx, func(tx sqltx.Conn) error {
		cause, err := c.lockHold(ctx, tx, p.Consumer, p.Key, c.d.LockRow)
		if err != nil {
			return err
		}
		if cause == 0 && behindOnly {
			return nil
		}
		if cause != 0 {
			p.Reason, p.Behind = store.ReasonHeld, cause
			if p.ID, err = c.heldAlready(ctx, tx, p); err != nil || p.ID != 0 {
				ok = err == nil
				return err
			}
		}
		args, err := c.parkArgs(p)
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, c.d.ParkSQL(), args...)
		if err != nil {
			return err
		}
		if p.ID, err = res.LastInsertId(); err != nil {
			return err
		}
		if cause == 0 {
			_, err = tx.ExecContext(ctx, `INSERT INTO courier_inbox_holds (consumer, ordering_key, cause, since)
VALUES (?, ?, ?, `+c.d.Now+`)`, append([]any{p.Consumer, p.Key, p.ID}, c.d.now()...)...)
			if err != nil {
				return err
			}
		}
		ok = true
		return nil
	})
	return p, ok, err
}

// heldAlready returns the id of the delivery of p's message parked as
// the cause p.Behind or behind it (a redelivery of a message that is held
// already), 0 when there is none.
func (c Consumers) heldAlready(ctx context.Context, tx sqltx.Conn, p store.Parked) (int64, error) {
	if p.MessageID == "" {
		return 0, nil
	}
	var id int64
	err := tx.QueryRowContext(ctx, `SELECT id FROM courier_inbox_dead_letters WHERE (id = ? OR behind = ?) AND message_id = ? LIMIT 1`,
		p.Behind, p.Behind, p.MessageID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return id, err
}

// PassHold implements store.KeyHolds.
func (c Consumers) PassHold(ctx context.Context, consumer, key string, id int64) (int64, error) {
	var next int64
	err := c.d.WriteTx(ctx, func(tx sqltx.Conn) error {
		var err error
		next, err = c.passHold(ctx, tx, consumer, key, id)
		return err
	})
	if err != nil {
		return 0, c.d.errorf("pass on the hold of key %q from %d: %w", key, id, err)
	}
	return next, nil
}

// passHold is PassHold in tx.
func (c Consumers) passHold(ctx context.Context, tx sqltx.Conn, consumer, key string, id int64) (int64, error) {
	cause, err := c.lockHold(ctx, tx, consumer, key, c.d.LockRow)
	if err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM courier_inbox_dead_letters WHERE id = ?`, id); err != nil {
		return 0, err
	}
	if cause != id {
		return 0, nil // not the cause (any more): only unparked
	}
	var next int64
	err = tx.QueryRowContext(ctx, `SELECT id FROM courier_inbox_dead_letters WHERE behind = ? ORDER BY id LIMIT 1`, id).Scan(&next)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = tx.ExecContext(ctx, `DELETE FROM courier_inbox_holds WHERE consumer = ? AND `+c.d.holdKey(), consumer, key)
		return 0, err
	}
	if err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE courier_inbox_holds SET cause = ? WHERE consumer = ? AND `+c.d.holdKey(),
		next, consumer, key); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE courier_inbox_dead_letters SET behind = NULL, replay_requested = `+c.d.Now+` WHERE id = ?`,
		append(c.d.now(), next)...); err != nil {
		return 0, err
	}
	_, err = tx.ExecContext(ctx, `UPDATE courier_inbox_dead_letters SET behind = ? WHERE behind = ?`, next, id)
	return next, err
}

// RequestCause implements store.KeyHolds.
func (c Consumers) RequestCause(ctx context.Context, id, cause int64) error {
	err := c.d.WriteTx(ctx, func(tx sqltx.Conn) error {
		if _, err := tx.ExecContext(ctx, `UPDATE courier_inbox_dead_letters SET replay_requested = NULL WHERE id = ? AND behind = ?`, id, cause); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE courier_inbox_dead_letters SET replay_requested = `+c.d.Now+`
WHERE id = ? AND replay_requested IS NULL`, append(c.d.now(), cause)...)
		return err
	})
	if err != nil {
		return c.d.errorf("request the replay of %d, the cause of %d: %w", cause, id, err)
	}
	return nil
}

// RepairHolds implements store.KeyHolds.
func (c Consumers) RepairHolds(ctx context.Context, consumer string) (int, error) {
	type hold struct {
		key   string
		cause int64
	}
	orphans, err := queryAll(ctx, c.d.DB, func(row interface{ Scan(...any) error }) (hold, error) {
		var h hold
		err := row.Scan(&h.key, &h.cause)
		return h, err
	}, `SELECT ordering_key, cause FROM courier_inbox_holds h WHERE consumer = ?
AND NOT EXISTS (SELECT 1 FROM courier_inbox_dead_letters d WHERE d.id = h.cause)`, consumer)
	if err != nil {
		return 0, c.d.errorf("holds whose cause is gone: %w", err)
	}
	for i, h := range orphans {
		if _, err := c.PassHold(ctx, consumer, h.key, h.cause); err != nil {
			return i, err
		}
	}
	return len(orphans), nil
}
