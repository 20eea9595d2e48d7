// Package postgres is Courier's PostgreSQL dialect: the schema and its
// migrations, the outbox inserters for pgx.Tx ([Pgx]) and *sql.Tx
// ([DatabaseSQL]), the relay's store ([Store]) and its LISTEN/NOTIFY
// wake-ups ([Notifier]). [QueueMessages] queues messages into the caller's
// own pgx.Batch instead. Table-less messages, written only to the log for
// the CDC relay (relay/cdc), come from [LogOnly] and [QueueLogMessages]:
// logical decoding messages whose prefix, courier_outbox: and the OID of
// the courier_outbox table the search_path finds, keeps several schemas'
// outboxes apart. [CDC] is what the CDC relay asks of the database: its
// publication and slots, the log's decoding, the table's rows while it
// makes its slot, and the writes of what the broker answered.
//
// Outbox ids come from an identity column, allocated at insert, not at
// commit; claims take a key's committed rows in id order. The per-key order
// this gives is package relay's contract (see its Ordering section).
//
// # Claiming
//
// courier_outbox holds only pending messages: publishing deletes a row (or
// moves it to courier_outbox_published). A claim is one call of the SQL
// function courier_claim, one round trip, which
//
//  1. takes a transaction-scoped advisory lock, so claims are serialised, and
//     drops expired leases;
//  2. reads, in one statement and so against one snapshot and one time
//     (now(), or [StoreConfig].Clock's),
//     the held keys (those of live leases and of rows waiting for a retry)
//     and the oldest free rows (neither leased nor waiting for a retry; a
//     primary-key range scan, leased ids filtered through a hashed subplan);
//  3. keeps, in id order, the free rows whose key is not held, skipping held
//     keys' rows as the scan meets them, so that a held key's backlog hides
//     no other key's row (the scan looks at up to max(25×limit, 25,000)
//     free rows and stops once limit rows are kept), a key's claimed rows
//     are always the oldest of its pending rows, and no key is in two
//     leases;
//  4. records one lease row holding their ids and keys and returns the
//     lease and the ids: a row small enough for the socket's buffers, so
//     the transaction, and the lock, end whether or not the relay reads the
//     answer (a relay frozen mid-claim holds nobody up).
//
// The relay then reads the leased rows' contents with a plain query,
// outside the claim's transaction.
//
// # Dead rows and the scan's floor
//
// Published rows are deleted, and the primary key keeps their entries until
// vacuum removes them. While any transaction older than the deletes is open
// anywhere on the server (which stops vacuum: a long report, a forgotten
// session, a replica with hot_standby_feedback), a scan from the start of
// the index visits every one of them: half a second per claim at 5 million.
// So a claim scans from a floor instead, and courier_claim returns the
// smallest pending id at or above it. A [Store] keeps the floor at the
// smallest of those returned over the last 2 seconds (and the claim before),
// so the floor never passes a row that is pending, leased, held or waiting
// for a retry, nor one whose transaction commits within 2 s of inserting it.
// Two kinds of row can still appear below it: rows of a transaction that
// commits more than 2 s after inserting them, and dead letters replayed
// under their old id. A full pass (floor 0) finds them: every second while
// full passes are cheap, and less often as they grow dear (a pass of 0.5 s
// every 250 s), but at least every 5 minutes; such rows are published that
// much later, never lost. A full pass holds the claim lock while it runs: at
// 5 million dead rows it took about 4 s, during which no relay claims. A key's row stuck below
// newer published rows (a poison message waiting for its retries) keeps the
// floor below those rows' entries until it is published or parked. When
// nothing is pending the floor moves to the next id the outbox's sequence
// will give, which needs SELECT (or USAGE) on that sequence
// (courier_outbox_id_seq); a relay's role without it keeps the floor where
// it was while the outbox is empty.
//
// A claim thus writes one row, whatever the batch size, and publishing costs
// one delete per message: no per-message lease updates, no index on
// anything that changes. Leases live in rows, not in open transactions, so a
// relay holds no connection while it publishes, and the rows of a relay that
// died become claimable when its lease's until passes.
//
// FOR UPDATE SKIP LOCKED, the usual queue idiom, is not enough for per-key
// order: a claimer that skips rows another claimer has locked but not yet
// committed cannot tell that they belong to a key it is about to claim later
// rows of, and two relays would publish one key's messages side by side.
// Serialised claims that see every committed lease leave no such window. A
// claim takes a few milliseconds, so serialising them costs little; publishing
// and completing, the slow parts, run in parallel.
package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/claims"
	"github.com/courier-go/courier/store/internal/columns"
)

