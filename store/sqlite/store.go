// Package sqlite is Courier's SQLite dialect, on the pure-Go driver
// modernc.org/sqlite (no cgo): the schema and its migrations, the outbox
// inserter for *sql.Tx ([DatabaseSQL]), the relay's store ([Store]), the
// consuming side's inbox ([SQLInbox], [ConsumerStore]), the operators' view
// ([Admin]) and Idempotency-Key records ([SQLIdempotency]). It is the
// embedded default: one file, nothing to install. [Open] opens a file the
// way Courier needs it (WAL, a busy timeout, immediate transactions).
//
//	db, _ := sqlite.Open("app.db")
//	_, _ = sqlite.Migrate(ctx, db)
//	n := store.NewLocalNotifier()
//	w := outbox.New(sqlite.DatabaseSQL(), outbox.Config{Notify: n.Signal})
//	st, _ := sqlite.NewStore(ctx, db, sqlite.StoreConfig{})
//	r, _ := relay.New(st, publisher, relay.Config{Notifier: n})
//
// The semantics are PostgreSQL's (see store/postgres): publishing deletes a
// row, a claim records one lease row per batch, a key is blocked while a
// live lease holds it or one of its rows waits for a retry, and every write
// of Complete is guarded by "this lease is still live and mine". SQLite runs
// one write transaction at a time, so ids are allocated in commit order and
// every writer of a key is serialised: each key's messages are published in
// the order they were written (package relay, Ordering, has the contract).
//
// # Claiming
//
// SQLite has one writer at a time and no SKIP LOCKED, and needs neither
// trick. A claim
//
//  1. reads, without the write lock (WAL readers do not block the writer),
//     the held keys (those of live leases, unpacked from their JSON arrays
//     with json_each, and those of rows waiting for a retry, a small partial
//     index) and then the free rows (not waiting for a retry) oldest first
//     (a rowid range scan), both against one reading of the clock, keeping
//     the rows whose key is not held: held keys' rows are skipped as the
//     scan meets them, so a held key's backlog hides no other key's row (up
//     to max(25×limit, 25,000) rows looked at, stopping once limit rows
//     are kept);
//  2. takes the write lock (BEGIN IMMEDIATE), deletes the expired leases,
//     reads the held keys again and drops the picks whose key has been
//     taken since (by another process's claim, or a retry), inserts one
//     lease row holding the kept ids and keys as JSON arrays, and commits;
//  3. reads the leased rows' contents, without the write lock.
//
// So a key's claimed rows are always the oldest of its pending rows, no key
// is in two leases, and a claim holds the write lock for a few short
// statements, not for its scan. Claims of one [Store] take turns in the
// process; claims from other processes that picked the same rows lose them
// at step 2 and come back empty.
//
// A process frozen while it holds the write lock (SIGSTOP, a paused VM)
// keeps every other writer of the file waiting, the application's included:
// SQLite has no server that could end its transaction. They wait up to
// their busy timeout (10 s with [Open]) and then fail with SQLITE_BUSY.
// Courier keeps its own write transactions to a few statements (a claim's
// step 2, a Complete's outcome), so a relay is rarely frozen inside one,
// but a process that can be frozen (under a debugger, a paused container)
// may freeze every writer of its file: run relays that must survive that
// on a server database.
//
// # Several relays
//
// SQLite has one writer, so a second relay adds no claiming throughput: run
// one relay per database file, and more only as standbys. Relays of one
// process should share one [Store], which queues their transactions in the
// process. Relays in several processes (or with separate Stores) queue for
// the write lock through SQLite's busy handler, which is not fair: a
// connection that has waited a while polls every 100 ms while a newcomer
// polls every millisecond, so under sustained contention one of them can
// wait for seconds, up to its busy timeout (then its claim fails and the
// relay retries). Applications writing to the file queue the same way, which
// is why [Open] sets a generous busy timeout.
//
// # Inbox and idempotency keys
//
// The semantics are again PostgreSQL's; SQLite's single writer provides
// what row locks provide there. The transactions of [SQLInbox] and
// [SQLIdempotency] (their InTx) begin with BEGIN IMMEDIATE when the pool
// comes from [Open], so they hold the write lock from their first statement
// to their commit, the handler's work included: a second delivery of a
// message waits for the first one's transaction and then finds its marker,
// or applies the message when the first rolled back. Every writer of the
// file waits meanwhile, so keep handlers short; a transaction is rolled back
// whenever it is not committed, also when its function panics. A claim of an
// idempotency key is an immediate transaction of its own (an upsert and a
// read of the record), so concurrent claims of one key, from any process,
// make exactly one owner. Idempotent requests therefore run one at a time
// per file, unrelated keys included (see [SQLIdempotency]). Replaying a dead letter moves it back into the
// outbox under its old id, which AUTOINCREMENT never gives to another
// message.
//
// # Time
//
// SQLite has no clock that all processes share, so Courier uses the Go clock
// of the process doing the work, consistently: created_at, the lease's
// until, retry_at, published_at, dead_at, the inbox's processed_at, parked_at
// and replay_requested, the idempotency keys' locked_until, created_at and
// expires_at, and [store.Stats].Now are the writing process's time.Now(),
// stored as INTEGER microseconds since the Unix epoch (UTC), as is
// occurred_at. The processes sharing a file run on one machine (WAL needs a
// local file system) and so share its clock. A store given a [store.Clock]
// ([StoreConfig].Clock, [Driver.WithClock]) takes its time from that clock
// instead.
//
// # Wake-ups
//
// SQLite cannot notify other connections of a commit. Inside one process
// use a [store.LocalNotifier]: set outbox.Config.Notify to its Signal and
// give it to the relay. Relays in other processes fall back to the relay's
// adaptive polling (relay.Config.Notifier nil): 1 ms doubling to 8 ms after
// work, then every PollInterval.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/claims"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqlstore"
)

