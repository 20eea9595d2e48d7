// Package mysql is Courier's MySQL and MariaDB dialect (MySQL 8.0, MariaDB
// 10.6 or newer, InnoDB), on github.com/go-sql-driver/mysql: the schema and
// its migrations, the outbox inserter for *sql.Tx ([DatabaseSQL]), the
// relay's store ([Store]), the consuming side's inbox ([SQLInbox],
// [ConsumerStore]), the operators' view ([Admin]) and Idempotency-Key
// records ([SQLIdempotency]).
//
//	db, _ := sql.Open("mysql", "courier:secret@tcp(127.0.0.1:3306)/app")
//	_, _ = mysql.Migrate(ctx, db)
//	w := outbox.New(mysql.DatabaseSQL(), outbox.Config{})
//	st, _ := mysql.NewStore(ctx, db, mysql.StoreConfig{})
//	r, _ := relay.New(st, publisher, relay.Config{})
//
// Any DSN of the driver works: Courier reads and writes its times as UTC
// text, so parseTime and loc change nothing for it. The semantics are
// PostgreSQL's (see store/postgres): publishing deletes a row, a claim
// records one lease row per batch, a key is blocked while a live lease holds
// it or one of its rows waits for a retry, and every write of Complete is
// guarded by "this lease is still live and mine". Ids are AUTO_INCREMENT,
// allocated at insert, not at commit; the per-key order is package relay's
// contract (see its Ordering section).
//
// # Claiming
//
// A claim is one READ COMMITTED transaction that first locks the single row
// of courier_outbox_claim_lock (SELECT … FOR UPDATE), so claims run one
// after another, and then
//
//  1. deletes the expired leases;
//  2. reads the ids and keys of the oldest rows that are neither leased nor
//     waiting for a retry (a primary-key range scan; the leased ids, unpacked
//     from the leases' JSON arrays with JSON_TABLE, are a materialised NOT IN
//     subquery), the keys of the remaining leases and the keys of rows
//     waiting for a retry (an index range on retry_at);
//  3. keeps, in id order, the rows whose key is not blocked (so a key's
//     claimed rows are always the oldest of its pending rows, and no key is
//     in two leases), inserts one lease row holding their ids and keys, reads
//     their contents and commits.
//
// READ COMMITTED makes every read after the lock see all that committed
// before it, whatever MySQL's default isolation; it needs binlog_format ROW
// or MIXED (the defaults) when binary logging is on. Keys are compared in
// Go, never in SQL, so no collation can merge two keys.
//
// SKIP LOCKED is available on both servers, and is not enough for per-key
// order for the reason PostgreSQL's documentation gives: a claimer that
// skips rows another claimer has locked but not committed cannot tell that
// they belong to a key it is about to claim later rows of. The lock row is
// chosen over GET_LOCK because it is transaction-scoped: COMMIT, ROLLBACK or
// a dropped connection release it, so it can never be left behind on a
// pooled connection nor be confused by a proxy that multiplexes sessions
// (ProxySQL), and it lives in the outbox's own database, where GET_LOCK
// names are server-wide. A claim
// holds it for a few milliseconds; publishing and completing, the slow
// parts, run in parallel. Complete locks its lease row (SELECT … FOR UPDATE)
// before checking it, so a claim that would drop that lease as expired waits
// for the outcome instead of racing it. Migrate, which must also work before
// the lock table exists, uses GET_LOCK.
//
// # Inbox and idempotency keys
//
// The semantics are PostgreSQL's, built from InnoDB's locks. An inbox
// marker is an INSERT IGNORE: a second delivery of a message waits for the
// row lock of the first one's uncommitted marker, then finds it, or inserts
// its own when the first rolled back (it waits at most
// innodb_lock_wait_timeout, then fails and is retried). A claim of an
// idempotency key is one READ COMMITTED transaction that inserts the record
// or locks the existing one (INSERT … ON DUPLICATE KEY UPDATE takes an
// exclusive row lock, so concurrent claims of one key queue), takes it over
// if its lock or its record expired, and reads it back; exactly one claim
// owns it. Affected-row counts, which depend on the DSN's clientFoundRows,
// decide nothing. Consumer names, scopes and keys are VARBINARY, compared
// byte for byte like PostgreSQL's text ("billing " is not "billing" under
// any collation), and checked against their columns' lengths before they
// are written. Replaying a dead letter moves it back into the outbox under
// its old id.
//
// # Time
//
// Times are the server's clock, UTC_TIMESTAMP(6), stored in DATETIME(6)
// columns as UTC, so relays on different machines agree on lease ends and
// retry times (as on PostgreSQL), and so do the inbox's processed_at and
// the idempotency keys' lock and expiry times. [store.Stats].Now is the
// server's clock.
//
// # Wake-ups
//
// MySQL has nothing like LISTEN/NOTIFY. A relay in the writers' process can
// use a [store.LocalNotifier] (set outbox.Config.Notify to its Signal); a
// relay in another process has no notifier (relay.Config.Notifier nil) and
// relies on the relay's adaptive polling: 1 ms doubling to 8 ms after work,
// then every PollInterval.
package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/courier-go/courier/store"
)

