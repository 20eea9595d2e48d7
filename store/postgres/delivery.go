package postgres

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/ops"
)

// delivery returns the audit watches (courier_audit_watches) and latency
// samples (courier_latency) on pool, on the server's clock or clock.
func delivery(pool *pgxpool.Pool, clock store.Clock) store.Delivery {
	return ops.NewDelivery(ops.Dialect{Name: "postgres", DB: pgOps{pool, pool}, Clock: clock, NowSQL: "SELECT now()", Time: ops.Times}, ops.OnConflict)
}
