package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// InTx implements store.Idempotency with Dialect.InTx.
func (k Keys) InTx(ctx context.Context, fn func(*sql.Tx) error) error { return k.d.InTx(ctx, fn) }

// Claim implements store.Idempotency with the dialect's KeyClaimer.
func (i Idempotency) Claim(ctx context.Context, c store.KeyClaim) (store.KeyRecord, bool, error) {
	rec, mine, err := i.claim(ctx, c)
	if err != nil {
		return rec, false, i.d.errorf("claim idempotency key: %w", err)
	}
	return rec, mine, nil
}

const readKeySQL = `SELECT fingerprint, state, owner, locked_until, status, headers, body
FROM courier_idempotency_keys WHERE scope = ? AND idem_key = ?`

// ReadKey reads the record of rec.Scope and rec.Key into rec after a claim
// by owner, and reports whether owner holds it.
func (d Dialect) ReadKey(ctx context.Context, c sqltx.Conn, rec *store.KeyRecord, owner string) (mine bool, err error) {
	var (
		state, holder string
		status        sql.NullInt64
		headers       []byte
	)
	if err := c.QueryRowContext(ctx, readKeySQL, rec.Scope, rec.Key).Scan(&rec.Fingerprint, &state, &holder,
		d.Dest(&rec.LockedUntil), &status, &headers, &rec.Response.Body); err != nil {
		return false, fmt.Errorf("read the record back: %w", err)
	}
	rec.Done = state == "done"
	rec.Response.Status = int(status.Int64)
	if len(headers) > 0 {
		if err := json.Unmarshal(headers, &rec.Response.Headers); err != nil {
			return false, fmt.Errorf("stored response headers: %w", err)
		}
	}
	return holder == owner, nil
}

const completeKeySQL = `UPDATE courier_idempotency_keys
SET state = 'done', status = ?, headers = ?, body = ?
WHERE scope = ? AND idem_key = ? AND owner = ? AND state = 'in_flight'`

// Complete implements store.Idempotency. It changes state from in_flight
// to done, so the row it updates always counts as affected, whatever
// MySQL's clientFoundRows says.
func (k Keys) Complete(ctx context.Context, tx *sql.Tx, scope, key string, owner uuid.UUID, resp store.StoredResponse) (bool, error) {
	h, err := columns.JSONOrNull(resp.Headers, len(resp.Headers))
	if err != nil {
		return false, k.d.errorf("complete idempotency key: encode headers: %w", err)
	}
	n, err := sqltx.Exec(ctx, tx, completeKeySQL, resp.Status, h, columns.Payload(resp.Body), scope, key, owner.String())
	if err != nil {
		return false, k.d.errorf("complete idempotency key: %w", err)
	}
	return n == 1, nil
}

const releaseKeySQL = `DELETE FROM courier_idempotency_keys WHERE scope = ? AND idem_key = ? AND owner = ? AND state = 'in_flight'`

// Release implements store.Idempotency.
func (k Keys) Release(ctx context.Context, scope, key string, owner uuid.UUID) error {
	if _, err := k.d.DB.ExecContext(ctx, releaseKeySQL, scope, key, owner.String()); err != nil {
		return k.d.errorf("release idempotency key: %w", err)
	}
	return nil
}

// DeleteExpired implements store.Idempotency with
// Dialect.DeleteExpiredKeysSQL.
func (k Keys) DeleteExpired(ctx context.Context, limit int) (int64, error) {
	n, err := sqltx.Exec(ctx, k.d.DB, k.d.DeleteExpiredKeysSQL, append(k.d.now(), limit)...)
	if err != nil {
		return 0, k.d.errorf("delete expired idempotency keys: %w", err)
	}
	return n, nil
}