// StoreConfig tunes a Store. The zero value is ready to use.
type StoreConfig struct {
	// KeepPublished copies each published message into
	// courier_outbox_published (with published_at) instead of only deleting
	// it. Trim the table with a retention job.
	KeepPublished bool
}

// Store is the relay's view of a MySQL or MariaDB outbox. It is safe for
// concurrent use by any number of relays in any number of processes.
type Store struct {
	db  *sql.DB
	cfg StoreConfig
}

var _ store.RelayStore = (*Store)(nil)

// NewStore checks that the database's schema is the one this binary knows
// and that the server has what claims need (JSON_TABLE), and returns a Store
// on db.
func NewStore(ctx context.Context, db *sql.DB, cfg StoreConfig) (*Store, error) {
	if err := CheckSchema(ctx, db); err != nil {
		return nil, err
	}
	if err := checkServer(ctx, db); err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	return &Store{db: db, cfg: cfg}, nil
}

// readCommitted is every Store transaction's isolation: each read sees the
// latest committed rows.
func readCommitted() *sql.TxOptions { return &sql.TxOptions{Isolation: sql.LevelReadCommitted} }

const lockSQL = `SELECT id FROM courier_outbox_claim_lock WHERE id = 1 FOR UPDATE`

const expiredSQL = `DELETE FROM courier_outbox_leases WHERE until <= UTC_TIMESTAMP(6)`

// windowSQL reads the oldest rows that are not leased and not waiting for a
// retry, at most ?. Expired leases are gone by now: every lease is live.
// FORCE INDEX keeps the scan in id order, stopping at the limit: once rows
// are being deleted MariaDB's optimizer otherwise reads every pending row
// through courier_outbox_retry and sorts them, 10–30 ms per claim at 50,000
// pending rows instead of 2.
const windowSQL = `SELECT o.id, o.ordering_key FROM courier_outbox AS o FORCE INDEX (PRIMARY)
WHERE (o.retry_at IS NULL OR o.retry_at <= UTC_TIMESTAMP(6))
  AND o.id NOT IN (
    SELECT j.id FROM courier_outbox_leases AS l,
           JSON_TABLE(l.ids, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
    WHERE j.id IS NOT NULL)
ORDER BY o.id
LIMIT ?`

// The blocked keys are decoded and compared in Go.
const (
	leaseKeysSQL = `SELECT ordering_keys FROM courier_outbox_leases`
	retryKeysSQL = `SELECT ordering_key FROM courier_outbox WHERE retry_at > UTC_TIMESTAMP(6)`
)

const leaseSQL = `INSERT INTO courier_outbox_leases (owner, until, ids, ordering_keys, created_at)
VALUES (?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, ?, UTC_TIMESTAMP(6))`

