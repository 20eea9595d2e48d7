package postgres

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
)

// What the CDC relay writes once the broker answered. The statements take
// ids only: the rows are still in the table, since nothing deletes a
// pending row but a relay that published it. Unlike the polling relay's
// (store.go), they hold no lease: the relay's slot is read by one relay at
// a time.
const (
	cdcDeleteSQL = `DELETE FROM courier_outbox WHERE id = ANY($1) RETURNING id`
	// cdcSnapshotSQL runs before the statements that record: a
	// transaction it sees is seen by them too, so a row of it that they do
	// not find is gone.
	cdcSnapshotSQL = `SELECT pg_current_snapshot()::text`
	// cdcForgetSQL drops the failures of published table-less messages.
	cdcForgetSQL = `DELETE FROM courier_outbox_log_failures WHERE message_id = ANY($1)`
)

var (
	cdcArchiveSQL = `WITH published AS (
    DELETE FROM courier_outbox WHERE id = ANY($1)
    RETURNING id, ` + columns.Names + `, created_at, attempts)
INSERT INTO courier_outbox_published
    (id, ` + columns.Names + `, created_at, attempts)
SELECT * FROM published
RETURNING id`
	// cdcArchiveLogSQL keeps published table-less messages in
	// courier_outbox_published (KeepPublished), with ids from
	// courier_outbox's sequence like the table's rows: the arrays of
	// the messages' columns (logRows), then their created_at and attempts.
	cdcArchiveLogSQL = `INSERT INTO courier_outbox_published
    (id, ` + columns.Names + `, created_at, attempts)
SELECT nextval(pg_get_serial_sequence('courier_outbox', 'id')), f.*
FROM unnest(` + columns.Unnest(1) + `, ` + columns.Param(1, 1) + `::timestamptz[], ` + columns.Param(1, 2) + `::int[])
     AS f(` + columns.Names + `, created_at, attempts)`
)

// lastEntries keeps the latest columns.HistoryCap entries of the JSON
// array h.
func lastEntries(h string) string {
	return `(SELECT coalesce(jsonb_agg(e ORDER BY n), '[]') FROM jsonb_array_elements(` + h + `) WITH ORDINALITY AS x(e, n)
  WHERE n > jsonb_array_length(` + h + `) - ` + strconv.Itoa(columns.HistoryCap) + `)`
}

// cdcDeadSQL moves rows to the dead letters, with the history the row
// holds and what the relay had not written of it yet.
var cdcDeadSQL = `WITH f AS (
    SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::jsonb[], $5::bool[]) AS f(id, attempts, err, history, holds)
), dead AS (
    DELETE FROM courier_outbox o USING f WHERE o.id = f.id
    RETURNING o.id, ` + columns.List("o.") + `, o.created_at, greatest(o.attempts, f.attempts) AS attempts, coalesce(nullif(f.err, ''), o.last_error) AS err,
              coalesce(o.history, '[]') || f.history AS history, f.holds
)
INSERT INTO courier_outbox_dead_letters
    (id, ` + columns.Names + `, created_at, attempts, last_error, history, holds)
SELECT id, ` + columns.Names + `, created_at, attempts, err, ` + lastEntries("history") + `, holds
FROM dead
ON CONFLICT DO NOTHING
RETURNING id`

// cdcDeadLogSQL makes table-less messages dead letters, with ids from
// courier_outbox's sequence (so that replaying one puts it in the table
// like any other) and the failures recorded of them: the arrays of the
// messages' columns (logRows), then their created_at, attempts, last
// errors and histories.
var cdcDeadLogSQL = `WITH f AS (
    SELECT * FROM unnest(` + columns.Unnest(1) + `, ` + columns.Param(1, 1) + `::timestamptz[], ` + columns.Param(1, 2) + `::int[],
                         ` + columns.Param(1, 3) + `::text[], ` + columns.Param(1, 4) + `::jsonb[], ` + columns.Param(1, 5) + `::bool[])
        AS f(` + columns.Names + `, created_at, attempts, err, history, holds)
), known AS (
    DELETE FROM courier_outbox_log_failures l USING f WHERE l.message_id = f.message_id
    RETURNING l.message_id, l.attempts, l.last_error, l.history
)
INSERT INTO courier_outbox_dead_letters
    (id, ` + columns.Names + `, created_at, attempts, last_error, history, holds)
SELECT nextval(pg_get_serial_sequence('courier_outbox', 'id')), ` + columns.List("f.") + `, f.created_at, greatest(f.attempts, k.attempts),
       coalesce(nullif(f.err, ''), k.last_error),
       ` + lastEntries("coalesce(k.history, '[]') || f.history") + `, f.holds
FROM f LEFT JOIN known k ON k.message_id = f.message_id
ON CONFLICT (message_id) DO NOTHING`