// StoreConfig tunes a Store. The zero value is ready to use.
type StoreConfig struct {
	// KeepPublished copies each published message into
	// courier_outbox_published (with published_at) instead of only deleting
	// it. Trim the table with a retention job.
	KeepPublished bool
	// Clock is the time lease ends and retry times are compared with and
	// computed from, and the time the store records; nil is this process's
	// time.Now. See [store.Clock].
	Clock store.Clock
}

// Store is the relay's view of a SQLite outbox. It is safe for concurrent
// use by any number of relays in any number of processes that share the
// database file.
//
// Relays in one process should share one Store: it queues their claims and
// completions in the process, where the next one starts as soon as the
// previous one commits. Separate Stores (like separate processes) queue
// through SQLite's busy handler instead, which polls the lock with sleeps of
// 1 to 100 ms.
type Store struct {
	db   *sql.DB
	cfg  StoreConfig
	turn chan struct{} // one transaction of this Store at a time
}

var _ store.RelayStore = (*Store)(nil)

// NewStore checks that the database's schema is the one this binary knows
// and that db's connections wait for the write lock (a busy timeout, as
// [Open] sets), and returns a Store on db.
func NewStore(ctx context.Context, db *sql.DB, cfg StoreConfig) (*Store, error) {
	if err := CheckSchema(ctx, db); err != nil {
		return nil, err
	}
	var busy int64
	if err := db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
		return nil, fmt.Errorf("sqlite: read busy_timeout: %w", err)
	}
	if busy <= 0 {
		return nil, errors.New("sqlite: the database's connections have no busy_timeout, so concurrent claims and writes fail with SQLITE_BUSY: " +
			"open it with sqlite.Open, or add _pragma=busy_timeout(10000) to the DSN")
	}
	return &Store{db: db, cfg: cfg, turn: make(chan struct{}, 1)}, nil
}

// Every statement below takes the current time (Go's clock, unix
// microseconds) as a parameter; see the package documentation.

// expiredSQL drops the leases that ended.
const expiredSQL = `DELETE FROM courier_outbox_leases WHERE until <= ?`

// heldSQL lists the keys held by live leases or by a row waiting for a
// retry, and whether any lease has expired (a NULL key).
const heldSQL = `SELECT j.value FROM courier_outbox_leases AS l, json_each(l.keys) AS j WHERE l.until > ?1
UNION
SELECT ordering_key FROM courier_outbox WHERE retry_at > ?1
UNION ALL
SELECT NULL WHERE EXISTS (SELECT 1 FROM courier_outbox_leases WHERE until <= ?1)`