const rowsSQL = `SELECT id, attempts, message_id, topic, ordering_key, type, version,
       content_type, payload, headers, occurred_at
FROM courier_outbox WHERE id IN (%s) ORDER BY id`

// claimWindow is how many candidate rows a claim of limit rows looks at.
func claimWindow(limit int) int { return max(4*limit, 1000) }

// Claim implements store.RelayStore.
func (s *Store) Claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	if limit < 1 {
		return store.Batch{}, fmt.Errorf("mysql: claim: limit is %d: use 1 or more", limit)
	}
	batch, err := s.claim(ctx, owner, limit, lease)
	if err != nil {
		return store.Batch{}, fmt.Errorf("mysql: claim: %w", err)
	}
	return batch, nil
}

func (s *Store) claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	var batch store.Batch
	tx, err := s.db.BeginTx(ctx, readCommitted())
	if err != nil {
		return batch, err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	var one int
	if err := tx.QueryRowContext(ctx, lockSQL).Scan(&one); errors.Is(err, sql.ErrNoRows) {
		return batch, errors.New("the row of courier_outbox_claim_lock is missing: run Migrate (or `courier migrate`) again to restore it")
	} else if err != nil {
		return batch, fmt.Errorf("lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, expiredSQL); err != nil {
		return batch, fmt.Errorf("drop expired leases: %w", err)
	}
	type cand struct {
		id  int64
		key string
	}
	var cands []cand
	err = queryEach(ctx, tx, windowSQL, []any{claimWindow(limit)}, func(rows *sql.Rows) error {
		var c cand
		if err := rows.Scan(&c.id, &c.key); err != nil {
			return err
		}
		cands = append(cands, c)
		return nil
	})
	if err != nil {
		return batch, fmt.Errorf("scan pending: %w", err)
	}
	if len(cands) == 0 {
		return batch, tx.Commit() // keeps the deletion of expired leases
	}
	blocked := make(map[string]struct{})
	err = queryEach(ctx, tx, leaseKeysSQL, nil, func(rows *sql.Rows) error {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return err
		}
		var keys []string
		if err := json.Unmarshal(raw, &keys); err != nil {
			return fmt.Errorf("decode lease keys: %w", err)
		}
		for _, k := range keys {
			blocked[k] = struct{}{}
		}
		return nil
	})
	if err != nil {
		return batch, fmt.Errorf("read leased keys: %w", err)
	}
	err = queryEach(ctx, tx, retryKeysSQL, nil, func(rows *sql.Rows) error {
		var k string
		if err := rows.Scan(&k); err != nil {
			return err
		}
		blocked[k] = struct{}{}
		return nil
	})
	if err != nil {
		return batch, fmt.Errorf("read keys waiting for a retry: %w", err)
	}

	// In id order, the rows of keys nobody holds: each key's claimed rows are
	// its oldest pending rows.
	ids := make([]int64, 0, limit)
	keys := make([]string, 0, limit)
	taken := make(map[string]struct{}, limit)
	for _, c := range cands {
		if len(ids) == limit {
			break
		}
		if _, ok := blocked[c.key]; ok {
			continue
		}
		ids = append(ids, c.id)
		if _, ok := taken[c.key]; !ok {
			taken[c.key] = struct{}{}
			keys = append(keys, c.key)
		}
	}
	if len(ids) == 0 {
		return batch, tx.Commit()
	}
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		return batch, err
	}
	keysJSON, err := json.Marshal(keys)
	if err != nil {
		return batch, err
	}
	res, err := tx.ExecContext(ctx, leaseSQL, owner, lease.Microseconds(), string(idsJSON), string(keysJSON))
	if err != nil {
		return batch, fmt.Errorf("record lease: %w", err)
	}
	if batch.Lease, err = res.LastInsertId(); err != nil {
		return batch, fmt.Errorf("record lease: %w", err)
	}
	in, args := inList(ids)
	batch.Records = make([]store.Record, 0, len(ids))
	err = queryEach(ctx, tx, fmt.Sprintf(rowsSQL, in), args, func(rows *sql.Rows) error {
		var (
			r       store.Record
			m       = &r.Message
			headers []byte
		)
		if err := rows.Scan(&r.Seq, &r.Attempts, &m.ID, &m.Topic, &m.Key, &m.Type, &m.Version,
			&m.ContentType, &m.Payload, &headers, &utcTime{t: &m.OccurredAt}); err != nil {
			return err
		}
		if headers != nil {
			if err := json.Unmarshal(headers, &m.Headers); err != nil {
				return fmt.Errorf("row %d: decode headers: %w", r.Seq, err)
			}
		}
		if m.Payload == nil {
			m.Payload = []byte{}
		}
		batch.Records = append(batch.Records, r)
		return nil
	})
	if err != nil {
		return batch, fmt.Errorf("read rows: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return batch, fmt.Errorf("commit: %w", err)
	}
	return batch, nil
}

