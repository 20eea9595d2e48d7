package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/ops"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// operations returns the operators' maintenance view of the database
// behind pool (see [store.Operations]), on the server's clock or clock.
//
// Its TryLock is a session advisory lock (pg_try_advisory_lock of the
// name's hash), held on a pool connection of its own. Its Trim deletes a
// batch by ctid: the copies of published rows and the inbox markers have
// BRIN indexes on their time, which cannot return rows oldest first, so a
// batch takes the first rows in the table's physical order (the order they
// were written in) whose time is old enough, and the next batch starts
// after the last one deleted (Trimmed.Next, a ctid), with a TID range scan:
// the deleted rows stay in the table until vacuum, and a scan from the
// start would walk all of them again at every batch.
func operations(pool *pgxpool.Pool, clock store.Clock) store.Operations {
	return ops.New(ops.Dialect{
		Name:      "postgres",
		DB:        pgOps{pool, pool},
		Clock:     clock,
		NowSQL:    "SELECT now()",
		Time:      ops.Times,
		SagaTime:  ops.Times,
		LeaseRows: "cardinality(ids)",
		LeasedByTopic: `SELECT o.topic, count(*)
FROM (SELECT unnest(ids) AS id FROM courier_outbox_leases WHERE until > ?) AS l JOIN courier_outbox AS o ON o.id = l.id
GROUP BY o.topic`,
		Estimate:     `SELECT coalesce((SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(?)), -1)`,
		TrimSettings: `SET LOCAL enable_bitmapscan = off`,
		Delete: func(table, col, _ string, after bool) (string, bool) {
			from := ""
			if after {
				from = `ctid > (?::text)::tid AND `
			}
			return `WITH d AS (DELETE FROM ` + table + ` WHERE ctid = ANY(ARRAY(SELECT ctid FROM ` + table +
				` WHERE ` + from + col + ` < ? LIMIT ?)) RETURNING ctid)
SELECT count(*), coalesce(max(ctid)::text, '') FROM d`, true
		},
		Slots:   slotsSQL,
		TryLock: func(ctx context.Context, name string) (func(), bool, error) { return advisoryLock(ctx, pool, name) },
	})
}

// slotsSQL selects the current database's logical replication slots for
// Status, from shared memory (pg_replication_slots, and pg_stat_replication
// for the reader's lag): no table is read. The end of the log is
// pg_current_wal_lsn(), or on a standby the position replayed. The lag in
// seconds is the reader's flush_lag: a CDC relay reports its confirmed
// position as written, flushed and applied alike, and the flushed one is
// what becomes the slot's confirmed_flush_lsn. The failover flag is read
// through to_jsonb, since the column exists only from PostgreSQL 17 on;
// the standbys are the walsenders attached to no database (a logical
// reader is attached to one).
const slotsSQL = `WITH w AS (
	SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END AS lsn
)
SELECT s.slot_name::text, s.plugin::text, s.active, s.active_pid, coalesce(s.wal_status, ''),
	coalesce(pg_wal_lsn_diff(w.lsn, s.confirmed_flush_lsn), 0)::bigint,
	coalesce(pg_wal_lsn_diff(w.lsn, s.restart_lsn), 0)::bigint,
	extract(epoch FROM r.flush_lag)::float8,
	coalesce((to_jsonb(s) ->> 'failover')::bool, false),
	(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender' AND datname IS NULL)::int
FROM pg_replication_slots AS s CROSS JOIN w
LEFT JOIN pg_stat_replication AS r ON s.active AND r.pid = s.active_pid
WHERE s.slot_type = 'logical' AND s.database = current_database()
ORDER BY s.slot_name`

// advisoryLock takes the session advisory lock of name's hash on a
// connection of its own, without waiting, and returns its release.
func advisoryLock(ctx context.Context, pool *pgxpool.Pool, name string) (func(), bool, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, name).Scan(&ok); err != nil || !ok {
		conn.Release()
		return nil, false, err
	}
	return func() {
		if _, err := conn.Exec(context.Background(), `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, name); err != nil {
			// The session may still hold the lock: close it rather than
			// return it to the pool.
			_ = conn.Conn().Close(context.Background())
		}
		conn.Release()
	}, true, nil
}

// pgQuerier runs statements: the pool and a transaction are pgQueriers.
type pgQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// pgOps is ops.DB on pgx, numbering the ? placeholders.
type pgOps struct {
	q    pgQuerier
	pool *pgxpool.Pool
}

func (p pgOps) Query(ctx context.Context, query string, args []any, row func(scan func(...any) error) error) error {
	rows, err := p.q.Query(ctx, sqltx.Dollar(query), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return sqltx.EachRow(rows, func(r pgx.Rows) error { return row(r.Scan) })
}

func (p pgOps) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := p.q.Exec(ctx, sqltx.Dollar(query), args...)
	return tag.RowsAffected(), err
}

func (p pgOps) Tx(ctx context.Context, fn func(ops.DB) error) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error { return fn(pgOps{tx, p.pool}) })
}
