package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier/store"
)

// consumerStore implements store.KeyHolds: the holds of a consumer's keys
// (courier_inbox_holds). Every change runs in a transaction that first
// locks the key's hold row (SELECT … FOR UPDATE), so parking behind a hold
// and passing it on take turns.
var _ store.KeyHolds = consumerStore{}

// holdQuerier runs the statements of a hold: the pool or a transaction.
type holdQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (c consumerStore) HoldOf(ctx context.Context, consumer, key string) (int64, error) {
	cause, err := lockHold(ctx, c.pool, consumer, key, "")
	if err != nil {
		return 0, fmt.Errorf("postgres: read hold of key %q: %w", key, err)
	}
	return cause, nil
}

// lockHold reads the cause of the hold of key for consumer, ending the
// statement with lock; 0 when the key is not held.
func lockHold(ctx context.Context, q holdQuerier, consumer, key, lock string) (int64, error) {
	var cause int64
	err := q.QueryRow(ctx, `SELECT cause FROM courier_inbox_holds WHERE consumer = $1 AND ordering_key = $2`+lock,
		consumer, key).Scan(&cause)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return cause, err
}

// ParkHolding implements store.KeyHolds. Two deliveries of one key that
// would both become its cause (instances that do not share keys) meet on
// the hold's primary key: the second parks behind the first.
func (c consumerStore) ParkHolding(ctx context.Context, p store.Parked, behindOnly bool) (store.Parked, bool, error) {
	if p.Key == "" {
		return p, false, errors.New("postgres: park delivery holding its key: the delivery has no key")
	}
	for try := 0; ; try++ {
		parked, ok, err := c.parkHolding(ctx, p, behindOnly)
		if err != nil && try == 0 && errorCode(err) == uniqueViolation {
			continue
		}
		if err != nil {
			return p, false, fmt.Errorf("postgres: park delivery holding key %q: %w", p.Key, err)
		}
		return parked, ok, nil
	}
}

func (c consumerStore) parkHolding(ctx context.Context, p store.Parked, behindOnly bool) (store.Parked, bool, error) {
	ok := false
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		cause, err := lockHold(ctx, tx, p.Consumer, p.Key, " FOR UPDATE")
		if err != nil || cause == 0 && behindOnly {
			return err
		}
		if cause != 0 {
			p.Reason, p.Behind = store.ReasonHeld, cause
			if p.ID, err = heldAlready(ctx, tx, p); err != nil || p.ID != 0 {
				ok = err == nil
				return err
			}
		}
		query, args, err := c.park(p)
		if err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, query, args...).Scan(&p.ID); err != nil {
			return err
		}
		if cause == 0 {
			query, args := clocked(c.clock, `INSERT INTO courier_inbox_holds (consumer, ordering_key, cause, since)
VALUES ($1, $2, $3, now())`, p.Consumer, p.Key, p.ID)
			if _, err := tx.Exec(ctx, query, args...); err != nil {
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
func heldAlready(ctx context.Context, tx pgx.Tx, p store.Parked) (int64, error) {
	if p.MessageID == "" {
		return 0, nil
	}
	var id int64
	err := tx.QueryRow(ctx, `SELECT id FROM courier_inbox_dead_letters WHERE (id = $1 OR behind = $1) AND message_id = $2 LIMIT 1`,
		p.Behind, p.MessageID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return id, err
}

func (c consumerStore) PassHold(ctx context.Context, consumer, key string, id int64) (int64, error) {
	var next int64
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		next, err = c.passHold(ctx, tx, consumer, key, id)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: pass on the hold of key %q from %d: %w", key, id, err)
	}
	return next, nil
}

// passHold is PassHold in tx.
func (c consumerStore) passHold(ctx context.Context, tx pgx.Tx, consumer, key string, id int64) (int64, error) {
	cause, err := lockHold(ctx, tx, consumer, key, " FOR UPDATE")
	if err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM courier_inbox_dead_letters WHERE id = $1`, id); err != nil {
		return 0, err
	}
	if cause != id {
		return 0, nil // not the cause (any more): only unparked
	}
	var next int64
	err = tx.QueryRow(ctx, `SELECT id FROM courier_inbox_dead_letters WHERE behind = $1 ORDER BY id LIMIT 1`, id).Scan(&next)
	if errors.Is(err, pgx.ErrNoRows) {
		_, err = tx.Exec(ctx, `DELETE FROM courier_inbox_holds WHERE consumer = $1 AND ordering_key = $2`, consumer, key)
		return 0, err
	}
	if err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `UPDATE courier_inbox_holds SET cause = $3 WHERE consumer = $1 AND ordering_key = $2`,
		consumer, key, next); err != nil {
		return 0, err
	}
	query, args := clocked(c.clock, `UPDATE courier_inbox_dead_letters SET behind = NULL, replay_requested = now() WHERE id = $1`, next)
	if _, err := tx.Exec(ctx, query, args...); err != nil {
		return 0, err
	}
	_, err = tx.Exec(ctx, `UPDATE courier_inbox_dead_letters SET behind = $1 WHERE behind = $2`, next, id)
	return next, err
}

func (c consumerStore) RequestCause(ctx context.Context, id, cause int64) error {
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE courier_inbox_dead_letters SET replay_requested = NULL WHERE id = $1 AND behind = $2`, id, cause); err != nil {
			return err
		}
		query, args := clocked(c.clock, `UPDATE courier_inbox_dead_letters SET replay_requested = now()
WHERE id = $1 AND replay_requested IS NULL`, cause)
		_, err := tx.Exec(ctx, query, args...)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: request the replay of %d, the cause of %d: %w", cause, id, err)
	}
	return nil
}

func (c consumerStore) RepairHolds(ctx context.Context, consumer string) (int, error) {
	rows, err := c.pool.Query(ctx, `SELECT ordering_key, cause FROM courier_inbox_holds h WHERE consumer = $1
AND NOT EXISTS (SELECT 1 FROM courier_inbox_dead_letters d WHERE d.id = h.cause)`, consumer)
	if err != nil {
		return 0, fmt.Errorf("postgres: holds whose cause is gone: %w", err)
	}
	type hold struct {
		Key   string
		Cause int64
	}
	orphans, err := pgx.CollectRows(rows, pgx.RowToStructByPos[hold])
	if err != nil {
		return 0, fmt.Errorf("postgres: holds whose cause is gone: %w", err)
	}
	for i, h := range orphans {
		if _, err := c.PassHold(ctx, consumer, h.Key, h.Cause); err != nil {
			return i, err
		}
	}
	return len(orphans), nil
}
