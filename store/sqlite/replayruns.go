package sqlite

import (
	"context"
	"database/sql"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/ops"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// replayRuns returns the record of guarded replays (courier_replay_runs)
// on db, on this process's clock or clock; times are Unix microseconds.
func replayRuns(db *sql.DB, clock store.Clock) store.ReplayRuns {
	return ops.NewRuns(ops.Dialect{Name: "sqlite", Clock: clock, Time: ops.Micros,
		DB: ops.SQL{DB: db, Begin: func(ctx context.Context, fn func(sqltx.Conn) error) error {
			return immediate(ctx, db, func(c *sql.Conn) error { return fn(c) })
		}}}, "")
}