// StoreConfig tunes a Store. The zero value is ready to use.
type StoreConfig struct {
	// KeepPublished copies each published message into
	// courier_outbox_published (with published_at) instead of only deleting
	// it. It costs about as much as the delete itself; trim the table with a
	// retention job.
	KeepPublished bool
	// Clock is the time lease ends and retry times are compared with and
	// computed from, and the scan floor's (see Claiming); nil is the
	// server's now() and the process's time.Now. See [store.Clock].
	Clock store.Clock
}

// Store is the relay's view of a PostgreSQL outbox. It is safe for concurrent
// use by any number of relays in any number of processes.
type Store struct {
	pool  *pgxpool.Pool
	cfg   StoreConfig
	floor scanFloor
}

var _ store.RelayStore = (*Store)(nil)

// wakeLockClass is the high half of the wake-up advisory lock ("cour", as in
// the trigger function); the low half is the outbox table's oid, so schemas in
// one database do not share locks. Claims lock "clai" the same way (see
// courier_claim).
const wakeLockClass = int64(0x636f7572)

// NewStore checks that the database's schema is the one this binary knows
// and returns a Store on pool. The tables are resolved through the pool's
// search_path.
func NewStore(ctx context.Context, pool *pgxpool.Pool, cfg StoreConfig) (*Store, error) {
	if err := CheckSchema(ctx, pool); err != nil {
		return nil, err
	}
	return &Store{pool: pool, cfg: cfg}, nil
}

func outboxOID(ctx context.Context, q Querier) (int64, error) {
	var oid int64
	if err := q.QueryRow(ctx, "SELECT 'courier_outbox'::regclass::oid::bigint").Scan(&oid); err != nil {
		return 0, fmt.Errorf("postgres: find courier_outbox: %w", err)
	}
	return oid, nil
}

// asyncCommit makes the rest of a batch's implicit transaction commit without
// waiting for its WAL to reach the disk. The relay's own bookkeeping can
// afford it, and it takes a disk flush off every claim and every completion
// (and off the writers' queue for the disk): if the database crashes before
// the flush, a lost lease makes rows claimable again and a lost deletion
// makes them published again, a duplicate that JetStream drops by message id,
// never a loss. Messages themselves are written by the application's own
// transactions, under its own settings.
const asyncCommit = "SELECT set_config('synchronous_commit', 'off', true)"

// rowsSQL reads claimed rows. It runs after the claim has committed: the
// rows are leased to the caller by then, and reading them holds no lock.
const rowsSQL = `SELECT id, attempts, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at
FROM courier_outbox WHERE id = ANY($1) ORDER BY id`

// Claim implements store.RelayStore: one call of courier_claim (see the
// migrations), which leases the rows and returns their ids, then a plain
// read of the rows. A row that is gone by then (the lease ran out and
// another relay published it) is left out.
func (s *Store) Claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	var (
		batch      store.Batch
		ids        []int64
		lid        *int64
		minPending int64
	)
	start := time.Now()
	at := start // the floor's time: the clock's, when the store has one
	if s.cfg.Clock != nil {
		at = s.cfg.Clock()
	}
	floor := s.floor.floor(at)
	var b pgx.Batch
	b.Queue(asyncCommit)
	if s.cfg.Clock == nil {
		b.Queue("SELECT lease, ids, min_pending FROM courier_claim($1, $2, $3, $4, $5)", owner, limit, lease, claims.Window(limit), floor)
	} else {
		b.Queue("SELECT lease, ids, min_pending FROM courier_claim($1, $2, $3, $4, $5, $6)",
			owner, limit, lease, claims.Window(limit), floor, at)
	}
	br := s.pool.SendBatch(ctx, &b)
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&lid, &ids, &minPending)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return store.Batch{}, fmt.Errorf("postgres: claim: %w", err)
	}
	s.floor.note(at, floor, minPending, time.Since(start))
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
	_, err = pgx.ForEachRow(rows, []any{&r.Seq, &r.Attempts, &m.ID, &m.Topic, &m.Key, &m.Type, &m.Version,
		&m.ContentType, &m.Payload, &m.Headers, &m.OccurredAt}, func() error {
		m.OccurredAt = m.OccurredAt.UTC()
		batch.Records = append(batch.Records, r)
		r = store.Record{} // fresh payload and headers for the next row
		return nil
	})
	if err != nil {
		return store.Batch{}, fmt.Errorf("postgres: claim: read rows: %w", err)
	}
	return batch, nil
}

