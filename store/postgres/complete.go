package postgres

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
)

// leaseLive guards every write of Complete: a relay whose lease has ended
// changes nothing, since the rows may belong to another relay by then.
const leaseLive = `EXISTS (SELECT 1 FROM courier_outbox_leases WHERE id = $2 AND owner = $3 AND until > now())`

const deleteSQL = `DELETE FROM courier_outbox WHERE id = ANY($1) AND ` + leaseLive

// archiveSQL moves published rows into courier_outbox_published, published
// at now() (the store's clock, see clocked; not the column's default, which
// is the server's).
var archiveSQL = `WITH published AS (
    DELETE FROM courier_outbox WHERE id = ANY($1) AND ` + leaseLive + `
    RETURNING id, ` + columns.Names + `, created_at, attempts)
INSERT INTO courier_outbox_published
    (id, ` + columns.Names + `, created_at, attempts, published_at)
SELECT *, now() FROM published`

// historyEntry appends one failure to history, keeping the latest
// columns.HistoryCap.
var historyEntry = `CASE WHEN jsonb_array_length(coalesce(o.history, '[]')) >= ` + strconv.Itoa(columns.HistoryCap) + ` THEN o.history - 0
     ELSE coalesce(o.history, '[]') END
  || jsonb_build_array(jsonb_build_object('at', now(), 'error', f.err, 'counted', f.counted))`

var retrySQL = `UPDATE courier_outbox o
SET attempts = o.attempts + f.counted::int,
    last_error = f.err,
    retry_at = now() + f.delay_us * interval '1 microsecond',
    history = ` + historyEntry + `
FROM unnest($1::bigint[], $4::text[], $5::bigint[], $6::bool[]) AS f(id, err, delay_us, counted)
WHERE o.id = f.id AND ` + leaseLive

// deadSQL moves failed rows into the dead letters, dead at now() (the
// store's clock, as every now() of Complete's statements: see clocked),
// holding their key when the failure says so (store.Failure.Hold).
var deadSQL = `WITH f AS (
    SELECT * FROM unnest($1::bigint[], $4::text[], $5::bool[], $6::bool[]) AS f(id, err, counted, hold)
), dead AS (
    DELETE FROM courier_outbox o USING f
    WHERE o.id = f.id AND ` + leaseLive + `
    RETURNING o.*, f.err, f.counted, f.hold
)
INSERT INTO courier_outbox_dead_letters
    (id, ` + columns.Names + `, created_at, attempts, last_error, history, dead_at, holds)
SELECT o.id, ` + columns.List("o.") + `, o.created_at, o.attempts + f.counted::int, f.err, ` + historyEntry + `, now(), o.hold
FROM dead o CROSS JOIN LATERAL (SELECT o.err, o.counted) AS f(err, counted)`

const endLeaseSQL = `DELETE FROM courier_outbox_leases WHERE id = $1 AND owner = $2`

// Complete implements store.RelayStore. The whole outcome is written in one
// round trip and one transaction; ending the lease releases the rows it does
// not mention.
func (s *relayStore) Complete(ctx context.Context, owner string, lease int64, o store.Outcome) error {
	var b pgx.Batch
	b.Queue(asyncCommit)
	if len(o.Published) > 0 {
		q := deleteSQL
		if s.keepPublished {
			q = archiveSQL
		}
		s.queue(&b, q, o.Published, lease, owner)
	}
	if len(o.Retry) > 0 {
		ids, errs, delays, counted := failureColumns(o.Retry)
		s.queue(&b, retrySQL, ids, lease, owner, errs, delays, counted)
	}
	if len(o.Dead) > 0 {
		ids, errs, _, counted := failureColumns(o.Dead)
		holds := make([]bool, len(o.Dead))
		for i, f := range o.Dead {
			holds[i] = f.Hold
		}
		s.queue(&b, deadSQL, ids, lease, owner, errs, counted, holds)
	}
	b.Queue(endLeaseSQL, lease, owner)
	// A batch runs as one implicit transaction: all of it or none.
	if err := s.pool.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("postgres: complete batch: %w", err)
	}
	return nil
}

// queue adds the statement query to b, at the store's clock (see clocked).
func (s *relayStore) queue(b *pgx.Batch, query string, args ...any) {
	query, args = clocked(s.clock, query, args...)
	b.Queue(query, args...)
}

func failureColumns(fs []store.Failure) (ids []int64, errs []string, delays []int64, counted []bool) {
	ids = make([]int64, len(fs))
	errs = make([]string, len(fs))
	delays = make([]int64, len(fs))
	counted = make([]bool, len(fs))
	for i, f := range fs {
		ids[i], errs[i], delays[i], counted[i] = f.Seq, f.Error, f.Delay.Microseconds(), f.Counted
	}
	return ids, errs, delays, counted
}
