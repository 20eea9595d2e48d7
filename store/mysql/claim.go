package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/claims"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqlstore"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// The held keys: those of live leases, of rows waiting for a retry and of
// dead letters that hold their key (with their id; 0 for the others).
// Expired leases are listed too, so the claim can remove them. Keys are
// decoded and compared in Go, never in SQL, so no collation can merge two
// keys.
const (
	leasesSQL    = `SELECT id, until > ?, ordering_keys FROM courier_outbox_leases`
	retryKeysSQL = `SELECT ordering_key, 0 FROM courier_outbox WHERE retry_at > ?
UNION ALL
SELECT ordering_key, id FROM courier_outbox_dead_letters WHERE holds = TRUE`
)

// moveSQL moves rows of keys that dead letters hold to
// courier_outbox_held: a JSON array of {id, cause}. deleteMovedSQL deletes
// them from the outbox after.
var moveSQL = `INSERT INTO courier_outbox_held (id, behind, ` + columns.Names + `, created_at, held_at)
SELECT o.id, m.cause, ` + columns.List("o.") + `, o.created_at, UTC_TIMESTAMP(6)
FROM courier_outbox AS o JOIN JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$.id', cause BIGINT PATH '$.cause')) AS m ON o.id = m.id`

const deleteMovedSQL = `DELETE FROM courier_outbox WHERE %s`

// expiredSQL locks the expired leases no one else is removing. Completes
// lock their own lease, so a frozen relay's Complete is skipped, not waited
// for.
const expiredSQL = `SELECT id FROM courier_outbox_leases WHERE until <= ? FOR UPDATE SKIP LOCKED`

// scanSQL reads the free rows (not waiting for a retry) after an id, oldest
// first. Leased rows are among them; their keys are held, so the claim
// skips them with the rest of their keys' rows. FORCE INDEX keeps the scan
// in id order, stopping at the limit: once rows are being deleted MariaDB's
// optimizer otherwise reads every pending row through courier_outbox_retry
// and sorts them, 10–30 ms per claim at 50,000 pending rows instead of 2.
const scanSQL = `SELECT id, ordering_key, retry_at IS NOT NULL FROM courier_outbox FORCE INDEX (PRIMARY)
WHERE id > ? AND (retry_at IS NULL OR retry_at <= ?)
ORDER BY id
LIMIT ?`

// leaseSQL records a claim's lease while its turn is still its own: the
// locking read of the turn's row makes a claimer that takes the next turn
// wait for this statement, and then see the lease.
const leaseSQL = `INSERT INTO courier_outbox_leases (owner, until, ids, ordering_keys, created_at)
SELECT ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, ?, UTC_TIMESTAMP(6)
FROM courier_outbox_claimer WHERE id = 1 AND holder = ? AND until > UTC_TIMESTAMP(6)
FOR UPDATE`

var rowsSQL = `SELECT ` + sqlstore.RecordColumns + `
FROM courier_outbox WHERE %s ORDER BY id`

const dropLeaseSQL = `DELETE FROM courier_outbox_leases WHERE id = ?`

// Claim implements store.RelayStore.
func (s *relayStore) Claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	return claims.Run("mysql", limit, func() (store.Batch, error) { return s.claim(ctx, owner, limit, lease) })
}

func (s *relayStore) claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	// A first look without the turn: a claim that finds nothing writes
	// nothing (taking and ending a turn are two commits).
	pick, expired, err := s.look(ctx, limit)
	if err != nil || (len(pick.IDs()) == 0 && len(pick.Moves()) == 0) {
		return store.Batch{}, err
	}
	token, err := s.takeTurn(ctx)
	if err != nil {
		return store.Batch{}, err
	}
	t := &turn{db: s.db, token: token}
	defer t.end(ctx)
	id, ids, err := s.recordLease(ctx, t, owner, limit, lease, pick, expired)
	if err != nil || len(ids) == 0 {
		return store.Batch{}, err
	}
	t.end(ctx)

	// The rows are leased to owner now; reading them holds no lock.
	recs, err := s.readRows(ctx, ids)
	if err != nil {
		return store.Batch{}, err
	}
	if len(recs) == 0 { // all published meanwhile by a relay whose lease ran out
		s.takeovers.Delete(id)
		_, err := s.db.ExecContext(ctx, dropLeaseSQL, id)
		return store.Batch{}, err
	}
	return store.Batch{Lease: id, Records: recs}, nil
}

