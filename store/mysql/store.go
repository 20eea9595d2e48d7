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
// A claim first looks without writing anything:
//
//  1. it reads the server's clock once; every later statement of the look
//     uses that reading, so a retry that comes due meanwhile is pending for
//     all of them;
//  2. it reads the held keys, those of live leases and of rows waiting for
//     a retry (an index range on retry_at), and deletes the expired leases
//     that no Complete holds locked (FOR UPDATE SKIP LOCKED);
//  3. it scans the free rows (not waiting for a retry) in id order, in
//     chunks (a primary-key range scan), and picks those whose key is not
//     held, skipping held keys' rows as it meets them, so that a held key's
//     backlog hides no other key's row (up to max(25×limit, 25,000) rows
//     looked at, stopping once limit rows are picked).
//
// A claim that picked nothing ends there: an idle relay's polls write
// nothing. Otherwise claims take turns. A claim takes the turn with one
// autocommit UPDATE of the single row of courier_outbox_claimer (holder,
// until), which succeeds only once the previous turn has ended; reads the
// held keys again and, if another claim has taken one of its picks' keys
// since its look, looks again; records one lease row holding its picks' ids
// and keys with an INSERT … SELECT that locks the turn's row and inserts only
// while the turn is still its own; ends the turn; and reads the rows'
// contents. A key's claimed rows are so always the oldest of its pending
// rows, and no key is in two leases.
//
// The held keys are read before the free rows: a Complete that commits in
// between and releases a key's rows leaves the key held for this claim,
// which so never claims a later row ahead of the released one (each
// statement sees a fresh snapshot under READ COMMITTED). Keys are compared
// in Go, never in SQL, so no collation can merge two keys.
//
// No transaction of a claim spans more than one statement, so a relay
// frozen at any point of its claim (SIGSTOP, a paused VM, a host gone
// silent) holds up the other relays' claims only until its turn runs out,
// 3 seconds after it began, and never holds a lock they wait for. A claim
// that outlives its turn records nothing and is tried again.
//
// SKIP LOCKED alone is not enough for per-key order, for the reason
// PostgreSQL's documentation gives: a claimer that skips rows another
// claimer has locked but not committed cannot tell that they belong to a
// key it is about to claim later rows of. Complete locks its lease row
// (SELECT … FOR UPDATE) before checking it, so the removal of an expired
// lease skips a lease whose outcome is being recorded. Migrate, which must
// also work before the tables exist, uses GET_LOCK. Every transaction is
// READ COMMITTED, whatever MySQL's default isolation; it needs
// binlog_format ROW or MIXED (the defaults) when binary logging is on.
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
// server's clock. A store given a [store.Clock] ([StoreConfig].Clock,
// [Driver.WithClock]) takes its time from that clock instead.
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
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/claims"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqlstore"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// StoreConfig tunes a Store. The zero value is ready to use.
type StoreConfig struct {
	// KeepPublished copies each published message into
	// courier_outbox_published (with published_at) instead of only deleting
	// it. Trim the table with a retention job.
	KeepPublished bool
	// Clock is the time lease ends, retry times and claim turns are
	// compared with and computed from; nil is the server's
	// UTC_TIMESTAMP(6). See [store.Clock].
	Clock store.Clock
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

// A claim's turn: see migration 0005. takeTurnSQL succeeds (one row
// affected, whatever the DSN's clientFoundRows, since holder always changes)
// only when the previous turn has ended.
const (
	takeTurnSQL = `UPDATE courier_outbox_claimer SET holder = ?, until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE id = 1 AND until <= UTC_TIMESTAMP(6)`
	endTurnSQL = `UPDATE courier_outbox_claimer SET until = '1970-01-01 00:00:00' WHERE id = 1 AND holder = ?`
	nowSQL     = `SELECT UTC_TIMESTAMP(6)`
)

// claimTurn bounds a claim: a claim that has not recorded its lease by then
// records nothing (the next turn may have begun), and a relay frozen during
// its turn holds up the other claims at most this long.
const claimTurn = 3 * time.Second

// The held keys: those of live leases and of rows waiting for a retry.
// Expired leases are listed too, so the claim can remove them. Keys are
// decoded and compared in Go, never in SQL, so no collation can merge two
// keys.
const (
	leasesSQL    = `SELECT id, until > ?, ordering_keys FROM courier_outbox_leases`
	retryKeysSQL = `SELECT ordering_key FROM courier_outbox WHERE retry_at > ?`
)

// expiredSQL locks the expired leases no one else is removing. Completes
// lock their own lease, so a frozen relay's Complete is skipped, not waited
// for.
const expiredSQL = `SELECT id FROM courier_outbox_leases WHERE until <= ? FOR UPDATE SKIP LOCKED`

// scanSQL reads the free rows (not waiting for a retry) after an id, oldest
// first. Leased rows are among them; their keys are held, so the claim
// skips them with the rest of their keys' rows. FORCE INDEX keeps the scan
// in id order, stopping at the limit: once rows are being deleted MariaDB's
// optimizer otherwise reads every pending row through courier_outbox_retry
// and sorts them, 10–30 ms per claim at 50,000 pending rows instead of 2.
const scanSQL = `SELECT id, ordering_key, retry_at IS NOT NULL FROM courier_outbox FORCE INDEX (PRIMARY)
WHERE id > ? AND (retry_at IS NULL OR retry_at <= ?)
ORDER BY id
LIMIT ?`

// leaseSQL records a claim's lease while its turn is still its own: the
// locking read of the turn's row makes a claimer that takes the next turn
// wait for this statement, and then see the lease.
const leaseSQL = `INSERT INTO courier_outbox_leases (owner, until, ids, ordering_keys, created_at)
SELECT ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, ?, UTC_TIMESTAMP(6)
FROM courier_outbox_claimer WHERE id = 1 AND holder = ? AND until > UTC_TIMESTAMP(6)
FOR UPDATE`

const rowsSQL = `SELECT ` + sqlstore.RecordColumns + `
FROM courier_outbox WHERE id IN (%s) ORDER BY id`

const dropLeaseSQL = `DELETE FROM courier_outbox_leases WHERE id = ?`

// Claim implements store.RelayStore.
func (s *Store) Claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	return claims.Run("mysql", limit, func() (store.Batch, error) { return s.claim(ctx, owner, limit, lease) })
}

