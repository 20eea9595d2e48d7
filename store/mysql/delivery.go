package mysql

import (
	"database/sql"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/ops"
)

// delivery returns the audit watches (courier_audit_watches) and latency
// samples (courier_latency) on db, on the server's clock or clock.
func delivery(db *sql.DB, clock store.Clock) store.Delivery {
	return ops.NewDelivery(ops.Dialect{Name: "mysql", DB: ops.SQL{DB: db}, Clock: clock, NowSQL: "SELECT " + serverNow,
		Time: ops.Codec{Encode: func(t time.Time) any { return formatTime(t) }, Dest: func(t *time.Time) any { return utcTime(t) }}},
		ops.OnDuplicateKey)
}
