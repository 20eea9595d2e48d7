package sqlite

import (
	"context"
	"database/sql"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/ops"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// delivery returns the audit watches (courier_audit_watches) and latency
// samples (courier_latency) on db, on this process's clock or clock; times
// are Unix microseconds.
func delivery(db *sql.DB, clock store.Clock) store.Delivery {
	return ops.NewDelivery(ops.Dialect{Name: "sqlite", Clock: clock, Time: ops.Micros,
		DB: ops.SQL{DB: db, Begin: func(ctx context.Context, fn func(sqltx.Conn) error) error {
			return immediate(ctx, db, func(c *sql.Conn) error { return fn(c) })
		}}}, ops.OnConflict)
}