// Record writes what the broker said of published and dead in one
// transaction: published rows deleted (or archived, with keep), dead ones
// moved to the dead letters, table-less messages kept (with keep) or made
// dead letters. It reports the items whose rows it did not find, with
// what tells the caller whether to look for them again (store.Recorded).
// Items without a row are always found.
func (c CDC) Record(ctx context.Context, published, dead []*store.LogItem, keep bool) (store.Recorded, error) {
	w := newRecordBatch(c, published, dead, keep)
	if w.empty() {
		return store.Recorded{}, nil
	}
	found := map[int64]bool{}
	var snapText string
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		b, returning := w.batch()
		br := tx.SendBatch(ctx, b)
		if err := readRecorded(br, b.Len(), returning, &snapText, found); err != nil {
			br.Close()
			return err
		}
		return br.Close()
	})
	if err != nil {
		return store.Recorded{}, fmt.Errorf("postgres: record %d published and %d dead messages: %w", len(published), len(dead), err)
	}
	var rec store.Recorded
	for i, it := range append(published[:len(published):len(published)], dead...) {
		if it.Seq > 0 && !found[it.Seq] {
			rec.Missing = append(rec.Missing, i)
		}
	}
	if len(rec.Missing) == 0 {
		return rec, nil
	}
	snap, err := parseSnapshot(snapText)
	if err != nil {
		return store.Recorded{}, err
	}
	rec.Visible = snap.sees
	return rec, nil
}