// scanSQL reads the free rows (not waiting for a retry), oldest first, at
// most ?2. Leased rows are among them; their keys are held, so the claim
// skips them with the rest of their keys' rows.
const scanSQL = `SELECT id, ordering_key, retry_at IS NOT NULL FROM courier_outbox
WHERE retry_at IS NULL OR retry_at <= ?1
ORDER BY id
LIMIT ?2`

const leaseSQL = `INSERT INTO courier_outbox_leases (owner, until, ids, keys, created_at) VALUES (?, ?, ?, ?, ?)`

const rowsSQL = `SELECT ` + sqlstore.RecordColumns + `
FROM courier_outbox WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id`

const dropLeaseSQL = `DELETE FROM courier_outbox_leases WHERE id = ?`

// write runs fn in an immediate transaction, after the Store's previous
// one has ended.
func (s *Store) write(ctx context.Context, fn func(conn *sql.Conn) error) error {
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.turn }()
	return immediate(ctx, s.db, fn)
}

// Claim implements store.RelayStore. It reads without the write lock and
// holds the lock only to check its picks again and record its lease (see
// the package documentation).
func (s *Store) Claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	return claims.Run("sqlite", limit, func() (store.Batch, error) { return s.claim(ctx, owner, limit, lease) })
}

func (s *Store) claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return store.Batch{}, ctx.Err()
	}
	released := false
	release := func() {
		if !released {
			released = true
			<-s.turn
		}
	}
	defer release()

	pick, expired, err := s.look(ctx, limit)
	if err != nil || (len(pick.IDs()) == 0 && !expired) {
		return store.Batch{}, err
	}
	id, idsJSON, err := s.recordLease(ctx, owner, lease, pick)
	release()
	if err != nil || idsJSON == nil {
		return store.Batch{}, err
	}

	// The rows are leased to owner now; reading them holds no lock.
	recs, err := sqlstore.ReadRecords(ctx, s.db, times, len(pick.IDs()), rowsSQL, string(idsJSON))
	if err != nil {
		return store.Batch{}, err
	}
	if len(recs) == 0 { // published meanwhile by a relay whose lease ran out
		err := s.write(ctx, func(conn *sql.Conn) error {
			_, err := conn.ExecContext(ctx, dropLeaseSQL, id)
			return err
		})
		return store.Batch{}, err
	}
	return store.Batch{Lease: id, Records: recs}, nil
}

