// Package postgres is Courier's PostgreSQL dialect: the schema and its
// migrations, the outbox inserters for pgx.Tx ([Pgx]) and *sql.Tx
// ([DatabaseSQL]), the relay's store ([Store]) and its LISTEN/NOTIFY
// wake-ups ([Notifier]).
//
// # Claiming
//
// A claim is one round trip: a pgx batch (one implicit transaction) that first
// takes a transaction-scoped advisory lock and then runs one statement that
// selects due rows in id order, drops every row that has an earlier pending
// row of its key which is leased or backing off, and leases the rest by moving
// available_at forward. The advisory lock serialises claims, and the claim
// statement takes its snapshot after the lock is granted, so it sees every
// lease committed before it: two relays can never lease overlapping runs of
// one key. Claims take a few milliseconds, so serialising them costs little;
// publishing and marking, the slow parts, run in parallel.
//
// FOR UPDATE SKIP LOCKED, the usual queue idiom, is not enough here: a
// claimer that skips rows another claimer has locked but not yet committed
// cannot tell that they belong to a key it is about to claim later rows of,
// and two relays would publish one key's messages side by side. Serialised
// claims leave no such window, and since a relay only writes to rows while
// its lease lasts, a claim never waits on a row lock either.
//
// Leases are rows, not open transactions: a relay holds no connection while it
// publishes, and the rows of a relay that died become claimable when
// available_at passes.
package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/store"
)

// Store is the relay's view of a PostgreSQL outbox. It is safe for concurrent
// use by any number of relays in any number of processes.
type Store struct {
	pool      *pgxpool.Pool
	claimLock int64
}

var _ store.RelayStore = (*Store)(nil)

// Advisory lock namespaces (high 32 bits); the low 32 bits are the outbox
// table's oid, so schemas in one database do not share locks.
const (
	claimLockClass = int64(0x636c6169) // "clai"
	wakeLockClass  = int64(0x636f7572) // "cour", as in the trigger function
)

// NewStore checks that the database's schema is the one this binary knows
// and returns a Store on pool. The outbox table is resolved through the
// pool's search_path.
func NewStore(ctx context.Context, pool *pgxpool.Pool) (*Store, error) {
	if err := CheckSchema(ctx, pool); err != nil {
		return nil, err
	}
	oid, err := outboxOID(ctx, pool)
	if err != nil {
		return nil, err
	}
	return &Store{pool: pool, claimLock: claimLockClass<<32 | oid}, nil
}

// Pool returns the pool the store uses.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

func outboxOID(ctx context.Context, q Querier) (int64, error) {
	var oid int64
	if err := q.QueryRow(ctx, "SELECT 'courier_outbox'::regclass::oid::bigint").Scan(&oid); err != nil {
		return 0, fmt.Errorf("postgres: find courier_outbox: %w", err)
	}
	return oid, nil
}

// claimSQL: see the package documentation.
//
// The window w is the oldest due rows in id order, at most $4 of them; rows
// that are leased or backing off are skipped by the index scan's filter and do
// not count. A candidate is claimable unless its key has an earlier pending
// row that is not due (leased elsewhere or backing off); every earlier due row
// of its key is in the window, before it, so the claimed rows of each key
// are a prefix of its pending rows. The probe runs on
// courier_outbox_pending_key and visits only the key's rows with available_at
// > now(). OFFSET 0 keeps it a per-candidate probe: flattened into an
// anti-join, the planner (which expects almost no blocked rows) may compare
// every candidate with every blocked row. The window bounds the work of a
// claim that finds every key busy. Leasing goes through ANY(ARRAY(…)) so the
// update is a primary-key lookup per row.
const claimSQL = `
WITH candidates AS (
    SELECT w.id FROM (
        SELECT id, ordering_key FROM courier_outbox
        WHERE published_at IS NULL AND available_at <= now()
        ORDER BY id
        LIMIT $4) w
    WHERE NOT EXISTS (
        SELECT 1 FROM courier_outbox b
        WHERE b.ordering_key = w.ordering_key
          AND b.published_at IS NULL
          AND b.available_at > now()
          AND b.id < w.id
        OFFSET 0)
    ORDER BY w.id
    LIMIT $1
)
UPDATE courier_outbox o
SET lease_owner = $2, available_at = now() + $3::interval
WHERE o.id = ANY(ARRAY(SELECT id FROM candidates))
  AND o.published_at IS NULL AND o.available_at <= now()
RETURNING o.id, o.attempts, o.message_id, o.topic, o.ordering_key, o.type, o.version,
          o.content_type, o.payload, o.headers, o.occurred_at`

// claimWindow is how many due rows a claim of limit rows looks at.
func claimWindow(limit int) int { return max(4*limit, 1000) }