// leaseLive guards every write of Complete: a relay whose lease has ended
// changes nothing, since the rows may belong to another relay by then.
const leaseLive = `EXISTS (SELECT 1 FROM courier_outbox_leases WHERE id = $2 AND owner = $3 AND until > now())`

const deleteSQL = `DELETE FROM courier_outbox WHERE id = ANY($1) AND ` + leaseLive

const archiveSQL = `WITH published AS (
    DELETE FROM courier_outbox WHERE id = ANY($1) AND ` + leaseLive + `
    RETURNING id, message_id, topic, ordering_key, type, version, content_type, payload, headers,
              occurred_at, created_at, attempts)
INSERT INTO courier_outbox_published
    (id, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, attempts)
SELECT * FROM published`

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

var deadSQL = `WITH f AS (
    SELECT * FROM unnest($1::bigint[], $4::text[], $5::bool[]) AS f(id, err, counted)
), dead AS (
    DELETE FROM courier_outbox o USING f
    WHERE o.id = f.id AND ` + leaseLive + `
    RETURNING o.*, f.err, f.counted
)
INSERT INTO courier_outbox_dead_letters
    (id, message_id, topic, ordering_key, type, version, content_type, payload, headers,
     occurred_at, created_at, attempts, last_error, history)
SELECT o.id, o.message_id, o.topic, o.ordering_key, o.type, o.version, o.content_type, o.payload, o.headers,
       o.occurred_at, o.created_at, o.attempts + f.counted::int, f.err, ` + historyEntry + `
FROM dead o CROSS JOIN LATERAL (SELECT o.err, o.counted) AS f(err, counted)`

const endLeaseSQL = `DELETE FROM courier_outbox_leases WHERE id = $1 AND owner = $2`

// Complete implements store.RelayStore. The whole outcome is written in one
// round trip and one transaction; ending the lease releases the rows it does
// not mention.
func (s *Store) Complete(ctx context.Context, owner string, lease int64, o store.Outcome) error {
	var b pgx.Batch
	b.Queue(asyncCommit)
	if len(o.Published) > 0 {
		q := deleteSQL
		if s.cfg.KeepPublished {
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
		s.queue(&b, deadSQL, ids, lease, owner, errs, counted)
	}
	b.Queue(endLeaseSQL, lease, owner)
	// A batch runs as one implicit transaction: all of it or none.
	if err := s.pool.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("postgres: complete batch: %w", err)
	}
	return nil
}

// queue adds the statement query to b, at the store's clock (see clocked).
func (s *Store) queue(b *pgx.Batch, query string, args ...any) {
	query, args = clocked(s.cfg.Clock, query, args...)
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

const statsSQL = `SELECT
    (SELECT count(*) FROM courier_outbox),
    (SELECT coalesce(sum(cardinality(ids)), 0) FROM courier_outbox_leases WHERE until > now()),
    (SELECT count(*) FROM courier_outbox WHERE retry_at > now()),
    (SELECT created_at FROM courier_outbox ORDER BY id LIMIT 1),
    now(),
    (SELECT count(*) FROM courier_outbox_dead_letters)`

// Stats implements store.RelayStore.
func (s *Store) Stats(ctx context.Context) (store.Stats, error) {
	return stats(ctx, s.pool, s.cfg.Clock)
}

func stats(ctx context.Context, q Querier, clock store.Clock) (store.Stats, error) {
	var st store.Stats
	var oldest *time.Time
	query, args := clocked(clock, statsSQL)
	if err := q.QueryRow(ctx, query, args...).Scan(&st.Pending, &st.Leased, &st.InBackoff, &oldest, &st.Now, &st.DeadLetters); err != nil {
		return st, fmt.Errorf("postgres: stats: %w", err)
	}
	if oldest != nil {
		st.OldestPending = oldest.UTC()
	}
	st.Now = st.Now.UTC()
	return st, nil
}

// Stats reports the state of the outbox reachable through q, for tools that
// have a connection but no Store.
func Stats(ctx context.Context, q Querier) (store.Stats, error) { return stats(ctx, q, nil) }

// clocked returns the statement query with its arguments args for a store
// whose clock is clock. Without a clock that is query and args unchanged:
// the statement reads the server's now(). With one, every now() in query
// becomes one more parameter, after args, holding the clock's time. (Not
// coalesce($n, now()) in one statement for both: the planner cannot see a
// parameter's value in a generic plan, which could change the plans
// production runs.)
func clocked(clock store.Clock, query string, args ...any) (string, []any) {
	if clock == nil {
		return query, args
	}
	return strings.ReplaceAll(query, "now()", fmt.Sprintf("$%d::timestamptz", len(args)+1)), append(args, clock())
}
