package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// claimKeySQL inserts the record, or takes over an in-flight one whose lock
// expired, or replaces one past its expiry; it returns the record as it
// stands afterwards, whether this request owns it, and whether the record it
// read is stale (see claimAttempts).
const claimKeySQL = `WITH ins AS (
    INSERT INTO courier_idempotency_keys AS k (scope, idem_key, fingerprint, state, owner, locked_until, expires_at)
    VALUES ($1, $2, $3, 'in_flight', $4, now() + $5::interval, now() + $6::interval)
    ON CONFLICT (scope, idem_key) DO UPDATE
        SET fingerprint = EXCLUDED.fingerprint, state = 'in_flight', owner = EXCLUDED.owner,
            locked_until = EXCLUDED.locked_until, status = NULL, headers = NULL, body = NULL,
            created_at = now(), expires_at = EXCLUDED.expires_at
        WHERE k.expires_at <= now()
           OR (k.state = 'in_flight' AND k.locked_until <= now() AND k.fingerprint = EXCLUDED.fingerprint)
    RETURNING k.fingerprint, k.state, k.locked_until, k.status, k.headers, k.body, true AS mine, false AS stale
)
SELECT * FROM ins
UNION ALL
SELECT fingerprint, state, locked_until, status, headers, body, false,
       expires_at <= now() OR (state = 'in_flight' AND locked_until <= now() AND fingerprint = $3)
FROM courier_idempotency_keys WHERE scope = $1 AND idem_key = $2 AND NOT EXISTS (SELECT 1 FROM ins)`

// pgxIdem is the idempotency-key store for handlers that work in pgx
// transactions on the pool ([Driver.Idempotency]).
type pgxIdem struct {
	pool  *pgxpool.Pool
	clock store.Clock // nil: now()
}

func (p pgxIdem) InTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, p.pool, fn)
}

func (p pgxIdem) Claim(ctx context.Context, c store.KeyClaim) (store.KeyRecord, bool, error) {
	return claimKey(c, func() pgx.Row {
		q, args := clocked(p.clock, claimKeySQL, c.Scope, c.Key, c.Fingerprint, c.Owner, c.LockFor, c.Retain)
		return p.pool.QueryRow(ctx, q, args...)
	})
}

// claimAttempts bounds how often Claim runs claimKeySQL. ON CONFLICT waits
// for a concurrent claim of the key to commit and then sees its row, but the
// SELECT that reports a record this claim did not take reads the
// statement's snapshot, taken before that commit. So the statement returns
// no row when the concurrent claim inserted the key, and a stale record (one
// this claim should have taken, by the statement's own clock) when it took
// the key over. The next statement's snapshot sees the winner's record (or,
// if it was released meanwhile, inserts).
const claimAttempts = 5

// claimKey runs the claim query until it returns a row.
func claimKey(c store.KeyClaim, query func() pgx.Row) (store.KeyRecord, bool, error) {
	rec := store.KeyRecord{Scope: c.Scope, Key: c.Key}
	var state string
	var status *int
	var headers []byte
	var mine, stale bool
	for attempt := 1; ; attempt++ {
		err := query().Scan(&rec.Fingerprint, &state, &rec.LockedUntil, &status, &headers, &rec.Response.Body, &mine, &stale)
		noRow := errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows)
		if (noRow || (err == nil && stale)) && attempt < claimAttempts {
			continue
		}
		if noRow || stale {
			return rec, false, fmt.Errorf("postgres: claim idempotency key: concurrent claims changed the record %d times in a row; try again", claimAttempts)
		}
		if err != nil {
			return rec, false, fmt.Errorf("postgres: claim idempotency key: %w", err)
		}
		break
	}
	rec.Done = state == "done"
	if status != nil {
		rec.Response.Status = *status
	}
	if len(headers) > 0 {
		if err := json.Unmarshal(headers, &rec.Response.Headers); err != nil {
			return rec, false, fmt.Errorf("postgres: stored response headers: %w", err)
		}
	}
	return rec, mine, nil
}

const completeKeySQL = `UPDATE courier_idempotency_keys
SET state = 'done', status = $4, headers = $5, body = $6
WHERE scope = $1 AND idem_key = $2 AND owner = $3 AND state = 'in_flight'`

func (pgxIdem) Complete(ctx context.Context, tx pgx.Tx, scope, key string, owner uuid.UUID, resp store.StoredResponse) (bool, error) {
	h, err := json.Marshal(resp.Headers)
	if err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, completeKeySQL, scope, key, owner, resp.Status, h, bodyOrEmpty(resp.Body))
	if err != nil {
		return false, fmt.Errorf("postgres: complete idempotency key: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

const releaseKeySQL = `DELETE FROM courier_idempotency_keys WHERE scope = $1 AND idem_key = $2 AND owner = $3 AND state = 'in_flight'`

func (p pgxIdem) Release(ctx context.Context, scope, key string, owner uuid.UUID) error {
	if _, err := p.pool.Exec(ctx, releaseKeySQL, scope, key, owner); err != nil {
		return fmt.Errorf("postgres: release idempotency key: %w", err)
	}
	return nil
}

const deleteExpiredKeysSQL = `DELETE FROM courier_idempotency_keys WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM courier_idempotency_keys WHERE expires_at <= now() LIMIT $1))`

func (p pgxIdem) DeleteExpired(ctx context.Context, limit int) (int64, error) {
	q, args := clocked(p.clock, deleteExpiredKeysSQL, limit)
	tag, err := p.pool.Exec(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("postgres: delete expired idempotency keys: %w", err)
	}
	return tag.RowsAffected(), nil
}

// sqlIdem is the idempotency-key store for handlers that work in
// database/sql transactions on db ([SQLDriver.Idempotency]).
type sqlIdem struct {
	db    *sql.DB
	clock store.Clock // nil: now()
}

func (s sqlIdem) InTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return sqltx.InTx(ctx, s.db, nil, "postgres: ", fn)
}

func (s sqlIdem) Claim(ctx context.Context, c store.KeyClaim) (store.KeyRecord, bool, error) {
	return claimKey(c, func() pgx.Row {
		q, args := clocked(s.clock, claimKeySQL, c.Scope, c.Key, c.Fingerprint, c.Owner.String(),
			c.LockFor.String(), c.Retain.String())
		return s.db.QueryRowContext(ctx, q, args...)
	})
}

func (sqlIdem) Complete(ctx context.Context, tx *sql.Tx, scope, key string, owner uuid.UUID, resp store.StoredResponse) (bool, error) {
	h, err := json.Marshal(resp.Headers)
	if err != nil {
		return false, err
	}
	res, err := tx.ExecContext(ctx, completeKeySQL, scope, key, owner.String(), resp.Status, string(h), bodyOrEmpty(resp.Body))
	if err != nil {
		return false, fmt.Errorf("postgres: complete idempotency key: %w", err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func (s sqlIdem) Release(ctx context.Context, scope, key string, owner uuid.UUID) error {
	if _, err := s.db.ExecContext(ctx, releaseKeySQL, scope, key, owner.String()); err != nil {
		return fmt.Errorf("postgres: release idempotency key: %w", err)
	}
	return nil
}

func (s sqlIdem) DeleteExpired(ctx context.Context, limit int) (int64, error) {
	q, args := clocked(s.clock, deleteExpiredKeysSQL, limit)
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("postgres: delete expired idempotency keys: %w", err)
	}
	return res.RowsAffected()
}

func bodyOrEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
