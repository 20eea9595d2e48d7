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

// Admin returns the operators' view of the database behind db: the outbox's
// state and both kinds of dead letters. Replaying a dead letter runs in an
// immediate transaction, like a relay's claim.
func Admin(db *sql.DB) store.Admin { return dialect(db, nil).Admin() }

// dialect is what SQLite tells the code it shares with MySQL: times are this
// process's clock, written as Unix microseconds. Its InTx runs the
// transactions in turn's queue (see [SQLInbox]), or as they come when turn
// is nil.
func dialect(db *sql.DB, turn queue) sqlstore.Dialect {
	return sqlstore.Dialect{
		Name: "sqlite",
		DB:   db,
		InTx: func(ctx context.Context, fn func(*sql.Tx) error) error {
			tx := func() error { return sqltx.InTx(ctx, db, nil, "sqlite: ", fn) }
			if turn == nil {
				return tx()
			}
			return turn.run(ctx, tx)
		},
		WriteTx: func(ctx context.Context, fn func(sqlstore.Conn) error) error {
			return immediate(ctx, db, func(conn *sql.Conn) error { return fn(conn) })
		},
		IsDuplicate:          isUnique,
		Now:                  "?",
		NowArgs:              func() []any { return []any{time.Now().UnixMicro()} },
		Times:                times,
		Stats:                func(ctx context.Context) (store.Stats, error) { return Stats(ctx, db) },
		MarkSQL:              markSQL,
		DeleteMarkersSQL:     deleteMarkersSQL,
		DeleteFailuresSQL:    deleteFailuresSQL,
		DeleteExpiredKeysSQL: deleteExpiredKeysSQL,
		ReplayFailed:         replayFailed,
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
// with an entry of this process's clock.
func replayFailed(id int64, msg string) (string, []any, error) {
	entry, err := json.Marshal(store.Attempt{At: time.Now().UTC().Truncate(time.Microsecond), Error: msg})
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
