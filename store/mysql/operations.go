package mysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/ops"
)

// operations returns the operators' maintenance view of the database
// behind db (see [store.Operations]), on the server's clock or clock. Its
// TryLock is GET_LOCK, held on a connection of its own.
func operations(db *sql.DB, clock store.Clock) store.Operations {
	return ops.New(ops.Dialect{
		Name:      "mysql",
		DB:        ops.SQL{DB: db},
		Clock:     clock,
		NowSQL:    "SELECT " + serverNow,
		Time:      ops.Codec{Encode: func(t time.Time) any { return formatTime(t) }, Dest: func(t *time.Time) any { return utcTime(t) }},
		SagaTime:  ops.Micros,
		LeaseRows: "JSON_LENGTH(ids)",
		LeasedByTopic: `SELECT o.topic, COUNT(*)
FROM courier_outbox_leases AS l, JSON_TABLE(l.ids, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j, courier_outbox AS o
WHERE l.until > ? AND o.id = j.id GROUP BY o.topic`,
		Estimate: `SELECT coalesce(max(TABLE_ROWS), 0) FROM information_schema.TABLES
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`,
		OrderedTimes: true,
		Delete: func(table, col, _ string, _ bool) (string, bool) {
			return `DELETE FROM ` + table + ` WHERE ` + col + ` < ? ORDER BY ` + col + ` LIMIT ?`, false
		},
		TryLock: func(ctx context.Context, name string) (func(), bool, error) { return getLock(ctx, db, name) },
	})
}

// getLock takes the named lock with GET_LOCK on a connection of its own,
// without waiting, and returns its release.
func getLock(ctx context.Context, db *sql.DB, name string) (func(), bool, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, false, err
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 0)`, name).Scan(&got); err != nil {
		conn.Close()
		return nil, false, err
	}
	if got.Int64 != 1 {
		conn.Close()
		return nil, false, nil
	}
	return func() {
		_, _ = conn.ExecContext(context.Background(), `SELECT RELEASE_LOCK(?)`, name)
		conn.Close()
	}, true, nil
}