// Claim implements store.RelayStore.
func (s *Store) Claim(ctx context.Context, owner string, limit int, lease time.Duration) ([]store.Record, error) {
	var b pgx.Batch
	b.Queue("SELECT pg_advisory_xact_lock($1)", s.claimLock)
	b.Queue(claimSQL, limit, owner, lease, claimWindow(limit))
	br := s.pool.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("postgres: claim: lock: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("postgres: claim: %w", err)
	}
	recs := make([]store.Record, 0, limit)
	for rows.Next() {
		var r store.Record
		m := &r.Message
		if err := rows.Scan(&r.Seq, &r.Attempts, &m.ID, &m.Topic, &m.Key, &m.Type, &m.Version,
			&m.ContentType, &m.Payload, &m.Headers, &m.OccurredAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres: claim: scan: %w", err)
		}
		m.OccurredAt = m.OccurredAt.UTC()
		recs = append(recs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: claim: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("postgres: claim: commit: %w", err)
	}
	// RETURNING has no defined order.
	slices.SortFunc(recs, func(a, b store.Record) int { return cmp.Compare(a.Seq, b.Seq) })
	return recs, nil
}

const markSQL = `UPDATE courier_outbox SET published_at = now()
WHERE id = ANY($1) AND lease_owner = $2 AND published_at IS NULL`

// historyEntry appends one failure to history, keeping the latest 20.
const historyEntry = `CASE WHEN jsonb_array_length(coalesce(o.history, '[]')) >= 20 THEN o.history - 0
     ELSE coalesce(o.history, '[]') END
  || jsonb_build_array(jsonb_build_object('at', now(), 'error', f.err, 'counted', f.counted))`

const retrySQL = `UPDATE courier_outbox o
SET attempts = o.attempts + f.counted::int,
    last_error = f.err,
    available_at = now() + f.delay_us * interval '1 microsecond',
    lease_owner = NULL,
    history = ` + historyEntry + `
FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bool[]) AS f(id, err, delay_us, counted)
WHERE o.id = f.id AND o.lease_owner = $5 AND o.published_at IS NULL`

const deadSQL = `WITH f AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::bool[]) AS f(id, err, counted)
), dead AS (
    DELETE FROM courier_outbox o USING f
    WHERE o.id = f.id AND o.lease_owner = $4 AND o.published_at IS NULL
    RETURNING o.*, f.err, f.counted
)
INSERT INTO courier_outbox_dead_letters
    (id, message_id, topic, ordering_key, type, version, content_type, payload, headers,
     occurred_at, created_at, attempts, last_error, history)
SELECT o.id, o.message_id, o.topic, o.ordering_key, o.type, o.version, o.content_type, o.payload, o.headers,
       o.occurred_at, o.created_at, o.attempts + f.counted::int, f.err, ` + historyEntry + `
FROM dead o CROSS JOIN LATERAL (SELECT o.err, o.counted) AS f(err, counted)`

// parkSQL moves the later pending rows of each failed row's key to its retry
// time. They could not be claimed before it anyway; parked, they drop out of
// the claim's range scan instead of being probed and rejected on every claim
// while a poison message backs off.
const parkSQL = `UPDATE courier_outbox o SET available_at = f.retry_at
FROM (SELECT ordering_key, min(id) AS id, max(available_at) AS retry_at
      FROM courier_outbox WHERE id = ANY($1) GROUP BY ordering_key) f
WHERE o.ordering_key = f.ordering_key AND o.id > f.id
  AND o.published_at IS NULL AND o.available_at < f.retry_at`

const releaseSQL = `UPDATE courier_outbox SET lease_owner = NULL, available_at = now()
WHERE id = ANY($1) AND lease_owner = $2 AND published_at IS NULL`

// Complete implements store.RelayStore. All parts of the outcome are written
// in one round trip and one transaction.
func (s *Store) Complete(ctx context.Context, owner string, o store.Outcome) error {
	if o.Empty() {
		return nil
	}
	var b pgx.Batch
	if len(o.Published) > 0 {
		b.Queue(markSQL, o.Published, owner)
	}
	if len(o.Release) > 0 {
		b.Queue(releaseSQL, o.Release, owner)
	}
	if len(o.Retry) > 0 {
		ids, errs, delays, counted := failureColumns(o.Retry)
		b.Queue(retrySQL, ids, errs, delays, counted, owner)
		b.Queue(parkSQL, ids)
	}
	if len(o.Dead) > 0 {
		ids, errs, _, counted := failureColumns(o.Dead)
		b.Queue(deadSQL, ids, errs, counted, owner)
	}
	if err := s.pool.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("postgres: complete batch: %w", err)
	}
	return nil
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

const statsSQL = `SELECT count(*),
       count(*) FILTER (WHERE lease_owner IS NOT NULL AND available_at > now()),
       count(*) FILTER (WHERE lease_owner IS NULL AND available_at > now()),
       min(created_at),
       now(),
       (SELECT count(*) FROM courier_outbox_dead_letters)
FROM courier_outbox WHERE published_at IS NULL`

// Stats implements store.RelayStore.
func (s *Store) Stats(ctx context.Context) (store.Stats, error) {
	return stats(ctx, s.pool)
}

func stats(ctx context.Context, q Querier) (store.Stats, error) {
	var st store.Stats
	var oldest *time.Time
	if err := q.QueryRow(ctx, statsSQL).Scan(&st.Pending, &st.Leased, &st.InBackoff, &oldest, &st.Now, &st.DeadLetters); err != nil {
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
func Stats(ctx context.Context, q Querier) (store.Stats, error) { return stats(ctx, q) }
