package sqlite

import (
	"context"
	"database/sql"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/ops"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// operations returns the operators' maintenance view of the database
// behind db (see [store.Operations]), on this process's clock or clock. Its
// batches run in immediate transactions; its TryLock always succeeds:
// SQLite runs one writer at a time, so two cleanups only interleave their
// batches.
func operations(db *sql.DB, clock store.Clock) store.Operations {
	return ops.New(ops.Dialect{
		Name: "sqlite",
		DB: ops.SQL{DB: db, Begin: func(ctx context.Context, fn func(sqltx.Conn) error) error {
			return immediate(ctx, db, func(c *sql.Conn) error { return fn(c) })
		}},
		Clock:     clock,
		Time:      ops.Micros,
		SagaTime:  ops.Micros,
		LeaseRows: "json_array_length(ids)",
		LeasedByTopic: `SELECT o.topic, count(*) FROM courier_outbox_leases AS l, json_each(l.ids) AS j, courier_outbox AS o
WHERE l.until > ? AND o.id = j.value GROUP BY o.topic`,
		OrderedTimes: true,
		Delete: func(table, col, key string, _ bool) (string, bool) {
			return `DELETE FROM ` + table + ` WHERE (` + key + `) IN (SELECT ` + key + ` FROM ` + table +
				` WHERE ` + col + ` < ? ORDER BY ` + col + ` LIMIT ?)`, false
		},
	})
}