func (s *Store) claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	// A first look without the turn: a claim that finds nothing writes
	// nothing (taking and ending a turn are two commits).
	pick, err := s.look(ctx, limit)
	if err != nil || len(pick.IDs()) == 0 {
		return store.Batch{}, err
	}
	token, err := s.takeTurn(ctx)
	if err != nil {
		return store.Batch{}, err
	}
	t := &turn{db: s.db, token: token}
	defer t.end(ctx)
	id, ids, err := s.recordLease(ctx, t, owner, limit, lease, pick)
	if err != nil || len(ids) == 0 {
		return store.Batch{}, err
	}
	t.end(ctx)

	// The rows are leased to owner now; reading them holds no lock.
	recs, err := s.readRows(ctx, ids)
	if err != nil {
		return store.Batch{}, err
	}
	if len(recs) == 0 { // all published meanwhile by a relay whose lease ran out
		_, err := s.db.ExecContext(ctx, dropLeaseSQL, id)
		return store.Batch{}, err
	}
	return store.Batch{Lease: id, Records: recs}, nil
}

// look reads the clock and the held keys, drops the expired leases and
// picks up to limit free rows, without the turn.
func (s *Store) look(ctx context.Context, limit int) (*claims.Picker, error) {
	now, err := s.now(ctx)
	if err != nil {
		return nil, err
	}
	held, expired, err := s.heldKeys(ctx, now)
	if err != nil {
		return nil, err
	}
	if expired {
		if err := s.dropExpired(ctx, now); err != nil {
			return nil, fmt.Errorf("drop expired leases: %w", err)
		}
	}
	return s.scan(ctx, held, limit, now)
}

