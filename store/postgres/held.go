package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
)

// claimLockSQL takes the lock courier_claim takes ("clai" << 32 | the
// outbox's oid), so that what follows in the transaction and the claims
// take turns.
const claimLockSQL = `SELECT pg_advisory_xact_lock((1668047209::bigint << 32) | 'courier_outbox'::regclass::oid::bigint)`

// holdingSQL reads a dead letter's key and whether it holds it, locking it.
const holdingSQL = `SELECT ordering_key, holds FROM courier_outbox_dead_letters WHERE id = $1 FOR UPDATE`

// releaseHeldSQL releases the key $2 held by the dead letter $1: it deletes the
// dead letter, its held messages and the key's rows still in the outbox,
// and inserts them again, with new ids in that order (the dead letter only
// when $3, a replay, with no attempts counted), so that they are published
// in that order: each group by its old ids. The rows of the key still in
// the outbox keep their attempts, retry time and history.
var releaseHeldSQL = `WITH d AS (
    DELETE FROM courier_outbox_dead_letters WHERE id = $1 RETURNING *
), h AS (
    DELETE FROM courier_outbox_held WHERE behind = $1 RETURNING *
), p AS (
    DELETE FROM courier_outbox WHERE ordering_key = $2 RETURNING *
), r AS (
    SELECT 0 AS g, id, ` + columns.Names + `, created_at, 0 AS attempts, NULL::timestamptz AS retry_at, NULL::text AS last_error, history
    FROM d WHERE $3
    UNION ALL
    SELECT 1, id, ` + columns.Names + `, created_at, 0, NULL, NULL, NULL FROM h
    UNION ALL
    SELECT 2, id, ` + columns.Names + `, created_at, attempts, retry_at, last_error, history FROM p
)
INSERT INTO courier_outbox (` + columns.Names + `, created_at, attempts, retry_at, last_error, history)
SELECT ` + columns.Names + `, created_at, attempts, retry_at, last_error, history FROM r ORDER BY g, id`

// release replays (replay true) or discards the dead letter id, which
// holds its key, in one transaction that takes the claims' lock: the key is
// released, and its messages are published in order (see releaseHeldSQL).
// It returns store.ErrNotFound when the dead letter does not exist.
func (a admin) release(ctx context.Context, id int64, replay bool) error {
	what := "discard dead letter"
	if replay {
		what = "replay dead letter"
	}
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, claimLockSQL); err != nil {
			return err
		}
		var (
			key   string
			holds bool
		)
		if err := tx.QueryRow(ctx, holdingSQL, id).Scan(&key, &holds); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return store.ErrNotFound
			}
			return err
		}
		if !holds { // not reached: the caller tried the dead letters that do not hold
			return fmt.Errorf("dead letter %d does not hold its key", id)
		}
		q, args := clocked(a.clock, releaseHeldSQL, id, key, replay)
		_, err := tx.Exec(ctx, q, args...)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return err
	}
	if err != nil {
		return fmt.Errorf("postgres: %s %d: %w", what, id, err)
	}
	return nil
}

// heldKeysSQL lists the keys held, by their cause's id, with the
// condition of listWhere.
var heldKeysSQL = `SELECT d.id, ` + columns.Preview("d.topic") + `, ` + columns.Preview("d.ordering_key") + `, d.dead_at,
    (SELECT count(*) FROM courier_outbox_held h WHERE h.behind = d.id), ` + columns.Cut("d.last_error", store.ErrorPreview) + `
FROM courier_outbox_dead_letters d WHERE d.holds AND `

// HeldKeys implements store.Admin.
func (a admin) HeldKeys(ctx context.Context, q store.ListQuery) ([]store.HeldKey, error) {
	q, err := q.Check()
	if err != nil {
		return nil, fmt.Errorf("postgres: list held keys: %w", err)
	}
	where, args := listWhere(q, false)
	rows, err := a.pool.Query(ctx, heldKeysSQL+where, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list held keys: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.HeldKey, error) {
		var k store.HeldKey
		var lastErr *string
		err := r.Scan(&k.Cause, &k.Topic, &k.Key, &k.Since, &k.Held, &lastErr)
		if lastErr != nil {
			k.LastError = *lastErr
		}
		k.Since = k.Since.UTC()
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list held keys: %w", err)
	}
	return out, nil
}

// listHeldSQL lists the messages held behind a dead letter, by id.
var listHeldSQL = `SELECT id, behind, message_id::text, ` + columns.Preview("topic") + `, ` + columns.Preview("ordering_key") + `, ` +
	columns.Preview("type") + `, created_at, held_at
FROM courier_outbox_held WHERE behind = $1 AND id > $2 ORDER BY id LIMIT $3`

// ListHeld implements store.Admin.
func (a admin) ListHeld(ctx context.Context, cause, after int64, limit int) ([]store.HeldMessage, error) {
	limit, err := store.CheckHeldLimit(limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: list held messages: %w", err)
	}
	rows, err := a.pool.Query(ctx, listHeldSQL, cause, after, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: list held messages: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.HeldMessage, error) {
		var m store.HeldMessage
		err := r.Scan(&m.ID, &m.Behind, &m.MessageID, &m.Topic, &m.Key, &m.Type, &m.CreatedAt, &m.HeldAt)
		m.CreatedAt, m.HeldAt = m.CreatedAt.UTC(), m.HeldAt.UTC()
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list held messages: %w", err)
	}
	return out, nil
}

// consumerHoldsSQL lists the keys consumers hold, by their cause's id,
// with the condition of listWhere: the parked deliveries that are the
// cause of a hold (courier_inbox_holds holds one row per key held, found by its cause through an index).
var consumerHoldsSQL = `SELECT id, ` + columns.Preview("consumer") + `, ` + columns.Preview("COALESCE(ordering_key, '')") + `, ` +
	columns.Preview("subject") + `,
    (SELECT h.since FROM courier_inbox_holds h WHERE h.cause = courier_inbox_dead_letters.id),
    (SELECT count(*) FROM courier_inbox_dead_letters b WHERE b.behind = courier_inbox_dead_letters.id), ` + columns.ErrorPreview + `
FROM courier_inbox_dead_letters WHERE id IN (SELECT cause FROM courier_inbox_holds) AND `

// ConsumerHolds implements store.Admin.
func (a admin) ConsumerHolds(ctx context.Context, q store.ListQuery) ([]store.ConsumerHold, error) {
	q, err := q.Check()
	if err != nil {
		return nil, fmt.Errorf("postgres: list consumer holds: %w", err)
	}
	where, args := listWhere(q, true)
	rows, err := a.pool.Query(ctx, consumerHoldsSQL+where, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list consumer holds: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.ConsumerHold, error) {
		var k store.ConsumerHold
		var lastErr *string
		err := r.Scan(&k.Cause, &k.Consumer, &k.Key, &k.Subject, &k.Since, &k.Held, &lastErr)
		if lastErr != nil {
			k.LastError = *lastErr
		}
		k.Since = k.Since.UTC()
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list consumer holds: %w", err)
	}
	return out, nil
}
