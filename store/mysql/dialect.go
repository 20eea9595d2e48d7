package mysql

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqlstore"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// dialect describes db to the code MySQL shares with SQLite (the
// operators' view, the consuming side, the inbox, the part of the
// idempotency-key store that does not claim, the sagas): times are the
// server's clock, UTC_TIMESTAMP(6), written and read as UTC text, or
// clock's when clock is not nil. Replaying a dead letter locks it first
// (SELECT … FOR UPDATE), so concurrent replays of one dead letter wait for
// each other and all but the first find it gone; replaying or discarding
// one that holds its key takes a claim's turn (see inTurn).
func dialect(db *sql.DB, clock store.Clock) sqlstore.Dialect {
	d := sqlstore.Dialect{
		Name: "mysql",
		DB:   db,
		InTx: func(ctx context.Context, fn func(*sql.Tx) error) error {
			return sqltx.InTx(ctx, db, nil, "mysql: ", fn)
		},
		WriteTx: func(ctx context.Context, fn func(sqltx.Conn) error) error {
			return sqltx.InTx(ctx, db, readCommitted(), "", func(tx *sql.Tx) error { return fn(tx) })
		},
		HoldTx: func(ctx context.Context, fn func(sqltx.Conn) error) error {
			return inTurn(ctx, db, clock, func(tx *sql.Tx) error { return fn(tx) })
		},
		LockRow:     " FOR UPDATE",
		IsDuplicate: func(err error) bool { return errorNumber(err) == errDupEntry },
		Now:         serverNow,
		Later: func(after time.Duration) (string, []any) {
			return serverNow + " + INTERVAL ? MICROSECOND", []any{after.Microseconds()}
		},
		SkipLocked: " FOR UPDATE SKIP LOCKED",
		ReadLatest: " LOCK IN SHARE MODE",
		WriteError: func(err error, what string) error {
			return migrations.WriteError(err, what, errorNumber(err) == errNoSuchTable)
		},
		HeaderValue: func(name string) string {
			return `JSON_UNQUOTE(JSON_EXTRACT(headers, '$."` + name + `"[0]'))`
		},
		Times:                times,
		CheckConsumer:        checkConsumer,
		HoldKey:              holdKey,
		Stats:                func(ctx context.Context) (store.Stats, error) { return stats(ctx, db, clock) },
		MarkSQL:              markSQL,
		MarkGroupSQL:         markGroupSQL,
		DeleteMarkersSQL:     deleteMarkersSQL,
		DeleteFailuresSQL:    `DELETE FROM courier_inbox_failures WHERE failed_at < ? ORDER BY failed_at LIMIT ?`,
		DeleteExpiredKeysSQL: deleteExpiredKeysSQL,
		ReplayFailed: func(id int64, msg string) (string, []any, error) {
			q, args := clocked(clock, replayFailedSQL, msg, msg, id)
			return q, args, nil
		},
	}
	if clock != nil {
		d.Now, d.NowArgs = "?", func() []any { return []any{formatTime(clock())} }
		d.Later = func(after time.Duration) (string, []any) { return "?", []any{formatTime(clock().Add(after))} }
		d.DeleteExpiredKeysSQL = strings.Replace(d.DeleteExpiredKeysSQL, serverNow, "?", 1)
		d.MarkSQL = strings.Replace(d.MarkSQL, serverNow, "?", 1)
	}
	return d
}