// turn is a claim's turn, named by its token.
type turn struct {
	db    *sql.DB
	token string
	ended bool
}

// end ends the turn, once; when that fails, the turn runs out by itself.
func (t *turn) end(ctx context.Context) {
	if t.ended {
		return
	}
	t.ended = true
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTurn)
	defer cancel()
	_, _ = t.db.ExecContext(ectx, endTurnSQL, t.token)
}

// recordLease records, during turn t, the lease of pick's rows, and
// returns its id and the leased rows' ids (none when no row is left to
// claim).
//
// During the turn no other claim runs. Keys another claim took since the
// first look are held now; when the picks include one, it looks again.
// Otherwise the picks stand: a key not held now was not held in between
// either, or its holder has completed, publishing or releasing the rows
// this claim picked, which keeps its rows in order.
func (s *Store) recordLease(ctx context.Context, t *turn, owner string, limit int, lease time.Duration, pick *claims.Picker) (int64, []int64, error) {
	now, err := s.now(ctx)
	if err != nil {
		return 0, nil, err
	}
	held, _, err := s.heldKeys(ctx, now)
	if err != nil {
		return 0, nil, err
	}
	if pick.Holds(held) {
		if pick, err = s.scan(ctx, held, limit, now); err != nil || len(pick.IDs()) == 0 {
			return 0, nil, err
		}
	}
	ids := pick.IDs()
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		return 0, nil, err
	}
	keysJSON, err := json.Marshal(pick.Keys())
	if err != nil {
		return 0, nil, err
	}
	res, err := s.exec(ctx, s.db, leaseSQL, owner, lease.Microseconds(), string(idsJSON), string(keysJSON), t.token)
	if err != nil {
		return 0, nil, fmt.Errorf("record lease: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, nil, fmt.Errorf("record lease: %w", err)
	} else if n == 0 {
		return 0, nil, fmt.Errorf("the claim took longer than its turn (%s) and recorded nothing; it is tried again", claimTurn)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, nil, fmt.Errorf("record lease: %w", err)
	}
	return id, ids, nil
}

// now reads the server's clock (or the store's), formatted for the claim's
// statements: one reading for all of them, so a retry that comes due
// during the claim is not due for any of them.
func (s *Store) now(ctx context.Context) (string, error) {
	if s.cfg.Clock != nil {
		return formatTime(s.cfg.Clock()), nil
	}
	var now time.Time
	if err := s.db.QueryRowContext(ctx, nowSQL).Scan(utcTime(&now)); err != nil {
		return "", fmt.Errorf("read the clock: %w", err)
	}
	return now.Format(dateTimeLayout), nil
}

