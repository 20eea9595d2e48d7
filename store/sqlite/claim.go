package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/claims"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqlstore"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// expiredSQL drops the leases that ended.
const expiredSQL = `DELETE FROM courier_outbox_leases WHERE until <= ?`

// heldSQL lists the keys held by live leases or by a row waiting for a
// retry (cause 0), those held by dead letters (cause: the oldest one's
// id, read through the partial index courier_outbox_dead_letters_holds,
// empty when no dead letter holds its key), and whether any lease has
// expired (a NULL key).
const heldSQL = `SELECT j.value, 0 FROM courier_outbox_leases AS l, json_each(l.keys) AS j WHERE l.until > ?1
UNION
SELECT ordering_key, 0 FROM courier_outbox WHERE retry_at > ?1
UNION ALL
SELECT ordering_key, min(id) FROM courier_outbox_dead_letters WHERE holds GROUP BY ordering_key
UNION ALL
SELECT NULL, 0 WHERE EXISTS (SELECT 1 FROM courier_outbox_leases WHERE until <= ?1)`

// moveSQL moves rows of keys that dead letters hold to
// courier_outbox_held (?1: a JSON array of {id, cause}, ?2: now);
// deleteMovedSQL deletes them from the outbox after.
var moveSQL = `INSERT INTO courier_outbox_held (id, behind, ` + columns.Names + `, created_at, held_at)
SELECT o.id, json_extract(m.value, '$.cause'), ` + columns.List("o.") + `, o.created_at, ?2
FROM json_each(?1) AS m JOIN courier_outbox AS o ON o.id = json_extract(m.value, '$.id')`

const deleteMovedSQL = `DELETE FROM courier_outbox WHERE id IN (SELECT json_extract(value, '$.id') FROM json_each(?1))`

// scanSQL reads the free rows (not waiting for a retry), oldest first, at
// most ?2. Leased rows are among them; their keys are held, so the claim
// skips them with the rest of their keys' rows.
const scanSQL = `SELECT id, ordering_key, retry_at IS NOT NULL FROM courier_outbox
WHERE retry_at IS NULL OR retry_at <= ?1
ORDER BY id
LIMIT ?2`

const leaseSQL = `INSERT INTO courier_outbox_leases (owner, until, ids, keys, created_at) VALUES (?, ?, ?, ?, ?)`

var rowsSQL = `SELECT ` + sqlstore.RecordColumns + `
FROM courier_outbox WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id`

const dropLeaseSQL = `DELETE FROM courier_outbox_leases WHERE id = ?`

// Claim implements store.RelayStore. It reads without the write lock and
// holds the lock only to check its picks again and record its lease (see
// the package documentation).
func (s *relayStore) Claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	return claims.Run("sqlite", limit, func() (store.Batch, error) { return s.claim(ctx, owner, limit, lease) })
}

func (s *relayStore) claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	if err := s.turn.Wait(ctx); err != nil {
		return store.Batch{}, err
	}
	released := false
	release := func() {
		if !released {
			released = true
			s.turn.Done()
		}
	}
	defer release()

	pick, expired, err := s.look(ctx, limit)
	if err != nil || (len(pick.IDs()) == 0 && len(pick.Moves()) == 0 && !expired) {
		return store.Batch{}, err
	}
	id, idsJSON, err := s.recordLease(ctx, owner, lease, pick)
	release()
	if err != nil || idsJSON == nil {
		return store.Batch{}, err
	}

	// The rows are leased to owner now; reading them holds no lock.
	recs, err := sqlstore.ReadRecords(ctx, s.db, times, len(pick.IDs()), rowsSQL, string(idsJSON))
	if err != nil {
		return store.Batch{}, err
	}
	if len(recs) == 0 { // published meanwhile by a relay whose lease ran out
		err := s.write(ctx, func(conn *sql.Conn) error {
			_, err := conn.ExecContext(ctx, dropLeaseSQL, id)
			return err
		})
		return store.Batch{}, err
	}
	return store.Batch{Lease: id, Records: recs}, nil
}

