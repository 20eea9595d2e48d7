// Package postgres is Courier's PostgreSQL dialect: the schema and its
// migrations, the outbox inserters for pgx.Tx ([Pgx]) and *sql.Tx
// ([DatabaseSQL]), the relay's store ([Store]) and its LISTEN/NOTIFY
// wake-ups ([Notifier]).
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
//  2. looks at the oldest rows that are neither leased nor waiting for a
//     retry (a primary-key range scan; leased ids are filtered through a
//     hashed subplan);
//  3. keeps, in id order, the rows whose key is held neither by a live lease
//     nor by a row waiting for a retry (so a key's claimed rows are always the
//     oldest of its pending rows, and no key is in two leases);
//  4. records one lease row holding their ids and keys and returns the rows.
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
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/store"
)

// StoreConfig tunes a Store. The zero value is ready to use.
type StoreConfig struct {
	// KeepPublished copies each published message into
	// courier_outbox_published (with published_at) instead of only deleting
	// it. It costs about as much as the delete itself; trim the table with a
	// retention job.
	KeepPublished bool
}

// Store is the relay's view of a PostgreSQL outbox. It is safe for concurrent
// use by any number of relays in any number of processes.
type Store struct {
	pool *pgxpool.Pool
	cfg  StoreConfig
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

// claimWindow is how many candidate rows a claim of limit rows looks at.
func claimWindow(limit int) int { return max(4*limit, 1000) }

// asyncCommit makes the rest of a batch's implicit transaction commit without
// waiting for its WAL to reach the disk. The relay's own bookkeeping can
// afford it, and it takes a disk flush off every claim and every completion
// (and off the writers' queue for the disk): if the database crashes before
// the flush, a lost lease makes rows claimable again and a lost deletion
// makes them published again, a duplicate that JetStream drops by message id,
// never a loss. Messages themselves are written by the application's own
// transactions, under its own settings.
const asyncCommit = "SELECT set_config('synchronous_commit', 'off', true)"

// Claim implements store.RelayStore with one call of courier_claim (see the
// first migration).
func (s *Store) Claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	var b pgx.Batch
	b.Queue(asyncCommit)
	b.Queue("SELECT * FROM courier_claim($1, $2, $3, $4)", owner, limit, lease, claimWindow(limit))
	br := s.pool.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return store.Batch{}, fmt.Errorf("postgres: claim: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return store.Batch{}, fmt.Errorf("postgres: claim: %w", err)
	}
	batch := store.Batch{Records: make([]store.Record, 0, limit)}
	var r store.Record
	m := &r.Message
	_, err = pgx.ForEachRow(rows, []any{&batch.Lease, &r.Seq, &r.Attempts, &m.ID, &m.Topic, &m.Key, &m.Type, &m.Version,
		&m.ContentType, &m.Payload, &m.Headers, &m.OccurredAt}, func() error {
		m.OccurredAt = m.OccurredAt.UTC()
		batch.Records = append(batch.Records, r)
		r = store.Record{} // fresh payload and headers for the next row
		return nil
	})
	if err != nil {
		return store.Batch{}, fmt.Errorf("postgres: claim: %w", err)
	}
	if err := br.Close(); err != nil {
		return store.Batch{}, fmt.Errorf("postgres: claim: commit: %w", err)
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

// historyEntry appends one failure to history, keeping the latest 20.
const historyEntry = `CASE WHEN jsonb_array_length(coalesce(o.history, '[]')) >= 20 THEN o.history - 0
     ELSE coalesce(o.history, '[]') END
  || jsonb_build_array(jsonb_build_object('at', now(), 'error', f.err, 'counted', f.counted))`

const retrySQL = `UPDATE courier_outbox o
SET attempts = o.attempts + f.counted::int,
    last_error = f.err,
    retry_at = now() + f.delay_us * interval '1 microsecond',
    history = ` + historyEntry + `
FROM unnest($1::bigint[], $4::text[], $5::bigint[], $6::bool[]) AS f(id, err, delay_us, counted)
WHERE o.id = f.id AND ` + leaseLive

const deadSQL = `WITH f AS (
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
		b.Queue(q, o.Published, lease, owner)
	}
	if len(o.Retry) > 0 {
		ids, errs, delays, counted := failureColumns(o.Retry)
		b.Queue(retrySQL, ids, lease, owner, errs, delays, counted)
	}
	if len(o.Dead) > 0 {
		ids, errs, _, counted := failureColumns(o.Dead)
		b.Queue(deadSQL, ids, lease, owner, errs, counted)
	}
	b.Queue(endLeaseSQL, lease, owner)
	// A batch runs as one implicit transaction: all of it or none.
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

const statsSQL = `SELECT
    (SELECT count(*) FROM courier_outbox),
    (SELECT coalesce(sum(cardinality(ids)), 0) FROM courier_outbox_leases WHERE until > now()),
    (SELECT count(*) FROM courier_outbox WHERE retry_at > now()),
    (SELECT created_at FROM courier_outbox ORDER BY id LIMIT 1),
    now(),
    (SELECT count(*) FROM courier_outbox_dead_letters)`

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
