package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/claims"
	"github.com/courier-go/courier/store/internal/columns"
)

// rowsSQL reads claimed rows. It runs after the claim has committed: the
// rows are leased to the caller by then, and reading them holds no lock.
var rowsSQL = `SELECT id, attempts, ` + columns.Names + `
FROM courier_outbox WHERE id = ANY($1) ORDER BY id`

// claimSQL calls courier_claim (claimAtSQL: at the store's clock), and
// returns with its answer the xmin of the statement's snapshot, taken
// before the claim ran, the claim's xid, assigned after: the one it has if
// it wrote, or, when its argument after the floor is true, one it takes
// (see scanFloor), and the server's start time. The floor applies only on
// the server whose start time the last argument gives: elsewhere (a standby
// promoted in a failover, reached through a multi-host URL or a proxy;
// the same server restarted) the claim makes a full pass, since the floor
// was learned from another server's ids and xids.
const claimSnapshot = `SELECT c.lease, c.ids, c.min_pending, pg_snapshot_xmin(s.s)::text::bigint,
    coalesce(CASE WHEN %s THEN pg_current_xact_id() ELSE pg_current_xact_id_if_assigned() END::text::bigint, 0),
    pg_postmaster_start_time()
FROM pg_current_snapshot() AS s (s), `

// floorOn is the claim's floor argument: $5 on the server that started at
// the time of the last argument, 0 elsewhere.
const floorOn = `CASE WHEN pg_postmaster_start_time() = %s THEN $5 ELSE 0 END`

var (
	claimSQL   = fmt.Sprintf(claimSnapshot, "$6") + `courier_claim($1, $2, $3, $4, ` + fmt.Sprintf(floorOn, "$7") + `) AS c`
	claimAtSQL = fmt.Sprintf(claimSnapshot, "$7") + `courier_claim($1, $2, $3, $4, ` + fmt.Sprintf(floorOn, "$8") + `, $6) AS c`
)

// Claim implements store.RelayStore: one call of courier_claim (see the
// migrations), which leases the rows and returns their ids, then a plain
// read of the rows. A row that is gone by then (the lease ran out and
// another relay published it) is left out.
func (s *relayStore) Claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	var (
		batch store.Batch
		ids   []int64
		lid   *int64
	)
	start := time.Now()
	at := start // the floor's time: the clock's, when the store has one
	if s.clock != nil {
		at = s.clock()
	}
	floor, server := s.floor.floor(at)
	mark := claimMark{began: start, at: at}
	var b pgx.Batch
	b.Queue(asyncCommit)
	takeXid := s.floor.needXid(start)
	if s.clock == nil {
		b.Queue(claimSQL, owner, limit, lease, claims.Window(limit), floor, takeXid, server)
	} else {
		b.Queue(claimAtSQL, owner, limit, lease, claims.Window(limit), floor, at, takeXid, server)
	}
	br := s.pool.SendBatch(ctx, &b)
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&lid, &ids, &mark.minPending, &mark.xmin, &mark.xid, &mark.server)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return store.Batch{}, fmt.Errorf("postgres: claim: %w", err)
	}
	mark.ended = time.Now()
	s.floor.note(floor, mark)
	if lid == nil || len(ids) == 0 {
		return store.Batch{}, nil
	}
	batch.Lease = *lid
	rows, err := s.pool.Query(ctx, rowsSQL, ids)
	if err != nil {
		return store.Batch{}, fmt.Errorf("postgres: claim: read rows: %w", err)
	}
	batch.Records = make([]store.Record, 0, len(ids))
	var r store.Record
	m := &r.Message
	_, err = pgx.ForEachRow(rows, columns.AppendDests([]any{&r.Seq, &r.Attempts}, m), func() error {
		columns.Finish(m)
		batch.Records = append(batch.Records, r)
		r = store.Record{} // fresh payload and headers for the next row
		return nil
	})
	if err != nil {
		return store.Batch{}, fmt.Errorf("postgres: claim: read rows: %w", err)
	}
	return batch, nil
}
