package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
)

// claimKeySQL inserts the record, or takes over an in-flight one whose lock
// expired (same fingerprint only), or replaces one past its expiry; a record
// that is none of these stays as it is. ?6 is now.
const claimKeySQL = `INSERT INTO courier_idempotency_keys AS k
    (scope, idem_key, fingerprint, state, owner, locked_until, created_at, expires_at)
VALUES (?1, ?2, ?3, 'in_flight', ?4, ?5, ?6, ?7)
ON CONFLICT (scope, idem_key) DO UPDATE
    SET fingerprint = excluded.fingerprint, state = 'in_flight', owner = excluded.owner,
        locked_until = excluded.locked_until, status = NULL, headers = NULL, body = NULL,
        created_at = excluded.created_at, expires_at = excluded.expires_at
    WHERE k.expires_at <= ?6
       OR (k.state = 'in_flight' AND k.locked_until <= ?6 AND k.fingerprint = excluded.fingerprint)`

const readKeySQL = `SELECT fingerprint, state, owner, locked_until, status, headers, body
FROM courier_idempotency_keys WHERE scope = ? AND idem_key = ?`

// SQLIdempotency returns the idempotency-key store for handlers that work in
// database/sql transactions on db, a pool opened with [Open] (or with a DSN
// of your own that sets a busy timeout and _txlock=immediate).
//
// A claim is one immediate transaction: the upsert and the read of the
// record that follows it hold the write lock together, so concurrent claims
// of one key, in any process, run one after another and exactly one of them
// owns the key. Lock and expiry times are this process's clock.
//
// Idempotent requests run one at a time per database file, unrelated keys
// included. SQLite has one writer, and the request's transaction (InTx)
// begins with BEGIN IMMEDIATE, so it holds the write lock from before the
// handler runs until it commits. The next idempotent request, whatever its
// key, waits for it, and so does every other writer of the file (outbox
// writes, relay claims, inbox transactions). In the process, claims and the
// transactions of InTx take turns in arrival order (see [SQLInbox]): a retry
// of a key in flight waits for the first request and then usually gets its
// stored response rather than a 409. Other processes wait through their
// busy timeout (10 s with [Open]); a request that holds the lock longer
// makes their claims fail, and the middleware answers those with 500. Keep
// handlers short: no calls to other services inside them (write an outbox
// message and let a consumer make the call). Use PostgreSQL or MySQL when
// requests with different keys must run in parallel.
//
// That is not lifted with deferred transactions, which would let handlers
// read in parallel: a handler's first write would still wait for the lock,
// and in WAL mode a transaction that has read before another one committed
// cannot take the write lock at all. It fails with SQLITE_BUSY at once,
// without waiting, a failure every idempotent request would then risk.
func SQLIdempotency(db *sql.DB) store.Idempotency[*sql.Tx] { return &sqlIdem{db: db, turn: newQueue()} }

type sqlIdem struct {
	db   *sql.DB
	turn queue
}

func (s *sqlIdem) InTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return s.turn.run(ctx, func() error { return inTx(ctx, s.db, fn) })
}

func (s *sqlIdem) Claim(ctx context.Context, c store.KeyClaim) (store.KeyRecord, bool, error) {
	rec := store.KeyRecord{Scope: c.Scope, Key: c.Key}
	var mine bool
	err := s.turn.run(ctx, func() error {
		return immediate(ctx, s.db, func(conn *sql.Conn) error {
			now := time.Now()
			if _, err := conn.ExecContext(ctx, claimKeySQL, c.Scope, c.Key, columns.Payload(c.Fingerprint), c.Owner.String(),
				now.Add(c.LockFor).UnixMicro(), now.UnixMicro(), now.Add(c.Retain).UnixMicro()); err != nil {
				return err
			}
			var (
				state, owner string
				lockedUntil  int64
				status       sql.NullInt64
				headers      []byte
			)
			if err := conn.QueryRowContext(ctx, readKeySQL, c.Scope, c.Key).Scan(&rec.Fingerprint, &state, &owner, &lockedUntil,
				&status, &headers, &rec.Response.Body); err != nil {
				return fmt.Errorf("read the record back: %w", err)
			}
			mine = owner == c.Owner.String()
			rec.Done = state == "done"
			rec.LockedUntil = time.UnixMicro(lockedUntil).UTC()
			rec.Response.Status = int(status.Int64)
			if len(headers) > 0 {
				if err := json.Unmarshal(headers, &rec.Response.Headers); err != nil {
					return fmt.Errorf("stored response headers: %w", err)
				}
			}
			return nil
		})
	})
	if err != nil {
		return rec, false, fmt.Errorf("sqlite: claim idempotency key: %w", err)
	}
	return rec, mine, nil
}

const completeKeySQL = `UPDATE courier_idempotency_keys
SET state = 'done', status = ?, headers = ?, body = ?
WHERE scope = ? AND idem_key = ? AND owner = ? AND state = 'in_flight'`

func (*sqlIdem) Complete(ctx context.Context, tx *sql.Tx, scope, key string, owner uuid.UUID, resp store.StoredResponse) (bool, error) {
	h, err := jsonOrNull(resp.Headers, len(resp.Headers))
	if err != nil {
		return false, fmt.Errorf("sqlite: complete idempotency key: encode headers: %w", err)
	}
	res, err := tx.ExecContext(ctx, completeKeySQL, resp.Status, h, columns.Payload(resp.Body), scope, key, owner.String())
	if err != nil {
		return false, fmt.Errorf("sqlite: complete idempotency key: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlite: complete idempotency key: %w", err)
	}
	return n == 1, nil
}

const releaseKeySQL = `DELETE FROM courier_idempotency_keys WHERE scope = ? AND idem_key = ? AND owner = ? AND state = 'in_flight'`

func (s *sqlIdem) Release(ctx context.Context, scope, key string, owner uuid.UUID) error {
	if _, err := s.db.ExecContext(ctx, releaseKeySQL, scope, key, owner.String()); err != nil {
		return fmt.Errorf("sqlite: release idempotency key: %w", err)
	}
	return nil
}

const deleteExpiredKeysSQL = `DELETE FROM courier_idempotency_keys WHERE (scope, idem_key) IN (
    SELECT scope, idem_key FROM courier_idempotency_keys WHERE expires_at <= ? LIMIT ?)`

func (s *sqlIdem) DeleteExpired(ctx context.Context, limit int) (int64, error) {
	res, err := s.db.ExecContext(ctx, deleteExpiredKeysSQL, time.Now().UnixMicro(), limit)
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete expired idempotency keys: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete expired idempotency keys: %w", err)
	}
	return n, nil
}