// look reads the clock and the held keys, drops the expired leases and
// picks up to limit free rows, without the turn. It also reports whether
// any lease had expired.
func (s *relayStore) look(ctx context.Context, limit int) (*claims.Picker, bool, error) {
	now, err := s.now(ctx)
	if err != nil {
		return nil, false, err
	}
	held, holding, expired, err := s.heldKeys(ctx, now)
	if err != nil {
		return nil, false, err
	}
	if expired {
		if err := s.dropExpired(ctx, now); err != nil {
			return nil, false, fmt.Errorf("drop expired leases: %w", err)
		}
	}
	pick, err := s.scan(ctx, held, holding, limit, now)
	return pick, expired, err
}

// recordLease records, during turn t, the lease of pick's rows, and
// returns its id and the leased rows' ids (none when no row is left to
// claim).
//
// During the turn no other claim runs. Keys another claim took since the
// first look are held now; when the picks include one, it looks again.
// Otherwise the picks stand: a key not held now was not held in between
// either, or its holder has completed, publishing or releasing the rows
// this claim picked, which keeps its rows in order.
//
// The rows met of keys that dead letters still hold move to
// courier_outbox_held first, during the turn: a replay or discard of their
// dead letter takes a turn too, so none is moved behind one that is gone.
//
// expired says whether the first look met an expired lease. A lease
// recorded when one has expired is one of the store's takeovers (see
// lockRowsSQL).
func (s *relayStore) recordLease(ctx context.Context, t *turn, owner string, limit int, lease time.Duration, pick *claims.Picker, expired bool) (int64, []int64, error) {
	now, err := s.now(ctx)
	if err != nil {
		return 0, nil, err
	}
	held, holding, expiredNow, err := s.heldKeys(ctx, now)
	if err != nil {
		return 0, nil, err
	}
	if pick.Holds(held) {
		if pick, err = s.scan(ctx, held, holding, limit, now); err != nil {
			return 0, nil, err
		}
	}
	pick.KeepMoves(holding)
	if err := s.moveHeld(ctx, t, pick.Moves()); err != nil {
		return 0, nil, fmt.Errorf("move the rows of held keys: %w", err)
	}
	ids := pick.IDs()
	if len(ids) == 0 {
		return 0, nil, nil
	}
	idsJSON, keysJSON, err := pick.JSON()
	if err != nil {
		return 0, nil, err
	}
	res, err := s.exec(ctx, s.db, leaseSQL, owner, lease.Microseconds(), string(idsJSON), string(keysJSON), t.token)
	if err != nil {
		return 0, nil, fmt.Errorf("record lease: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, nil, fmt.Errorf("record lease: %w", err)
	} else if n == 0 {
		return 0, nil, fmt.Errorf("the claim took longer than its turn (%s) and recorded nothing; it is tried again", claimTurn)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, nil, fmt.Errorf("record lease: %w", err)
	}
	if expired || expiredNow {
		s.takeovers.Store(id, struct{}{})
	}
	return id, ids, nil
}

// now reads the server's clock (or the store's), formatted for the claim's
// statements: one reading for all of them, so a retry that comes due
// during the claim is not due for any of them.
func (s *relayStore) now(ctx context.Context) (string, error) {
	if s.clock != nil {
		return formatTime(s.clock()), nil
	}
	var now time.Time
	if err := s.db.QueryRowContext(ctx, nowSQL).Scan(utcTime(&now)); err != nil {
		return "", fmt.Errorf("read the clock: %w", err)
	}
	return now.Format(datetimeLayout), nil
}

// moveHeld moves the rows of moves to courier_outbox_held during the turn
// t, in a transaction that locks the turn's row.
func (s *relayStore) moveHeld(ctx context.Context, t *turn, moves []claims.Move) error {
	if len(moves) == 0 {
		return nil
	}
	ids := make([]int64, len(moves))
	for i, m := range moves {
		ids[i] = m.ID
	}
	arg, err := claims.MovesJSON(moves)
	if err != nil {
		return err
	}
	return turnTx(ctx, s.db, s.clock, t.token, func(tx *sql.Tx) error {
		if _, err := s.exec(ctx, tx, moveSQL, arg); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, fmt.Sprintf(deleteMovedSQL, idsIn(ids)))
		return err
	})
}

