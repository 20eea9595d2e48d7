// Package mysql is Courier's MySQL and MariaDB dialect (MySQL 8.0, MariaDB
// 10.6 or newer, InnoDB), on github.com/go-sql-driver/mysql: the schema and
// its migrations, and the stores Courier keeps in the database. [Driver] is
// the way to reach them: [NewDriver] on a *sql.DB hands out the outbox
// inserter for *sql.Tx, the relay's store, the consuming side's inbox and
// store of parked deliveries, the operators' views, Idempotency-Key records
// and sagas, all on one clock. [DatabaseSQL] is the inserter alone, for
// code that writes messages and has no database handle at hand.
//
//	db, err := sql.Open("mysql", "courier:secret@tcp(127.0.0.1:3306)/app")
//	if err != nil {
//		return err
//	}
//	d := mysql.NewDriver(db)
//	if _, err := d.Migrate(ctx); err != nil {
//		return err
//	}
//	w := outbox.New(d.Inserter(), outbox.Config{})
//	st, err := d.RelayStore(ctx, store.RelayConfig{})
//	if err != nil {
//		return err
//	}
//	r, err := relay.New(st, publisher, relay.Config{})
//	if err != nil {
//		return err
//	}
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
// No transaction of a claim spans more than one statement but the move of
// held keys' rows (below), which locks the turn's row; it runs on a
// connection whose server waits for a silent client at most a turn
// (wait_timeout, restored after), as do replays and discards of dead
// letters that hold their key. So a relay frozen at any point of its claim
// (SIGSTOP, a paused VM, a host gone silent) holds up the other relays'
// claims only until its turn runs out, 3 seconds after it began: the server
// then closes its connection and rolls its transaction back. A claim that
// outlives its turn records nothing and is tried again.
//
// A relay frozen while it records a batch, between the statements of its
// Complete, holds the rows it has deleted (published) until it resumes or
// its connection ends. Another relay that claims them once its lease has
// run out (a claim that met an expired lease) locks the rows of its own
// Complete with SKIP LOCKED first, records those and leaves the others to
// their holder, keeping its lease on them until it runs out: while the
// holder stays frozen they are published again at most once a lease, and
// if it rolls back they are claimed again. Duplicates, never a loss, and
// no relay waits for a frozen one. Other Completes skip that statement.
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
// Dead letters that hold their key (store.Failure.Hold; see store, Held
// keys) hold it too: the statement that reads the keys of rows waiting for
// a retry also reads theirs, through the index courier_outbox_dead_letters_holds
// on (holds, id), an empty range when none holds its key, so the claim
// makes the round trips it made. The rows of those keys the scan meets are
// moved to courier_outbox_held, behind the oldest dead letter that holds
// their key, during the claim's turn, in a transaction that locks the
// turn's row (so only when there are some). Replaying or discarding a dead
// letter that holds its key takes a turn of its own and does its work in a
// transaction that locks the turn's row: claims wait for it, and it for
// them.
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
// its old id (one that holds its key, under a new one: see Claiming).
//
// # Time
//
// Times are the server's clock, UTC_TIMESTAMP(6), stored in DATETIME(6)
// columns as UTC, so relays on different machines agree on lease ends and
// retry times (as on PostgreSQL), and so do the inbox's processed_at and
// the idempotency keys' lock and expiry times. [store.Stats].Now is the
// server's clock. The stores of a Driver given a [store.Clock]
// ([Driver.WithClock]) take their time from that clock instead.
//
// # Wake-ups
//
// MySQL has nothing like LISTEN/NOTIFY. A relay in the writers' process can
// use a [store.LocalNotifier] (set outbox.Config.Notify to its Signal); a
// relay in another process has no notifier (relay.Config.Notifier nil) and
// relies on the relay's adaptive polling: 1 ms doubling to 8 ms after work,
// then every PollInterval.
package mysql
