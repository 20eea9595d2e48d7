package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqlstore"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// maxKeyPart is the longest scope or key courier_idempotency_keys holds, in
// bytes.
const maxKeyPart = 1024

// A claim is three statements in one READ COMMITTED transaction:
//
//  1. lockKeySQL inserts the record in flight for this claim's owner, or,
//     when it exists, changes nothing but locks it: INSERT … ON DUPLICATE KEY
//     UPDATE takes an exclusive lock on the existing row, so concurrent
//     claims of one key queue here, each seeing the record as the previous
//     one left it. (INSERT IGNORE would take a shared lock, and two claims
//     upgrading theirs to take the record over would deadlock.)
//  2. takeOverSQL takes the record over when its lock expired (same
//     fingerprint only) or it is past its expiry; it does nothing to a
//     record this claim just inserted.
//  3. sqlstore's ReadKey reads the record; the claim owns it when its owner is this
//     claim's (a fresh UUID per claim).
//
// Affected-row counts are not used: they depend on the DSN's
// clientFoundRows.
const (
	lockKeySQL = `INSERT INTO courier_idempotency_keys
    (scope, idem_key, fingerprint, state, owner, locked_until, created_at, expires_at)
VALUES (?, ?, ?, 'in_flight', ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE scope = scope`

	takeOverSQL = `UPDATE courier_idempotency_keys
SET fingerprint = ?, state = 'in_flight', owner = ?, locked_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
    status = NULL, headers = NULL, body = NULL,
    created_at = UTC_TIMESTAMP(6), expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE scope = ? AND idem_key = ? AND owner <> ?
  AND (expires_at <= UTC_TIMESTAMP(6)
       OR (state = 'in_flight' AND locked_until <= UTC_TIMESTAMP(6) AND fingerprint = ?))`
)

// claimAttempts bounds the retries of a claim that InnoDB chose as a
// deadlock victim. The statements above queue on one row lock and should
// never deadlock; a claim is short and repeatable, so a retry is the safe
// answer if a server version's gap locking proves otherwise.
const claimAttempts = 5

// idempotency returns the idempotency-key store on db: lock and expiry
// times are the server's UTC_TIMESTAMP(6), or clock's when clock is not
// nil.
func idempotency(db *sql.DB, clock store.Clock) store.Idempotency[*sql.Tx] {
	d := dialect(db, clock)
	return d.Idempotency(func(ctx context.Context, c store.KeyClaim) (store.KeyRecord, bool, error) {
		return claimKey(ctx, d, clock, c)
	})
}

// checkKey refuses a scope or key the schema would truncate or reject.
func checkKey(scope, key string) error {
	if len(scope) > maxKeyPart || len(key) > maxKeyPart {
		return fmt.Errorf("scope of %d bytes, key of %d bytes: courier_idempotency_keys holds up to %d bytes each; "+
			"lower idempotency.Config.MaxKeyLength or shorten the scope", len(scope), len(key), maxKeyPart)
	}
	return nil
}

// claimKey claims c's key on d's database at clock, retrying a claim that
// InnoDB chose as a deadlock victim (see claimAttempts).
func claimKey(ctx context.Context, d sqlstore.Dialect, clock store.Clock, c store.KeyClaim) (store.KeyRecord, bool, error) {
	if err := checkKey(c.Scope, c.Key); err != nil {
		return store.KeyRecord{}, false, err
	}
	for attempt := 1; ; attempt++ {
		rec, mine, err := claimOnce(ctx, d, clock, c)
		if errorNumber(err) == errDeadlock && attempt < claimAttempts {
			continue
		}
		return rec, mine, err
	}
}

// claimOnce runs a claim's three statements in one transaction.
func claimOnce(ctx context.Context, d sqlstore.Dialect, clock store.Clock, c store.KeyClaim) (store.KeyRecord, bool, error) {
	rec := store.KeyRecord{Scope: c.Scope, Key: c.Key}
	var mine bool
	fp, owner := columns.Payload(c.Fingerprint), c.Owner.String()
	lockUS, retainUS := c.LockFor.Microseconds(), c.Retain.Microseconds()
	err := sqltx.InTx(ctx, d.DB, readCommitted(), "", func(tx *sql.Tx) error {
		q, args := clocked(clock, lockKeySQL, c.Scope, c.Key, fp, owner, lockUS, retainUS)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
		q, args = clocked(clock, takeOverSQL, fp, owner, lockUS, retainUS, c.Scope, c.Key, owner, fp)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
		var err error
		mine, err = d.ReadKey(ctx, tx, &rec, owner)
		return err
	})
	return rec, mine, err
}

// deleteExpiredKeysSQL deletes the oldest expired records first, along the
// index on expires_at.
const deleteExpiredKeysSQL = `DELETE FROM courier_idempotency_keys WHERE expires_at <= UTC_TIMESTAMP(6) ORDER BY expires_at LIMIT ?`
