package mysql

import (
	"database/sql"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/ops"
)

// replayRuns returns the record of guarded replays (courier_replay_runs)
// on db, on the server's clock or clock. A run's id is LAST_INSERT_ID(),
// read in the INSERT's transaction (MySQL has no INSERT … RETURNING).
func replayRuns(db *sql.DB, clock store.Clock) store.ReplayRuns {
	return ops.NewRuns(ops.Dialect{Name: "mysql", DB: ops.SQL{DB: db}, Clock: clock, NowSQL: "SELECT " + serverNow,
		Time: ops.Codec{Encode: func(t time.Time) any { return formatTime(t) }, Dest: func(t *time.Time) any { return utcTime(t) }}},
		"SELECT LAST_INSERT_ID()")
}