// heldKeys reads the keys held at now, those of them that dead letters
// hold (each with the oldest such dead letter's id) and whether any lease
// has expired.
func (s *relayStore) heldKeys(ctx context.Context, now string) (map[string]struct{}, map[string]int64, bool, error) {
	held := make(map[string]struct{})
	var holding map[string]int64
	expired := false
	err := sqltx.QueryEach(ctx, s.db, leasesSQL, []any{now}, func(rows *sql.Rows) error {
		var (
			id   int64
			live bool
			raw  []byte
		)
		if err := rows.Scan(&id, &live, &raw); err != nil {
			return err
		}
		if !live {
			expired = true
			return nil
		}
		var keys []string
		if err := json.Unmarshal(raw, &keys); err != nil {
			return fmt.Errorf("decode the keys of lease %d: %w", id, err)
		}
		for _, k := range keys {
			held[k] = struct{}{}
		}
		return nil
	})
	if err != nil {
		return nil, nil, false, fmt.Errorf("read leased keys: %w", err)
	}
	err = sqltx.QueryEach(ctx, s.db, retryKeysSQL, []any{now}, func(rows *sql.Rows) error {
		var (
			k     string
			cause int64
		)
		if err := rows.Scan(&k, &cause); err != nil {
			return err
		}
		held[k] = struct{}{}
		if cause != 0 {
			if holding == nil {
				holding = make(map[string]int64)
			}
			if c, ok := holding[k]; !ok || cause < c {
				holding[k] = cause
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, false, fmt.Errorf("read held keys: %w", err)
	}
	return held, holding, expired, nil
}

// scan picks, in id order, up to limit free rows whose key is not held,
// reading chunks of the primary key; it notes the rows of keys in holding
// as moves (see claims.Picker).
func (s *relayStore) scan(ctx context.Context, held map[string]struct{}, holding map[string]int64, limit int, now string) (*claims.Picker, error) {
	pick := claims.NewPicker(held, limit)
	pick.Hold(holding)
	window := claims.Window(limit)
	after, chunk := int64(0), max(2*limit, 500)
	for pick.Examined < window {
		n := 0
		full := false
		err := sqltx.QueryEach(ctx, s.db, scanSQL, []any{after, now, chunk}, func(rows *sql.Rows) error {
			var key string
			var retried bool
			if err := rows.Scan(&after, &key, &retried); err != nil {
				return err
			}
			n++
			if !full {
				full = pick.Offer(after, key, retried)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("scan pending: %w", err)
		}
		if full || n < chunk {
			break
		}
		chunk = min(2*chunk, 16384)
	}
	return pick, nil
}

// dropExpired deletes the expired leases that nobody holds locked.
func (s *relayStore) dropExpired(ctx context.Context, now string) error {
	return sqltx.InTx(ctx, s.db, readCommitted(), "", func(tx *sql.Tx) error {
		ids, err := sqlstore.Column[int64](ctx, tx, expiredSQL, now)
		if err != nil || len(ids) == 0 {
			return err
		}
		_, err = tx.ExecContext(ctx, "DELETE FROM courier_outbox_leases WHERE "+idsIn(ids))
		return err
	})
}

// readRows reads the rows with the given ids, in id order.
func (s *relayStore) readRows(ctx context.Context, ids []int64) ([]store.Record, error) {
	return sqlstore.ReadRecords(ctx, s.db, times, len(ids), fmt.Sprintf(rowsSQL, idsIn(ids)))
}