// readRecorded reads the results of Record's n statements: the snapshot,
// then returning statements that return the ids they found, then the rest.
func readRecorded(br pgx.BatchResults, n, returning int, snapText *string, found map[int64]bool) error {
	if err := br.QueryRow().Scan(snapText); err != nil {
		return err
	}
	for range returning {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		for _, id := range ids {
			found[id] = true
		}
	}
	for range n - 1 - returning {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return nil
}

// recordBatch is what Record writes, column by column.
type recordBatch struct {
	keep             bool
	ids, deadIDs     []int64
	attempts         []int32
	errs, histories  []string
	holds            []bool
	logDead, logKept logRows
	forget           [][16]byte
}

func newRecordBatch(c CDC, published, dead []*store.LogItem, keep bool) *recordBatch {
	w := &recordBatch{keep: keep}
	now := c.now()
	for _, it := range published {
		switch {
		case it.Seq > 0:
			w.ids = append(w.ids, it.Seq)
		case keep:
			w.logKept.add(it, "", "", now)
		}
		if it.Seq == 0 && it.Failed {
			w.forget = append(w.forget, [16]byte(it.Message.ID))
		}
	}
	for _, it := range dead {
		last := ""
		if n := len(it.History); n > 0 {
			last = it.History[n-1].Error
		}
		if it.Seq == 0 {
			w.logDead.add(it, last, history(it), now)
			continue
		}
		w.deadIDs, w.attempts = append(w.deadIDs, it.Seq), append(w.attempts, int32(it.Attempts))
		w.errs, w.histories = append(w.errs, last), append(w.histories, history(it))
		w.holds = append(w.holds, it.Hold)
	}
	return w
}

func (w *recordBatch) empty() bool {
	return len(w.ids)+len(w.deadIDs)+len(w.logDead.items)+len(w.logKept.items)+len(w.forget) == 0
}

// batch returns the statements, the snapshot first and those returning
// ids next (returning of them).
func (w *recordBatch) batch() (b *pgx.Batch, returning int) {
	b = &pgx.Batch{}
	b.Queue(cdcSnapshotSQL)
	if len(w.ids) > 0 {
		q := cdcDeleteSQL
		if w.keep {
			q = cdcArchiveSQL
		}
		b.Queue(q, w.ids)
	}
	if len(w.deadIDs) > 0 {
		b.Queue(cdcDeadSQL, w.deadIDs, w.attempts, w.errs, w.histories, w.holds)
	}
	returning = b.Len() - 1
	if l := &w.logDead; len(l.items) > 0 {
		b.Queue(cdcDeadLogSQL, append(l.arrays(), l.created, l.attempts, l.errs, l.history, l.holds)...)
	}
	if l := &w.logKept; len(l.items) > 0 {
		b.Queue(cdcArchiveLogSQL, append(l.arrays(), l.created, l.attempts)...)
	}
	if len(w.forget) > 0 {
		b.Queue(cdcForgetSQL, w.forget)
	}
	return b, returning
}

// logRows holds the table-less messages written to a table (dead
// letters, or published ones kept) and the columns that are not the
// message's, one array each.
type logRows struct {
	items    []*store.LogItem
	errs     []string
	attempts []int32
	history  []*string
	created  []time.Time
	holds    []bool
}

func (d *logRows) add(it *store.LogItem, lastErr, history string, now time.Time) {
	d.items = append(d.items, it)
	d.holds = append(d.holds, it.Hold)
	d.attempts, d.history = append(d.attempts, int32(it.Attempts)), append(d.history, &history)
	d.created, d.errs = append(d.created, now), append(d.errs, lastErr)
}

// arrays returns the arrays of the messages' columns.
func (d *logRows) arrays() []any {
	return columns.Arrays(len(d.items), func(i int) *courier.Message { return &d.items[i].Message })
}

// cdcFailSQL records failures of rows: as the polling relay's retries do
// (store.go's retrySQL), without a lease.
var cdcFailSQL = `UPDATE courier_outbox o
SET attempts = o.attempts + f.counted,
    last_error = f.err,
    retry_at = now() + f.delay_us * interval '1 microsecond',
    history = ` + lastEntries("coalesce(o.history, '[]') || f.history") + `
FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::int[], $5::jsonb[]) AS f(id, err, delay_us, counted, history)
WHERE o.id = f.id
RETURNING o.id, o.attempts`

// cdcFailLogSQL records failures of table-less messages.
var cdcFailLogSQL = `INSERT INTO courier_outbox_log_failures AS l (message_id, attempts, last_error, history, updated_at)
SELECT f.message_id, f.counted, f.err, f.history, now()
FROM unnest($1::uuid[], $2::text[], $3::int[], $4::jsonb[]) AS f(message_id, err, counted, history)
ON CONFLICT (message_id) DO UPDATE
SET attempts = l.attempts + excluded.attempts,
    last_error = excluded.last_error,
    history = ` + lastEntries("coalesce(l.history, '[]') || excluded.history") + `,
    updated_at = excluded.updated_at
RETURNING l.message_id, l.attempts`

// Fail records failures, with the history each item has not written yet
// (which ends with the failure), on its row or, for a table-less message,
// in courier_outbox_log_failures, and returns each item's counted
// attempts as the database now holds them: after a relay's restart, more
// than the relay counted. An item whose row is not found gets -1: the row
// is gone, or its transaction is not visible yet (the log brings a commit
// a moment before other sessions see it); the relay then keeps the
// history, and the next Fail writes it with the attempts it counts.
func (c CDC) Fail(ctx context.Context, fs []store.LogFailure) ([]int, error) {
	var (
		ids                 []int64
		errs, logErrs       []string
		delays              []int64
		counted, logCounted []int32
		hist, logHist       []string
		msgIDs              [][16]byte
	)
	for _, f := range fs {
		if f.Item.Seq > 0 {
			ids, errs, delays = append(ids, f.Item.Seq), append(errs, f.Error), append(delays, f.Delay.Microseconds())
			counted, hist = append(counted, countedIn(f.Item)), append(hist, history(f.Item))
			continue
		}
		msgIDs, logErrs = append(msgIDs, [16]byte(f.Item.Message.ID)), append(logErrs, f.Error)
		logCounted, logHist = append(logCounted, countedIn(f.Item)), append(logHist, history(f.Item))
	}
	byRow, byMessage := map[int64]int{}, map[[16]byte]int{}
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if len(ids) > 0 {
			q, args := clocked(c.clock, cdcFailSQL, ids, errs, delays, counted, hist)
			rows, _ := tx.Query(ctx, q, args...)
			var id int64
			var n int
			if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { byRow[id] = n; return nil }); err != nil {
				return err
			}
		}
		if len(msgIDs) > 0 {
			q, args := clocked(c.clock, cdcFailLogSQL, msgIDs, logErrs, logCounted, logHist)
			rows, _ := tx.Query(ctx, q, args...)
			var id [16]byte
			var n int
			if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { byMessage[id] = n; return nil }); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: record %d failed publishes: %w", len(fs), err)
	}
	out := make([]int, len(fs))
	for i, f := range fs {
		var n int
		var ok bool
		if f.Item.Seq > 0 {
			n, ok = byRow[f.Item.Seq]
		} else {
			n, ok = byMessage[[16]byte(f.Item.Message.ID)]
		}
		if !ok {
			n = -1
		}
		out[i] = n
	}
	return out, nil
}

// countedIn returns how many of the failures in it's history not yet
// written count as attempts: the last one's, and those of earlier Fails
// that did not find the row.
func countedIn(it *store.LogItem) int32 {
	var n int32
	for _, a := range it.History {
		if a.Counted {
			n++
		}
	}
	return n
}
