// Package cdc is a relay that reads the outbox from PostgreSQL's write-ahead
// log instead of polling the table: change data capture through a logical
// replication slot and the built-in pgoutput plugin (github.com/jackc/pglogrepl).
// Writers do not change: the same outbox.Writer, the same courier_outbox
// table (or, if they choose, no row at all: see Table-less messages). The
// relay publishes each committed row through the same broker.Publisher as
// the polling relay and deletes it (or moves it to
// courier_outbox_published, with KeepPublished) once the broker has
// acknowledged it.
//
// # What it promises
//
//   - Nothing is lost. The slot's confirmed position only moves past a
//     transaction once every message of it was acknowledged by the broker
//     (or became a dead letter) and its rows were deleted; the relay sets
//     that position itself, never "everything received". A relay that dies
//     reads again from there: the broker sees duplicates at most, dropped by
//     message id as usual.
//   - Per-key order is commit order, which the log gives, for rows and
//     table-less messages alike; within a transaction, messages keep their
//     insert order. It holds through kills, restarts, walsender
//     terminations and standby takeovers: what a relay publishes again after
//     one is a duplicate of what it had published, never a message ahead of
//     an earlier one. A key's messages are published one round trip at a
//     time, or as a run to a broker that keeps a key's order when
//     pipelined (broker.OrderKeeper), exactly as the polling relay does
//     (package relay, Ordering, whose cases all hold, with one difference:
//     a replayed dead letter is published after every message of its key
//     committed before the replay, pending ones included, since the log
//     brings it at its replay's commit).
//   - Failures are the polling relay's, decided by the dispatcher both
//     relays share (relay/internal/dispatch): an outage
//     (broker.ErrUnavailable) pauses publishing and builds a backlog in the
//     log, never dead letters, and a broker that says when to come back
//     (Retry-After) is believed; a counted failure holds its key back with
//     a backoff while other keys go on; a refusal for good, or MaxAttempts
//     counted failures, make the message a dead letter in
//     courier_outbox_dead_letters, with its history. Each failure is
//     recorded in the database as it happens (on the message's row, where
//     the polling relay would see it; for a table-less message in
//     courier_outbox_log_failures), so a message's attempts and history
//     survive a relay's restart.
//   - Held keys are the polling relay's too (Config.HoldKeys; package
//     relay, Ordering): a dead letter of a topic of HoldKeys holds its
//     key. The relay keeps the set of held keys, read from the database
//     as each session starts and grown by the dead letters it makes; a
//     message of a held key that the log brings is not published but
//     moved behind its dead letter to courier_outbox_held (a row is moved
//     there from courier_outbox; a table-less message is inserted there
//     with an id from courier_outbox's sequence), and counts as done for
//     the slot's position. Each move checks the key against the database,
//     taking turns with replays and discards (the claims' lock): a
//     message is held behind a dead letter still there, never stranded;
//     once a replay or a discard has released the key, its messages are
//     published again. A replay inserts the dead letter, then the held
//     messages, then the key's pending rows into courier_outbox with new
//     ids, which the log brings in that order. A row of the key committed
//     before the release, which the relay reads after it (it lags, or
//     restarts), is among those put back: the relay drops the copy it
//     read. A relay that lags still holds the key, and its Hold finds the
//     row gone. A session that begins after the release does not know the
//     key was held: it checks, as it checks a held key's, every row the log
//     brings of a transaction committed before the session began, when a
//     topic holds its keys (HoldKeys) or a key was held as it began. That
//     check costs a backlog the session finds about a tenth of its drain
//     (bench/RESULTS.md). A table-less message (postgres.LogOnly) has no row to put
//     back: one committed while its key was held, which the relay reads
//     only after the release committed, is published ahead of the
//     released messages (the relay logs a warning when it does). Write
//     table rows on topics that hold their keys.
//   - One reader at a time: a replication slot has one reader. A second
//     relay on the same slot waits as a hot standby, trying every Standby,
//     and takes over when the first one's connection ends.
//
// # Making the slot
//
// The relay makes its slot itself, the first time it runs (or when the slot
// was dropped or lost), and publishes the rows already in the table before
// the slot exists, so that nothing written before it is stranded:
//
//  1. It creates a temporary slot, courier_making_ and a checksum of the
//     slot's name, with an exported snapshot: the rows that snapshot sees
//     are exactly those the temporary slot's log does not hold.
//  2. It publishes those rows, oldest first, then what the temporary slot
//     brings, as it always does.
//  3. Once every row from the table is recorded (deleted, archived or a
//     dead letter), it stops reading, waits a moment for what it handed
//     over to finish, confirms that position and copies the temporary slot
//     to the relay's (pg_copy_logical_replication_slot), which starts
//     there. It then reads that slot.
//
// A relay that dies before step 3 takes its temporary slot with it, and the
// next one starts again: the rows are still in the table. Relays take turns
// at making a slot (an advisory lock); the others wait as standbys. Relays
// started at the same moment on a new schema are safe too: each makes sure
// of the publication first (Database.Setup), taking turns on another
// advisory lock, and one made meanwhile by anything else is taken as it is
// (the database user must own the tables and have CREATE on the database
// for the one that makes it). Since
// the slot exists only once the rows before it were published, a relay on
// an existing slot never reads the table: its start costs the same whatever
// the backlog, and a relay that keeps crashing still moves on.
//
// Let the relay make its slot: one made by hand (pg_create_logical_replication_slot)
// is read from where it starts, and the rows written before it are left to
// the polling relay.
//
// # The polling relay as the fallback
//
// Rows stay in courier_outbox until they are published, so the polling
// relay (courier relay without --mode cdc) publishes whatever CDC left of
// them (table-less messages excepted, see below): when CDC is switched off,
// when its slot was dropped or lost (wal_status = lost), or next to a CDC
// relay that is down. Both may even run at once: each publishes a key's
// messages in order, and a message published by both is a duplicate the
// broker or the inbox drops.
//
// # Table-less messages
//
// Writers may also skip the table: store/postgres.LogOnly writes each
// message only to the log, as a transactional logical decoding message
// (pg_logical_emit_message, prefix "courier_outbox:" and the table's OID,
// so that the outboxes of several schemas stay apart) in the caller's
// transaction, or queues it with the caller's statements
// (postgres.QueueLogMessages):
//
//	w := outbox.New(postgres.LogOnly(), outbox.Config{}) // instead of postgres.Pgx()
//
// The relay decodes them with the rows, so a key's messages are published
// in commit order whichever writer wrote them, even within one
// transaction; nothing is deleted once they are published (with
// KeepPublished, they are kept in courier_outbox_published like rows). One
// that is kept, or becomes a dead letter, gets an id from courier_outbox's
// sequence, so courier dlq replay puts it in the table, from where it is
// published like a row. The trade-off: no row means no polling fallback.
// Until the relay has published a table-less message and confirmed its
// transaction, the slot is its only copy: a slot that is dropped, or lost
// to max_slot_wal_keep_size, loses the table-less messages it had not
// confirmed (the rows of the same transactions are still in the table).
// LogOnly refuses to write when the database has no logical slot (a
// temporary one, such as the one a relay makes its slot from, does not
// count); keep max_slot_wal_keep_size (if set) above the backlog an outage
// can build. A relay that stops or crashes loses nothing: the slot keeps
// every transaction it did not confirm.
//
// # Cost and operations
//
// The database does less work than for the polling relay: no claim
// queries, no leases; the walsender decodes each transaction once and
// sends it, and the relay deletes published rows in the background, in
// batches (BatchSize rows, or what gathered in 200 ms), off the publishing
// path, and tells PostgreSQL the position it confirmed within 20 ms of
// that. A relay that dies publishes again what it had not confirmed: the
// messages of the last 200 ms or so, and those it had in hand (duplicates,
// dropped by message id). Up to Concurrency Publish calls run at once, on
// disjoint keys. The walsender's cost is per transaction (PostgreSQL wakes
// it at each commit and writes each decoded message to the socket on its
// own), so the saving is largest at moderate rates; bench/RESULTS.md has
// the figures.
//
// A slot retains the log from its confirmed position: a CDC relay that is
// stopped makes PostgreSQL keep every WAL segment written since, until the
// disk fills. Set max_slot_wal_keep_size so that PostgreSQL drops (loses) a
// slot that falls too far behind instead: the polling relay then publishes
// the backlog from the table, and a CDC relay started again makes a new
// slot. Watch the slot: `courier status` lists it with its lag in bytes,
// the WAL it retains and (while messages flow) the relay's lag in seconds
// (store.Status.Slots, from store.Operations), `courier status
// --fail-if-slot-lag 1GB --fail-if-slot-inactive` makes a probe of it, and
// `courier relay --mode cdc --metrics-addr` serves them as the
// courier_cdc_slot_* gauges (metrics.Collector's Config.Slots), with the
// relay's counters (Stats, through metrics.CDC) and a readiness check (Ready)
// that says whether it reads the slot, makes it, or waits as a standby;
// Database.Slot reads one slot's lag from Go.
//
// # Failover
//
// A logical slot lives on one server: before PostgreSQL 17 a promoted
// standby does not have it. Given every server in one URL (host=a,b with
// target_session_attrs=read-write, which the pool and the replication
// connection both follow), the relay reconnects to the promoted server by
// itself, finds no slot there and makes one, publishing the table's rows
// first, as on its first start. So table rows survive a failover as they
// do with the polling relay, with two differences: the relay publishes
// the whole table again (duplicates, dropped by message id), and the log
// may hand it a transaction the synchronous standby has not confirmed
// yet (PostgreSQL decodes what the primary has flushed), so a primary that
// dies then leaves a phantom: a message published for a transaction the
// promoted server does not have. Table-less messages have no row to
// publish again: those the old slot held unpublished are lost.
//
// On PostgreSQL 17 and later the relay makes its slot a failover slot
// (ALTER_REPLICATION_SLOT … (FAILOVER true), at the first session that
// reads it), which standbys that synchronize slots keep a copy of
// (sync_replication_slots = on, hot_standby_feedback = on, a
// primary_slot_name, and dbname in primary_conninfo). After a promotion
// the relay reads on from that copy: nothing is swept, no table-less
// message is lost, and what the copy had not caught up with is published
// again (duplicates). With the standby's slot in the primary's
// synchronized_standby_slots, the primary decodes nothing that standby has
// not received, which also closes the phantoms' window under synchronous
// replication. `courier status` warns of a slot that a promotion would
// leave behind (store.ReplicationSlot.LostOnFailover). docs/operations.md,
// Running on a replicated PostgreSQL, has what test/failover measured.
//
// The relay reads and writes the database through Database, which
// store/postgres implements (postgres.Driver.CDC): the publication and
// slots, the decoding of the log, the table's rows while it makes its slot,
// and the writes of what the broker answered. The database needs wal_level
// = logical (ALTER SYSTEM SET wal_level = logical, then a restart) and a
// user with the REPLICATION attribute.
package cdc