// heldKeys reads the keys held at now and whether any lease has expired.
func (s *Store) heldKeys(ctx context.Context, now string) (map[string]struct{}, bool, error) {
	held := make(map[string]struct{})
	expired := false
	err := sqlstore.QueryEach(ctx, s.db, leasesSQL, []any{now}, func(rows *sql.Rows) error {
		var (
			id   int64
			live bool
			raw  []byte
		)
		if err := rows.Scan(&id, &live, &raw); err != nil {
			return err
		}
		if !live {
			expired = true
			return nil
		}
		var keys []string
		if err := json.Unmarshal(raw, &keys); err != nil {
			return fmt.Errorf("decode the keys of lease %d: %w", id, err)
		}
		for _, k := range keys {
			held[k] = struct{}{}
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("read leased keys: %w", err)
	}
	err = sqlstore.QueryEach(ctx, s.db, retryKeysSQL, []any{now}, func(rows *sql.Rows) error {
		var k string
		if err := rows.Scan(&k); err != nil {
			return err
		}
		held[k] = struct{}{}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("read keys waiting for a retry: %w", err)
	}
	return held, expired, nil
}

// scan picks, in id order, up to limit free rows whose key is not held,
// reading chunks of the primary key.
func (s *Store) scan(ctx context.Context, held map[string]struct{}, limit int, now string) (*claims.Picker, error) {
	pick := claims.NewPicker(held, limit)
	window := claims.Window(limit)
	after, chunk := int64(0), max(2*limit, 500)
	for pick.Examined < window {
		n := 0
		full := false
		err := sqlstore.QueryEach(ctx, s.db, scanSQL, []any{after, now, chunk}, func(rows *sql.Rows) error {
			var key string
			var retried bool
			if err := rows.Scan(&after, &key, &retried); err != nil {
				return err
			}
			n++
			if !full {
				full = pick.Offer(after, key, retried)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("scan pending: %w", err)
		}
		if full || n < chunk {
			break
		}
		chunk = min(2*chunk, 16384)
	}
	return pick, nil
}

// dateTimeLayout formats a time as a DATETIME(6) literal.
const dateTimeLayout = "2006-01-02 15:04:05.000000"

// takeTurn waits until the previous claim's turn has ended and takes the
// next one, returning the token that names it.
func (s *Store) takeTurn(ctx context.Context) (string, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	const firstWait = 500 * time.Microsecond
	wait := firstWait
	for {
		res, err := s.exec(ctx, s.db, takeTurnSQL, token, claimTurn.Microseconds())
		if err != nil {
			return "", fmt.Errorf("take a turn: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return "", fmt.Errorf("take a turn: %w", err)
		}
		if n == 1 {
			return token, nil
		}
		var exists int
		if wait == firstWait { // a turn never taken: is the row there at all?
			err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM courier_outbox_claimer WHERE id = 1").Scan(&exists)
			if err != nil {
				return "", fmt.Errorf("take a turn: %w", err)
			}
			if exists == 0 {
				return "", errors.New("the row of courier_outbox_claimer is missing: run Migrate (or `courier migrate`) again to restore it")
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		}
		wait = min(2*wait, 8*time.Millisecond)
	}
}

// dropExpired deletes the expired leases that nobody holds locked.
func (s *Store) dropExpired(ctx context.Context, now string) error {
	return sqltx.InTx(ctx, s.db, readCommitted(), "", func(tx *sql.Tx) error {
		ids, err := sqlstore.Column[int64](ctx, tx, expiredSQL, now)
		if err != nil || len(ids) == 0 {
			return err
		}
		in, args := inList(ids)
		_, err = tx.ExecContext(ctx, "DELETE FROM courier_outbox_leases WHERE id IN ("+in+")", args...)
		return err
	})
}

// readRows reads the rows with the given ids, in id order.
func (s *Store) readRows(ctx context.Context, ids []int64) ([]store.Record, error) {
	in, args := inList(ids)
	return sqlstore.ReadRecords(ctx, s.db, times, len(ids), fmt.Sprintf(rowsSQL, in), args...)
}

// inList returns "?, ?, …" for ids and the ids as arguments.
func inList(ids []int64) (string, []any) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", "), args
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

// historyAppend appends a failure to o.history, keeping the latest
// columns.HistoryCap.
var historyAppend = `JSON_ARRAY_APPEND(
    IF(JSON_LENGTH(COALESCE(o.history, JSON_ARRAY())) >= ` + strconv.Itoa(columns.HistoryCap) + `, JSON_REMOVE(o.history, '$[0]'), COALESCE(o.history, JSON_ARRAY())),
    '$',
    JSON_OBJECT('at', DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%dT%H:%i:%s.%fZ'),
                'error', f.err,
                'counted', JSON_EXTRACT(IF(f.counted, 'true', 'false'), '$')))`

var retrySQL = `UPDATE courier_outbox AS o JOIN ` + failuresTable + ` ON o.id = f.id
SET o.attempts = o.attempts + f.counted,
    o.last_error = f.err,
    o.retry_at = UTC_TIMESTAMP(6) + INTERVAL f.delay_us MICROSECOND,
    o.history = ` + historyAppend

var deadSQL = `INSERT INTO courier_outbox_dead_letters
    (id, message_id, topic, ordering_key, type, version, content_type, payload, headers,
     occurred_at, created_at, attempts, last_error, history, dead_at)
SELECT o.id, o.message_id, o.topic, o.ordering_key, o.type, o.version, o.content_type, o.payload, o.headers,
       o.occurred_at, o.created_at, o.attempts + f.counted, f.err, ` + historyAppend + `, UTC_TIMESTAMP(6)
FROM courier_outbox AS o JOIN ` + failuresTable + ` ON o.id = f.id`

const endLeaseSQL = `DELETE FROM courier_outbox_leases WHERE id = ? AND owner = ?`

// exec runs the statement query on q at the store's clock (see clocked).
func (s *Store) exec(ctx context.Context, q sqlstore.Conn, query string, args ...any) (sql.Result, error) {
	query, args = clocked(s.cfg.Clock, query, args...)
	return q.ExecContext(ctx, query, args...)
}

// failureJSON is one failure as failuresTable reads it.
type failureJSON struct {
	ID      int64  `json:"id"`
	Error   string `json:"error"`
	DelayUS int64  `json:"delay_us"`
	Counted int    `json:"counted"`
}

// recordFailures runs query, retrySQL or deadSQL, for the failures fs, if
// any.
func (s *Store) recordFailures(ctx context.Context, tx *sql.Tx, query string, fs []store.Failure) error {
	if len(fs) == 0 {
		return nil
	}
	arg, err := failuresJSON(fs)
	if err != nil {
		return err
	}
	_, err = s.exec(ctx, tx, query, arg)
	return err
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
	return sqltx.InTx(ctx, s.db, readCommitted(), "", func(tx *sql.Tx) error {
		var id int64
		q, args := clocked(s.cfg.Clock, leaseLiveSQL, lease, owner)
		err := tx.QueryRowContext(ctx, q, args...).Scan(&id)
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
		return nil
	})
}

func (s *Store) record(ctx context.Context, tx *sql.Tx, o store.Outcome) error {
	if len(o.Published) > 0 {
		in, args := inList(o.Published)
		if s.cfg.KeepPublished {
			if _, err := s.exec(ctx, tx, fmt.Sprintf(archiveSQL, in), args...); err != nil {
				return fmt.Errorf("archive published: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(deleteSQL, in), args...); err != nil {
			return fmt.Errorf("delete published: %w", err)
		}
	}
	if err := s.recordFailures(ctx, tx, retrySQL, o.Retry); err != nil {
		return fmt.Errorf("record retries: %w", err)
	}
	if err := s.recordFailures(ctx, tx, deadSQL, o.Dead); err != nil {
		return fmt.Errorf("record dead letters: %w", err)
	}
	if len(o.Dead) > 0 {
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
	return stats(ctx, s.db, s.cfg.Clock)
}

// Stats reports the state of the outbox reachable through q, for tools that
// have a connection but no Store.
func Stats(ctx context.Context, q Querier) (store.Stats, error) { return stats(ctx, q, nil) }

func stats(ctx context.Context, q Querier, clock store.Clock) (store.Stats, error) {
	var st store.Stats
	query, args := clocked(clock, statsSQL)
	if err := q.QueryRowContext(ctx, query, args...).Scan(&st.Pending, &st.Leased, &st.InBackoff, utcTime(&st.OldestPending), utcTime(&st.Now), &st.DeadLetters); err != nil {
		return st, fmt.Errorf("mysql: stats: %w", err)
	}
	return st, nil
}
