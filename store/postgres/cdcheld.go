package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
)

// Held keys, as the CDC relay keeps them (relay/cdc, Config.HoldKeys): a
// dead letter that holds its key (courier_outbox_dead_letters.holds) has
// the key's later messages, which the relay reads from the log, moved
// behind it to courier_outbox_held instead of published. Holding takes the
// claims' advisory lock, the lock a replay or a discard of a dead letter
// that holds its key takes too: a message is held behind a dead letter
// that is still there, or not held at all, never stranded behind one that
// is gone.
const (
	// cdcClaimLockSQL is courier_claim's lock (migrations 0001, 0006,
	// 0008): the claims', the replays' and the holds' turn.
	cdcClaimLockSQL = `SELECT pg_advisory_xact_lock((1668047209::bigint << 32) | 'courier_outbox'::regclass::oid::bigint)`
	// cdcHeldSQL reads the keys held and their dead letters.
	cdcHeldSQL = `SELECT ordering_key, id FROM courier_outbox_dead_letters WHERE holds`
	// cdcHeldOfSQL reads those of the keys $1.
	cdcHeldOfSQL = `SELECT ordering_key, id FROM courier_outbox_dead_letters WHERE holds AND ordering_key = ANY($1)`
	// cdcExistsSQL finds the rows of $1 still in the outbox.
	cdcExistsSQL = `SELECT id FROM courier_outbox WHERE id = ANY($1)`
)

var (
	// cdcHoldRowsSQL moves rows behind their dead letters: ids, then the
	// dead letters' ids.
	cdcHoldRowsSQL = `WITH f AS (
    SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS f(id, behind)
), moved AS (
    DELETE FROM courier_outbox o USING f WHERE o.id = f.id
    RETURNING o.id, f.behind, ` + columns.List("o.") + `, o.created_at
)
INSERT INTO courier_outbox_held (id, behind, ` + columns.Names + `, created_at, held_at)
SELECT id, behind, ` + columns.Names + `, created_at, now() FROM moved
RETURNING id`
	// cdcHoldLogSQL holds table-less messages behind their dead letters,
	// with ids from courier_outbox's sequence in the messages' order,
	// once each (a relay that restarts reads again what it had not
	// confirmed): the arrays of their columns, then the dead letters' ids.
	cdcHoldLogSQL = `INSERT INTO courier_outbox_held (id, behind, ` + columns.Names + `, created_at, held_at)
SELECT nextval(pg_get_serial_sequence('courier_outbox', 'id')), f.behind, ` + columns.List("f.") + `, now(), now()
FROM (SELECT * FROM unnest(` + columns.Unnest(1) + `, ` + columns.Param(1, 1) + `::bigint[]) WITH ORDINALITY
        AS u(` + columns.Names + `, behind, n) ORDER BY n) AS f
WHERE NOT EXISTS (SELECT 1 FROM courier_outbox_held h WHERE h.message_id = f.message_id)`
)

// Held returns the keys that dead letters hold, each with its dead
// letter's id.
func (c CDC) Held(ctx context.Context) (map[string]int64, error) {
	held, err := readHeld(ctx, c.pool, cdcHeldSQL)
	if err != nil {
		return nil, fmt.Errorf("postgres: read the held keys: %w", err)
	}
	return held, nil
}

// readHeld reads the keys held and their dead letters with q.
func readHeld(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, q string, args ...any) (map[string]int64, error) {
	rows, _ := db.Query(ctx, q, args...)
	held := map[string]int64{}
	var key string
	var id int64
	if _, err := pgx.ForEachRow(rows, []any{&key, &id}, func() error { held[key] = id; return nil }); err != nil {
		return nil, err
	}
	return held, nil
}

// Hold moves the items whose key a dead letter holds behind it, in one
// transaction that takes its turn with the claims, the replays and the
// discards: a row is moved from courier_outbox to courier_outbox_held, a
// table-less message inserted there with an id from courier_outbox's
// sequence (its recorded failures dropped). It reports what became of
// each item (store.HoldResult): held, not held (its key is free: publish
// it), or its row not found.
func (c CDC) Hold(ctx context.Context, items []*store.LogItem) (store.Holding, error) {
	if len(items) == 0 {
		return store.Holding{}, nil
	}
	keys := make([]string, 0, len(items))
	seen := map[string]bool{}
	for _, it := range items {
		if !seen[it.Message.Key] {
			seen[it.Message.Key] = true
			keys = append(keys, it.Message.Key)
		}
	}
	var (
		held     map[string]int64
		found    = map[int64]bool{}
		snapText string
	)
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, cdcClaimLockSQL); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, cdcSnapshotSQL).Scan(&snapText); err != nil {
			return err
		}
		var err error
		if held, err = readHeld(ctx, tx, cdcHeldOfSQL, keys); err != nil {
			return err
		}
		var ids, behind, free, logBehind []int64
		var logged []*store.LogItem
		var forget [][16]byte
		for _, it := range items {
			cause, ok := held[it.Message.Key]
			switch {
			case ok && it.Seq > 0:
				ids, behind = append(ids, it.Seq), append(behind, cause)
			case ok:
				logged, logBehind = append(logged, it), append(logBehind, cause)
				if it.Failed {
					forget = append(forget, [16]byte(it.Message.ID))
				}
			case it.Seq > 0:
				free = append(free, it.Seq)
			}
		}
		if len(ids) > 0 {
			q, args := clocked(c.clock, cdcHoldRowsSQL, ids, behind)
			if err := collectIDs(ctx, tx, found, q, args...); err != nil {
				return err
			}
		}
		if len(logged) > 0 {
			arrays := columns.Arrays(len(logged), func(i int) *courier.Message { return &logged[i].Message })
			q, args := clocked(c.clock, cdcHoldLogSQL, append(arrays, logBehind)...)
			if _, err := tx.Exec(ctx, q, args...); err != nil {
				return err
			}
		}
		if len(forget) > 0 {
			if _, err := tx.Exec(ctx, cdcForgetSQL, forget); err != nil {
				return err
			}
		}
		if len(free) > 0 {
			return collectIDs(ctx, tx, found, cdcExistsSQL, free)
		}
		return nil
	})
	if err != nil {
		return store.Holding{}, fmt.Errorf("postgres: hold %d messages of held keys: %w", len(items), err)
	}
	h := store.Holding{Results: make([]store.HoldResult, len(items))}
	missing := false
	for i, it := range items {
		_, isHeld := held[it.Message.Key]
		switch {
		case it.Seq > 0 && !found[it.Seq]:
			h.Results[i], missing = store.HoldMissing, true
		case isHeld:
			h.Results[i] = store.HeldBehind
		default:
			h.Results[i] = store.NotHeld
		}
	}
	if missing {
		snap, err := parseSnapshot(snapText)
		if err != nil {
			return store.Holding{}, err
		}
		h.Visible = snap.sees
	}
	return h, nil
}

// collectIDs adds the ids q returns to found.
func collectIDs(ctx context.Context, tx pgx.Tx, found map[int64]bool, q string, args ...any) error {
	rows, _ := tx.Query(ctx, q, args...)
	var id int64
	_, err := pgx.ForEachRow(rows, []any{&id}, func() error { found[id] = true; return nil })
	return err
}