// inList returns "?, ?, …" for ids and the ids as arguments.
func inList(ids []int64) (string, []any) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", "), args
}

// queryEach runs a query and calls fn for each row.
func queryEach(ctx context.Context, tx *sql.Tx, query string, args []any, fn func(*sql.Rows) error) error {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// leaseLiveSQL guards Complete: a relay whose lease has ended changes
// nothing, since the rows may belong to another relay by then. The lease
// row stays locked until Complete commits, so a claim cannot drop it as
// expired in between.
const leaseLiveSQL = `SELECT id FROM courier_outbox_leases WHERE id = ? AND owner = ? AND until > UTC_TIMESTAMP(6) FOR UPDATE`

const deleteSQL = `DELETE FROM courier_outbox WHERE id IN (%s)`

const archiveSQL = `INSERT INTO courier_outbox_published
    (id, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, attempts, published_at)
SELECT id, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, attempts, UTC_TIMESTAMP(6)
FROM courier_outbox WHERE id IN (%s)`

// failuresTable unpacks a JSON array of failures (see failureJSON).
const failuresTable = `JSON_TABLE(?, '$[*]' COLUMNS (
    id       BIGINT     PATH '$.id',
    err      MEDIUMTEXT PATH '$.error',
    delay_us BIGINT     PATH '$.delay_us',
    counted  INT        PATH '$.counted')) AS f`

// historyAppend appends a failure to o.history, keeping the latest 20.
const historyAppend = `JSON_ARRAY_APPEND(
    IF(JSON_LENGTH(COALESCE(o.history, JSON_ARRAY())) >= 20, JSON_REMOVE(o.history, '$[0]'), COALESCE(o.history, JSON_ARRAY())),
    '$',
    JSON_OBJECT('at', DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%dT%H:%i:%s.%fZ'),
                'error', f.err,
                'counted', JSON_EXTRACT(IF(f.counted, 'true', 'false'), '$')))`

const retrySQL = `UPDATE courier_outbox AS o JOIN ` + failuresTable + ` ON o.id = f.id
SET o.attempts = o.attempts + f.counted,
    o.last_error = f.err,
    o.retry_at = UTC_TIMESTAMP(6) + INTERVAL f.delay_us MICROSECOND,
    o.history = ` + historyAppend

const deadSQL = `INSERT INTO courier_outbox_dead_letters
    (id, message_id, topic, ordering_key, type, version, content_type, payload, headers,
     occurred_at, created_at, attempts, last_error, history, dead_at)
SELECT o.id, o.message_id, o.topic, o.ordering_key, o.type, o.version, o.content_type, o.payload, o.headers,
       o.occurred_at, o.created_at, o.attempts + f.counted, f.err, ` + historyAppend + `, UTC_TIMESTAMP(6)
FROM courier_outbox AS o JOIN ` + failuresTable + ` ON o.id = f.id`

const endLeaseSQL = `DELETE FROM courier_outbox_leases WHERE id = ? AND owner = ?`

// failureJSON is one failure as failuresTable reads it.
type failureJSON struct {
	ID      int64  `json:"id"`
	Error   string `json:"error"`
	DelayUS int64  `json:"delay_us"`
	Counted int    `json:"counted"`
}

func failuresJSON(fs []store.Failure) (string, error) {
	out := make([]failureJSON, len(fs))
	for i, f := range fs {
		counted := 0
		if f.Counted {
			counted = 1
		}
		out[i] = failureJSON{ID: f.Seq, Error: f.Error, DelayUS: f.Delay.Microseconds(), Counted: counted}
	}
	b, err := json.Marshal(out)
	return string(b), err
}

// Complete implements store.RelayStore. The whole outcome is written in one
// transaction; ending the lease releases the rows it does not mention.
func (s *Store) Complete(ctx context.Context, owner string, lease int64, o store.Outcome) error {
	if err := s.complete(ctx, owner, lease, o); err != nil {
		return fmt.Errorf("mysql: complete batch: %w", err)
	}
	return nil
}

func (s *Store) complete(ctx context.Context, owner string, lease int64, o store.Outcome) error {
	tx, err := s.db.BeginTx(ctx, readCommitted())
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	var id int64
	err = tx.QueryRowContext(ctx, leaseLiveSQL, lease, owner).Scan(&id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// Expired or not ours: change nothing but our own lease row.
	case err != nil:
		return fmt.Errorf("check lease: %w", err)
	default:
		if err := s.record(ctx, tx, o); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, endLeaseSQL, lease, owner); err != nil {
		return fmt.Errorf("end lease: %w", err)
	}
	return tx.Commit()
}

func (s *Store) record(ctx context.Context, tx *sql.Tx, o store.Outcome) error {
	if len(o.Published) > 0 {
		in, args := inList(o.Published)
		if s.cfg.KeepPublished {
			if _, err := tx.ExecContext(ctx, fmt.Sprintf(archiveSQL, in), args...); err != nil {
				return fmt.Errorf("archive published: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(deleteSQL, in), args...); err != nil {
			return fmt.Errorf("delete published: %w", err)
		}
	}
	if len(o.Retry) > 0 {
		fs, err := failuresJSON(o.Retry)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, retrySQL, fs); err != nil {
			return fmt.Errorf("record retries: %w", err)
		}
	}
	if len(o.Dead) > 0 {
		fs, err := failuresJSON(o.Dead)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, deadSQL, fs); err != nil {
			return fmt.Errorf("record dead letters: %w", err)
		}
		ids := make([]int64, len(o.Dead))
		for i, f := range o.Dead {
			ids[i] = f.Seq
		}
		in, args := inList(ids)
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(deleteSQL, in), args...); err != nil {
			return fmt.Errorf("delete dead letters: %w", err)
		}
	}
	return nil
}

