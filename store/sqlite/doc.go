// Package sqlite is Courier's SQLite dialect, on the pure-Go driver
// modernc.org/sqlite (no cgo): the schema and its migrations, and the
// stores Courier keeps in the database. It is the embedded default: one
// file, nothing to install. [Open] opens a file the way Courier needs it
// (WAL, a busy timeout, immediate transactions); [Driver] is the way to
// reach the stores: [NewDriver] on the pool hands out the outbox inserter
// for *sql.Tx, the relay's store, the consuming side's inbox and store of
// parked deliveries, the operators' views, Idempotency-Key records and
// sagas, all on one clock. [DatabaseSQL] is the inserter alone, for code
// that writes messages and has no database handle at hand.
//
//	db, err := sqlite.Open("app.db")
//	if err != nil {
//		return err
//	}
//	d := sqlite.NewDriver(db)
//	if _, err := d.Migrate(ctx); err != nil {
//		return err
//	}
//	n := store.NewLocalNotifier()
//	w := outbox.New(d.Inserter(), outbox.Config{Notify: n.Signal})
//	st, err := d.RelayStore(ctx, store.RelayConfig{})
//	if err != nil {
//		return err
//	}
//	r, err := relay.New(st, publisher, relay.Config{Notifier: n})
//	if err != nil {
//		return err
//	}
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
// statements, not for its scan. Claims of one relay store take turns in the
// process; claims from other processes that picked the same rows lose them
// at step 2 and come back empty.
//
// Dead letters that hold their key (store.Failure.Hold; see store, Held
// keys) hold it as live leases do, read in the same statement through the
// partial index courier_outbox_dead_letters_holds (empty, and so free, when
// none does). The rows of those keys the scan meets are moved to
// courier_outbox_held, behind the oldest dead letter that holds their key,
// at step 2, under the write lock; replaying or discarding such a dead
// letter is an immediate transaction too, so the two take turns.
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
// SQLite has one writer, so a second relay adds no claiming throughput: run one
// relay per database file, and more only as standbys. Relays of one process
// should share one relay store (one call of [Driver.RelayStore]), which queues
// their transactions in the process. Relays in several processes (or with
// separate relay stores) queue for the write lock through SQLite's busy
// handler, which is not fair: a connection that has waited a while polls every
// 100 ms while a newcomer polls every millisecond, so under sustained
// contention one of them can wait for seconds, up to its busy timeout (then its
// claim fails and the relay retries). Applications writing to the file queue
// the same way, which is why [Open] sets a generous busy timeout.
//
// # Inbox and idempotency keys
//
// The semantics are again PostgreSQL's; SQLite's single writer provides what
// row locks provide there. The transactions of a Driver's Inbox and Idempotency
// (their InTx) begin with BEGIN IMMEDIATE when the pool comes from [Open], so
// they hold the write lock from their first statement to their commit, the
// handler's work included: a second delivery of a message waits for the first
// one's transaction and then finds its marker, or applies the message when the
// first rolled back. Every writer of the file waits meanwhile, so keep handlers
// short; a transaction is rolled back whenever it is not committed, also when
// its function panics. A claim of an idempotency key is an immediate
// transaction of its own (an upsert and a read of the record), so concurrent
// claims of one key, from any process, make exactly one owner. Idempotent
// requests therefore run one at a time per file, unrelated keys included (see
// Idempotent requests). Replaying a dead letter moves it back into the outbox
// under its old id, which AUTOINCREMENT never gives to another message (one
// that holds its key, under a new one: see store, Held keys).
//
// # Idempotent requests
//
// Idempotent requests run one at a time per database file, unrelated keys
// included. SQLite has one writer, and the request's transaction (InTx) begins
// with BEGIN IMMEDIATE, so it holds the write lock from before the handler runs
// until it commits. The next idempotent request, whatever its key, waits for
// it, and so does every other writer of the file (outbox writes, relay claims,
// inbox transactions). In the process, claims and the transactions of InTx take
// turns in arrival order (see [Driver], Inbox): a retry of a key in flight
// waits for the first request and then usually gets its stored response rather
// than a 409. Other processes wait through their busy timeout (10 s with
// [Open]); a request that holds the lock longer makes their claims fail, and
// the middleware answers those with 500. Keep handlers short: no calls to other
// services inside them (write an outbox message and let a consumer make the
// call). Use PostgreSQL or MySQL when requests with different keys must run in
// parallel.
//
// That is not lifted with deferred transactions, which would let handlers
// read in parallel: a handler's first write would still wait for the lock,
// and in WAL mode a transaction that has read before another one committed
// cannot take the write lock at all. It fails with SQLITE_BUSY at once,
// without waiting, a failure every idempotent request would then risk.
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
// ([Driver.WithClock]) takes its time from that clock
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
