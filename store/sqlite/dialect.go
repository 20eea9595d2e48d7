package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqlstore"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// dialect describes db to the code SQLite shares with MySQL (the
// operators' view, the consuming side, the inbox, the part of the
// idempotency-key store that does not claim, the sagas): times are this
// process's clock, or clock's when clock is not nil, written as Unix
// microseconds. Replaying or discarding a dead letter runs in an immediate
// transaction, like a relay's claim, which it so takes turns with.
func dialect(db *sql.DB, clock store.Clock) sqlstore.Dialect {
	return sqlstore.Dialect{
		Name: "sqlite",
		DB:   db,
		InTx: func(ctx context.Context, fn func(*sql.Tx) error) error {
			return sqltx.InTx(ctx, db, nil, "sqlite: ", fn)
		},
		WriteTx: func(ctx context.Context, fn func(sqltx.Conn) error) error {
			return immediate(ctx, db, func(conn *sql.Conn) error { return fn(conn) })
		},
		HoldTx: func(ctx context.Context, fn func(sqltx.Conn) error) error {
			return immediate(ctx, db, func(conn *sql.Conn) error { return fn(conn) })
		},
		IsDuplicate: isUnique,
		Now:         "?",
		NowArgs:     func() []any { return []any{nowOf(clock).UnixMicro()} },
		Later: func(after time.Duration) (string, []any) {
			return "?", []any{nowOf(clock).Add(after).UnixMicro()}
		},
		WriteError: func(err error, what string) error { return migrations.WriteError(err, what, isMissing(err)) },
		HeaderValue: func(name string) string {
			return `json_extract(headers, '$."` + name + `"[0]')`
		},
		Times:                times,
		Stats:                func(ctx context.Context) (store.Stats, error) { return stats(ctx, db, clock) },
		MarkSQL:              markSQL,
		MarkGroupSQL:         markGroupSQL,
		MarkGroupReturning:   markGroupReturning,
		DeleteMarkersSQL:     deleteMarkersSQL,
		DeleteFailuresSQL:    deleteFailuresSQL,
		DeleteExpiredKeysSQL: deleteExpiredKeysSQL,
		ReplayFailed: func(id int64, msg string) (string, []any, error) {
			return replayFailed(nowOf(clock), id, msg)
		},
	}
}

// times reads and writes INTEGER columns of Unix microseconds.
var times = sqlstore.Times{
	Encode: func(t time.Time) any { return t.UnixMicro() },
	Decode: func(v any) (time.Time, error) {
		us, ok := v.(int64)
		if !ok {
			return time.Time{}, fmt.Errorf("sqlite: cannot read %T as Unix microseconds", v)
		}
		return time.UnixMicro(us).UTC(), nil
	},
}

// replayFailedSQL appends ?3, a JSON history entry, to the history. json()
// makes the parameter JSON, not a string holding JSON.
const replayFailedSQL = `UPDATE courier_inbox_dead_letters
SET replay_requested = NULL, last_error = ?2, attempts = attempts + 1,
    history = json_insert(coalesce(history, '[]'), '$[#]', json(?3))
WHERE id = ?1`

// replayFailed returns the statement that records a failed replay of id,
// with an entry at now.
func replayFailed(now time.Time, id int64, msg string) (string, []any, error) {
	entry, err := json.Marshal(store.Attempt{At: now.UTC().Truncate(time.Microsecond), Error: msg})
	if err != nil {
		return "", nil, err
	}
	return replayFailedSQL, []any{id, msg, string(entry)}, nil
}

const deleteMarkersSQL = `DELETE FROM courier_inbox WHERE (consumer, message_id) IN (
    SELECT consumer, message_id FROM courier_inbox WHERE processed_at < ? LIMIT ?)`

const deleteFailuresSQL = `DELETE FROM courier_inbox_failures WHERE id IN (
    SELECT id FROM courier_inbox_failures WHERE failed_at < ? LIMIT ?)`

const deleteExpiredKeysSQL = `DELETE FROM courier_idempotency_keys WHERE (scope, idem_key) IN (
    SELECT scope, idem_key FROM courier_idempotency_keys WHERE expires_at <= ? LIMIT ?)`
