// Package postgres is Courier's PostgreSQL dialect: the schema and its
// migrations, and the stores Courier keeps in the database. A Driver is the
// way to reach them: [NewDriver] on a pgxpool.Pool hands out the stores for
// pgx.Tx transactions, [NewSQLDriver] those for *sql.Tx (pgx's stdlib
// driver, or the transaction GORM, sqlx, bun or ent hand you), each the
// outbox inserter, the relay's store, the consuming side's inbox and store
// of parked deliveries, the operators' views, Idempotency-Key records and
// sagas, all on one clock.
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	if err != nil {
//		return err
//	}
//	d := postgres.NewDriver(pool)
//	if _, err := d.Migrate(ctx); err != nil {
//		return err
//	}
//	w := outbox.New(d.Inserter(), outbox.Config{})
//	st, err := d.RelayStore(ctx, store.RelayConfig{})
//	if err != nil {
//		return err
//	}
//	n, err := postgres.NewNotifier(directURL, logger) // LISTEN needs a session
//	if err != nil {
//		return err
//	}
//	r, err := relay.New(st, publisher, relay.Config{Notifier: n})
//	if err != nil {
//		return err
//	}
//
// A few values need no pool: the inserters [Pgx] and [DatabaseSQL] (what a
// Driver's Inserter returns), [QueueMessages], which queues messages into
// the caller's own pgx.Batch, [ExportSQL], the migrations as scripts for
// external tools, and the LISTEN/NOTIFY wake-ups ([NewNotifier]), which
// take a connection string of their own. Table-less messages, written only
// to the log for the CDC relay (relay/cdc), come from [LogOnly] and
// [QueueLogMessages]: logical decoding messages whose prefix,
// courier_outbox: and the OID of the courier_outbox table the search_path
// finds, keeps several schemas' outboxes apart. [CDC] is what the CDC relay
// asks of the database: its publication and slots, the log's decoding, the
// table's rows while it makes its slot, and the writes of what the broker
// answered.
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
//     (now(), or the Driver's clock), the held keys (those of live leases
//     and of rows waiting for a retry) and the oldest free rows (neither
//     leased nor waiting for a retry; a primary-key range scan, leased ids
//     filtered through a hashed subplan);
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
// Dead letters that hold their key (store.Failure.Hold; see store, Held
// keys) hold it in step 2 as live leases do, read through the partial index
// courier_outbox_dead_letters_holds. Between steps 1 and 2 the claim moves
// the rows of those keys among the free rows of its window (from the floor,
// at most the window's length) to courier_outbox_held, behind the oldest
// dead letter that holds their key, so a held key's backlog leaves the
// window and no longer keeps the floor below it. With no such dead letter
// the move is skipped after one probe of that empty index, and step 2
// scans it, empty too: a few microseconds (the claim measured 0.19 ms
// before and after on 20,000 pending rows). Replaying or discarding a dead
// letter that holds its key takes the claim's advisory lock for its
// transaction, so it and the claims take turns; it puts the dead letter's
// messages back with ids from the sequence, above the floor.
//
// # Dead rows and the scan's floor
//
// Published rows are deleted, and the primary key keeps their entries until
// vacuum removes them. While any transaction older than the deletes is open
// anywhere on the server (which stops vacuum: a long report, a forgotten
// session, a replica with hot_standby_feedback), a scan from the start of the
// index visits every one of them: half a second per claim at 5 million. So a
// claim scans from a floor instead, and courier_claim returns the smallest
// pending id at or above it. The floor rises to what claims returned only
// once the transactions that were open before those claims have ended
// (claims read their snapshot's xmin and their own xid, see floor.go), so it
// never passes a row that is pending, leased, held or waiting for a retry,
// nor one whose transaction is still open: such a row is claimed when it
// commits, before the rows of its key written after. A transaction that
// writes and stays open for more than 30 seconds (a batch job, a session left
// idle in a transaction) stops holding the floor, so that claims do not scan
// every row published meanwhile; rows it commits after that, and dead letters
// replayed under their old id, appear below the floor. A full pass (floor 0)
// finds them: every second while full passes are cheap, and less often as
// they grow dear (a pass of 0.5 s every 250 s), but at least every 5 minutes;
// such rows are published that much later, never lost. A transaction that
// only reads has no xid and holds nothing. A full pass
// holds the claim lock while it runs: at 5 million dead rows it took about 4 s,
// during which no relay claims. A key's row stuck below newer published rows (a
// poison message waiting for its retries) keeps the floor below those rows'
// entries until it is published or parked. When nothing is pending the floor
// moves to the next id the outbox's sequence will give, which needs SELECT (or
// USAGE) on that sequence (courier_outbox_id_seq); a relay's role without it
// keeps the floor where it was while the outbox is empty.
//
// The floor is learned from one server's ids and transactions. A claim
// that lands on another server (a standby promoted in a failover, through
// a multi-host URL or a proxy that follows the primary; or the same server
// restarted: its start time tells them apart) makes a full pass, and the
// floor starts afresh there. A promoted standby's sequence resumes from
// what replication brought it, which with asynchronous replication lies
// below ids the old primary gave to transactions lost with it, so rows
// written on it can sit below the old floor.
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
//
// # Writing from other languages
//
// Migration 0017 adds two SQL functions that write what outbox.Writer
// writes, in the caller's transaction, for services in any language (the
// clients in clients/ call them):
//
//	SELECT courier_write(topic, key, type, payload, headers, content_type, version, message_id, occurred_at);
//	SELECT courier_schedule(due_at, topic, key, type, payload, headers, …);
//
// Each applies Message.Validate's checks in its order and raises its text
// (SQLSTATE 22023; COLUMN the field, DETAIL the problem, HINT the fix),
// inserts the row Go's inserter would, and returns the message's id: a new
// UUIDv7 when message_id is NULL. Headers are a JSON object of strings; the
// limits are Go's defaults unless courier.max_payload_bytes or
// courier.max_header_bytes is set. The inserts fire the same wake-up
// triggers as Go's.
package postgres