// look reads the held keys first and the free rows after, against one
// clock reading (see store/internal/claims), without any lock, and picks up
// to limit rows. It also reports whether any lease has expired.
func (s *Store) look(ctx context.Context, limit int) (*claims.Picker, bool, error) {
	now := nowOf(s.cfg.Clock).UnixMicro()
	held, expired, err := heldKeys(ctx, s.db, now)
	if err != nil {
		return nil, false, err
	}
	pick := claims.NewPicker(held, limit)
	errFull := errors.New("batch full") // stops the scan
	err = sqlstore.QueryEach(ctx, s.db, scanSQL, []any{now, claims.Window(limit)}, func(rows *sql.Rows) error {
		var id int64
		var key string
		var retried bool
		if err := rows.Scan(&id, &key, &retried); err != nil {
			return err
		}
		if pick.Offer(id, key, retried) {
			return errFull
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFull) {
		return nil, false, fmt.Errorf("scan pending: %w", err)
	}
	return pick, expired, nil
}

// recordLease takes the write lock, drops expired leases, drops the picks
// whose key another process's claim or a retry has taken since, and records
// the lease of the rest. It returns the lease's id and its rows' ids as a
// JSON array, nil when no row is left.
func (s *Store) recordLease(ctx context.Context, owner string, lease time.Duration, pick *claims.Picker) (int64, []byte, error) {
	var (
		id      int64
		idsJSON []byte
	)
	err := immediate(ctx, s.db, func(conn *sql.Conn) error {
		now := nowOf(s.cfg.Clock)
		nowUS := now.UnixMicro()
		if _, err := conn.ExecContext(ctx, expiredSQL, nowUS); err != nil {
			return fmt.Errorf("drop expired leases: %w", err)
		}
		if len(pick.IDs()) == 0 {
			return nil
		}
		held, _, err := heldKeys(ctx, conn, nowUS)
		if err != nil {
			return err
		}
		pick.Drop(held)
		if len(pick.IDs()) == 0 {
			return nil
		}
		if idsJSON, err = json.Marshal(pick.IDs()); err != nil {
			return err
		}
		keysJSON, err := json.Marshal(pick.Keys())
		if err != nil {
			return err
		}
		res, err := conn.ExecContext(ctx, leaseSQL, owner, now.Add(lease).UnixMicro(), string(idsJSON), string(keysJSON), nowUS)
		if err != nil {
			return fmt.Errorf("record lease: %w", err)
		}
		if id, err = res.LastInsertId(); err != nil {
			return fmt.Errorf("record lease: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	return id, idsJSON, nil
}

// heldKeys reads the keys held at now (unix microseconds) and whether any
// lease has expired.
func heldKeys(ctx context.Context, q sqlstore.Conn, now int64) (map[string]struct{}, bool, error) {
	held := make(map[string]struct{})
	expired := false
	err := sqlstore.QueryEach(ctx, q, heldSQL, []any{now}, func(rows *sql.Rows) error {
		var k sql.NullString
		if err := rows.Scan(&k); err != nil {
			return err
		}
		if !k.Valid {
			expired = true
			return nil
		}
		held[k.String] = struct{}{}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("read held keys: %w", err)
	}
	return held, expired, nil
}

// leaseLiveSQL guards Complete: a relay whose lease has ended changes
// nothing, since the rows may belong to another relay by then. Complete
// holds the write lock from this check to its commit, so the answer cannot
// change in between.
const leaseLiveSQL = `SELECT EXISTS (SELECT 1 FROM courier_outbox_leases WHERE id = ? AND owner = ? AND until > ?)`

// idsParam lists the ids of a JSON array parameter.
const idsParam = `(SELECT value FROM json_each(?1))`

const deleteSQL = `DELETE FROM courier_outbox WHERE id IN ` + idsParam

const archiveSQL = `INSERT INTO courier_outbox_published
    (id, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, attempts, published_at)
SELECT id, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, attempts, ?2
FROM courier_outbox WHERE id IN ` + idsParam

// failuresParam unpacks a JSON array of failures (see failureJSON).
const failuresParam = `(SELECT json_extract(value, '$.id') AS id,
        json_extract(value, '$.error') AS error,
        json_extract(value, '$.retry_at') AS retry_at,
        json_extract(value, '$.counted') AS counted,
        json_extract(value, '$.entry') AS entry
 FROM json_each(?1))`

// historyAppend appends f.entry to o.history, keeping the latest
// columns.HistoryCap. json() restores the entry's JSON type, which a
// subquery column loses.
var historyAppend = `json_insert(
    CASE WHEN json_array_length(coalesce(o.history, '[]')) >= ` + strconv.Itoa(columns.HistoryCap) + ` THEN json_remove(o.history, '$[0]')
         ELSE coalesce(o.history, '[]') END,
    '$[#]', json(f.entry))`

var retrySQL = `UPDATE courier_outbox AS o
SET attempts = o.attempts + f.counted,
    last_error = f.error,
    retry_at = f.retry_at,
    history = ` + historyAppend + `
FROM ` + failuresParam + ` AS f
WHERE o.id = f.id`

var deadSQL = `INSERT INTO courier_outbox_dead_letters
    (id, message_id, topic, ordering_key, type, version, content_type, payload, headers,
     occurred_at, created_at, attempts, last_error, history, dead_at)
SELECT o.id, o.message_id, o.topic, o.ordering_key, o.type, o.version, o.content_type, o.payload, o.headers,
       o.occurred_at, o.created_at, o.attempts + f.counted, f.error, ` + historyAppend + `, ?2
FROM courier_outbox AS o JOIN ` + failuresParam + ` AS f ON o.id = f.id`

const deleteFailedSQL = `DELETE FROM courier_outbox WHERE id IN (SELECT json_extract(value, '$.id') FROM json_each(?1))`

const endLeaseSQL = `DELETE FROM courier_outbox_leases WHERE id = ? AND owner = ?`

// failureJSON is one failure as the statements above read it.
type failureJSON struct {
	ID      int64        `json:"id"`
	Error   string       `json:"error"`
	RetryAt int64        `json:"retry_at"`
	Counted int          `json:"counted"`
	Entry   historyEntry `json:"entry"`
}

// historyEntry is one element of a row's history.
type historyEntry struct {
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
	Counted bool      `json:"counted"`
}

func failuresJSON(fs []store.Failure, now time.Time) (string, error) {
	out := make([]failureJSON, len(fs))
	for i, f := range fs {
		counted := 0
		if f.Counted {
			counted = 1
		}
		out[i] = failureJSON{ID: f.Seq, Error: f.Error, RetryAt: now.Add(f.Delay).UnixMicro(), Counted: counted,
			Entry: historyEntry{At: now.UTC(), Error: f.Error, Counted: f.Counted}}
	}
	b, err := json.Marshal(out)
	return string(b), err
}

// Complete implements store.RelayStore. The whole outcome is written in one
// transaction; ending the lease releases the rows it does not mention.
func (s *Store) Complete(ctx context.Context, owner string, lease int64, o store.Outcome) error {
	err := s.write(ctx, func(conn *sql.Conn) error {
		now := nowOf(s.cfg.Clock)
		var live bool
		if err := conn.QueryRowContext(ctx, leaseLiveSQL, lease, owner, now.UnixMicro()).Scan(&live); err != nil {
			return fmt.Errorf("check lease: %w", err)
		}
		if live {
			if err := s.complete(ctx, conn, now, o); err != nil {
				return err
			}
		}
		if _, err := conn.ExecContext(ctx, endLeaseSQL, lease, owner); err != nil {
			return fmt.Errorf("end lease: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: complete batch: %w", err)
	}
	return nil
}

func (s *Store) complete(ctx context.Context, conn *sql.Conn, now time.Time, o store.Outcome) error {
	nowUS := now.UnixMicro()
	if len(o.Published) > 0 {
		ids, err := json.Marshal(o.Published)
		if err != nil {
			return err
		}
		if s.cfg.KeepPublished {
			if _, err := conn.ExecContext(ctx, archiveSQL, string(ids), nowUS); err != nil {
				return fmt.Errorf("archive published: %w", err)
			}
		}
		if _, err := conn.ExecContext(ctx, deleteSQL, string(ids)); err != nil {
			return fmt.Errorf("delete published: %w", err)
		}
	}
	if len(o.Retry) > 0 {
		fs, err := failuresJSON(o.Retry, now)
		if err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, retrySQL, fs); err != nil {
			return fmt.Errorf("record retries: %w", err)
		}
	}
	if len(o.Dead) > 0 {
		fs, err := failuresJSON(o.Dead, now)
		if err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, deadSQL, fs, nowUS); err != nil {
			return fmt.Errorf("record dead letters: %w", err)
		}
		if _, err := conn.ExecContext(ctx, deleteFailedSQL, fs); err != nil {
			return fmt.Errorf("delete dead letters: %w", err)
		}
	}
	return nil
}

const statsSQL = `SELECT
    (SELECT count(*) FROM courier_outbox),
    (SELECT coalesce(sum(json_array_length(ids)), 0) FROM courier_outbox_leases WHERE until > ?1),
    (SELECT count(*) FROM courier_outbox WHERE retry_at > ?1),
    (SELECT created_at FROM courier_outbox ORDER BY id LIMIT 1),
    (SELECT count(*) FROM courier_outbox_dead_letters)`

// Stats implements store.RelayStore. Now is this process's clock, or the
// store's.
func (s *Store) Stats(ctx context.Context) (store.Stats, error) {
	return stats(ctx, s.db, s.cfg.Clock)
}

// Stats reports the state of the outbox reachable through q, for tools that
// have a connection but no Store. Now is this process's clock.
func Stats(ctx context.Context, q Querier) (store.Stats, error) { return stats(ctx, q, nil) }

func stats(ctx context.Context, q Querier, clock store.Clock) (store.Stats, error) {
	var st store.Stats
	now := nowOf(clock)
	var oldest sql.NullInt64
	if err := q.QueryRowContext(ctx, statsSQL, now.UnixMicro()).Scan(&st.Pending, &st.Leased, &st.InBackoff, &oldest, &st.DeadLetters); err != nil {
		return st, fmt.Errorf("sqlite: stats: %w", err)
	}
	if oldest.Valid {
		st.OldestPending = time.UnixMicro(oldest.Int64).UTC()
	}
	st.Now = now.UTC().Truncate(time.Microsecond)
	return st, nil
}