// look reads the held keys first and the free rows after, against one
// clock reading (see store/internal/claims), without any lock, and picks up
// to limit rows. It also reports whether any lease has expired.
func (s *relayStore) look(ctx context.Context, limit int) (*claims.Picker, bool, error) {
	now := nowOf(s.clock).UnixMicro()
	held, holding, expired, err := heldKeys(ctx, s.db, now)
	if err != nil {
		return nil, false, err
	}
	pick := claims.NewPicker(held, limit)
	pick.Hold(holding)
	errFull := errors.New("batch full") // stops the scan
	err = sqltx.QueryEach(ctx, s.db, scanSQL, []any{now, claims.Window(limit)}, func(rows *sql.Rows) error {
		var id int64
		var key string
		var retried bool
		if err := rows.Scan(&id, &key, &retried); err != nil {
			return err
		}
		if pick.Offer(id, key, retried) {
			return errFull
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFull) {
		return nil, false, fmt.Errorf("scan pending: %w", err)
	}
	return pick, expired, nil
}

// recordLease takes the write lock, drops expired leases, moves the rows
// met of keys that dead letters still hold to courier_outbox_held (a
// replay or discard of their dead letter takes the write lock too, so none
// is moved behind one that is gone), drops the picks whose key another
// process's claim, a retry or a dead letter has taken since, and records
// the lease of the rest. It returns the lease's id and its rows' ids as a
// JSON array, nil when no row is left.
func (s *relayStore) recordLease(ctx context.Context, owner string, lease time.Duration, pick *claims.Picker) (int64, []byte, error) {
	var (
		id      int64
		idsJSON []byte
	)
	err := immediate(ctx, s.db, func(conn *sql.Conn) error {
		now := nowOf(s.clock)
		nowUS := now.UnixMicro()
		if _, err := conn.ExecContext(ctx, expiredSQL, nowUS); err != nil {
			return fmt.Errorf("drop expired leases: %w", err)
		}
		if len(pick.IDs()) == 0 && len(pick.Moves()) == 0 {
			return nil
		}
		held, holding, _, err := heldKeys(ctx, conn, nowUS)
		if err != nil {
			return err
		}
		pick.KeepMoves(holding)
		if err := moveHeld(ctx, conn, pick.Moves(), nowUS); err != nil {
			return fmt.Errorf("move the rows of held keys: %w", err)
		}
		pick.Drop(held)
		if len(pick.IDs()) == 0 {
			return nil
		}
		var keysJSON []byte
		if idsJSON, keysJSON, err = pick.JSON(); err != nil {
			return err
		}
		res, err := conn.ExecContext(ctx, leaseSQL, owner, now.Add(lease).UnixMicro(), string(idsJSON), string(keysJSON), nowUS)
		if err != nil {
			return fmt.Errorf("record lease: %w", err)
		}
		if id, err = res.LastInsertId(); err != nil {
			return fmt.Errorf("record lease: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	return id, idsJSON, nil
}

// moveHeld moves the rows of moves to courier_outbox_held, held at now
// (unix microseconds), on conn, which holds the write lock.
func moveHeld(ctx context.Context, conn *sql.Conn, moves []claims.Move, now int64) error {
	if len(moves) == 0 {
		return nil
	}
	arg, err := claims.MovesJSON(moves)
	if err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, moveSQL, arg, now); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, deleteMovedSQL, string(arg))
	return err
}

// heldKeys reads the keys held at now (unix microseconds), those of them
// that dead letters hold (each with the oldest one's id), and whether any
// lease has expired.
func heldKeys(ctx context.Context, q sqltx.Conn, now int64) (map[string]struct{}, map[string]int64, bool, error) {
	held := make(map[string]struct{})
	var holding map[string]int64
	expired := false
	err := sqltx.QueryEach(ctx, q, heldSQL, []any{now}, func(rows *sql.Rows) error {
		var (
			k     sql.NullString
			cause int64
		)
		if err := rows.Scan(&k, &cause); err != nil {
			return err
		}
		if !k.Valid {
			expired = true
			return nil
		}
		held[k.String] = struct{}{}
		if cause != 0 {
			if holding == nil {
				holding = make(map[string]int64)
			}
			holding[k.String] = cause
		}
		return nil
	})
	if err != nil {
		return nil, nil, false, fmt.Errorf("read held keys: %w", err)
	}
	return held, holding, expired, nil
}