const statsSQL = `SELECT
    (SELECT COUNT(*) FROM courier_outbox),
    (SELECT COALESCE(SUM(JSON_LENGTH(ids)), 0) FROM courier_outbox_leases WHERE until > UTC_TIMESTAMP(6)),
    (SELECT COUNT(*) FROM courier_outbox WHERE retry_at > UTC_TIMESTAMP(6)),
    (SELECT created_at FROM courier_outbox ORDER BY id LIMIT 1),
    UTC_TIMESTAMP(6),
    (SELECT COUNT(*) FROM courier_outbox_dead_letters)`

// Stats implements store.RelayStore.
func (s *Store) Stats(ctx context.Context) (store.Stats, error) {
	return Stats(ctx, s.db)
}

// Stats reports the state of the outbox reachable through q, for tools that
// have a connection but no Store.
func Stats(ctx context.Context, q Querier) (store.Stats, error) {
	var st store.Stats
	oldest := utcTime{t: &st.OldestPending}
	if err := q.QueryRowContext(ctx, statsSQL).Scan(&st.Pending, &st.Leased, &st.InBackoff, &oldest, &utcTime{t: &st.Now}, &st.DeadLetters); err != nil {
		return st, fmt.Errorf("mysql: stats: %w", err)
	}
	return st, nil
}
