package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
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
//  3. readKeySQL reads the record; the claim owns it when its owner is this
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

	readKeySQL = `SELECT fingerprint, state, owner, locked_until, status, headers, body
FROM courier_idempotency_keys WHERE scope = ? AND idem_key = ?`
)

// errDeadlock is MySQL's ER_LOCK_DEADLOCK: InnoDB rolled the transaction
// back to break a cycle of lock waits.
const errDeadlock = 1213

// claimAttempts bounds the retries of a claim that InnoDB chose as a
// deadlock victim. The statements above queue on one row lock and should
// never deadlock; a claim is short and repeatable, so a retry is the safe
// answer if a server version's gap locking proves otherwise.
const claimAttempts = 5

// SQLIdempotency returns the idempotency-key store for handlers that work in
// database/sql transactions on db. Lock and expiry times are the server's
// UTC_TIMESTAMP(6), so requests served by different machines agree on them.
// Scopes and keys are compared byte for byte and may be up to 1024 bytes
// long each.
func SQLIdempotency(db *sql.DB) store.Idempotency[*sql.Tx] { return sqlIdem{db} }

type sqlIdem struct{ db *sql.DB }

func (s sqlIdem) InTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return inTx(ctx, s.db, nil, "mysql: ", fn)
}

// checkKey refuses a scope or key the schema would truncate or reject.
func checkKey(scope, key string) error {
	if len(scope) > maxKeyPart || len(key) > maxKeyPart {
		return fmt.Errorf("scope of %d bytes, key of %d bytes: courier_idempotency_keys holds up to %d bytes each; "+
			"lower idempotency.Config.MaxKeyLength or shorten the scope", len(scope), len(key), maxKeyPart)
	}
	return nil
}

func (s sqlIdem) Claim(ctx context.Context, c store.KeyClaim) (store.KeyRecord, bool, error) {
	if err := checkKey(c.Scope, c.Key); err != nil {
		return store.KeyRecord{}, false, fmt.Errorf("mysql: claim idempotency key: %w", err)
	}
	for attempt := 1; ; attempt++ {
		rec, mine, err := s.claim(ctx, c)
		var myErr *gomysql.MySQLError
		if errors.As(err, &myErr) && myErr.Number == errDeadlock && attempt < claimAttempts {
			continue
		}
		if err != nil {
			return rec, false, fmt.Errorf("mysql: claim idempotency key: %w", err)
		}
		return rec, mine, nil
	}
}

func (s sqlIdem) claim(ctx context.Context, c store.KeyClaim) (store.KeyRecord, bool, error) {
	rec := store.KeyRecord{Scope: c.Scope, Key: c.Key}
	var mine bool
	fp, owner := columns.Payload(c.Fingerprint), c.Owner.String()
	lockUS, retainUS := c.LockFor.Microseconds(), c.Retain.Microseconds()
	err := inTx(ctx, s.db, readCommitted(), "", func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, lockKeySQL, c.Scope, c.Key, fp, owner, lockUS, retainUS); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, takeOverSQL, fp, owner, lockUS, retainUS, c.Scope, c.Key, owner, fp); err != nil {
			return err
		}
		var (
			state, holder string
			status        sql.NullInt64
			headers       []byte
		)
		if err := tx.QueryRowContext(ctx, readKeySQL, c.Scope, c.Key).Scan(&rec.Fingerprint, &state, &holder,
			&utcTime{t: &rec.LockedUntil}, &status, &headers, &rec.Response.Body); err != nil {
			return fmt.Errorf("read the record back: %w", err)
		}
		mine = holder == owner
		rec.Done = state == "done"
		rec.Response.Status = int(status.Int64)
		if len(headers) > 0 {
			if err := json.Unmarshal(headers, &rec.Response.Headers); err != nil {
				return fmt.Errorf("stored response headers: %w", err)
			}
		}
		return nil
	})
	return rec, mine, err
}

const completeKeySQL = `UPDATE courier_idempotency_keys
SET state = 'done', status = ?, headers = ?, body = ?
WHERE scope = ? AND idem_key = ? AND owner = ? AND state = 'in_flight'`

// Complete changes state from in_flight to done, so the row it updates
// always counts as affected, whatever clientFoundRows says.
func (sqlIdem) Complete(ctx context.Context, tx *sql.Tx, scope, key string, owner uuid.UUID, resp store.StoredResponse) (bool, error) {
	h, err := jsonOrNull(resp.Headers, len(resp.Headers))
	if err != nil {
		return false, fmt.Errorf("mysql: complete idempotency key: encode headers: %w", err)
	}
	res, err := tx.ExecContext(ctx, completeKeySQL, resp.Status, h, columns.Payload(resp.Body), scope, key, owner.String())
	if err != nil {
		return false, fmt.Errorf("mysql: complete idempotency key: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("mysql: complete idempotency key: %w", err)
	}
	return n == 1, nil
}

const releaseKeySQL = `DELETE FROM courier_idempotency_keys WHERE scope = ? AND idem_key = ? AND owner = ? AND state = 'in_flight'`

func (s sqlIdem) Release(ctx context.Context, scope, key string, owner uuid.UUID) error {
	if _, err := s.db.ExecContext(ctx, releaseKeySQL, scope, key, owner.String()); err != nil {
		return fmt.Errorf("mysql: release idempotency key: %w", err)
	}
	return nil
}

// deleteExpiredKeysSQL deletes the oldest expired records first, along the
// index on expires_at.
const deleteExpiredKeysSQL = `DELETE FROM courier_idempotency_keys WHERE expires_at <= UTC_TIMESTAMP(6) ORDER BY expires_at LIMIT ?`

func (s sqlIdem) DeleteExpired(ctx context.Context, limit int) (int64, error) {
	res, err := s.db.ExecContext(ctx, deleteExpiredKeysSQL, limit)
	if err != nil {
		return 0, fmt.Errorf("mysql: delete expired idempotency keys: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("mysql: delete expired idempotency keys: %w", err)
	}
	return n, nil
}
