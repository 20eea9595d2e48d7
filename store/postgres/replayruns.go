package postgres

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/ops"
)

// replayRuns returns the record of guarded replays (courier_replay_runs)
// on pool, on the server's clock or clock.
func replayRuns(pool *pgxpool.Pool, clock store.Clock) store.ReplayRuns {
	return ops.NewRuns(ops.Dialect{Name: "postgres", DB: pgOps{pool, pool}, Clock: clock, NowSQL: "SELECT now()", Time: ops.Times}, "")
}
