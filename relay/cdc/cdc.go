// Package cdc is a relay that reads the outbox from PostgreSQL's write-ahead
// log instead of polling the table: change data capture through a logical
// replication slot and the built-in pgoutput plugin (github.com/jackc/pglogrepl).
// Writers do not change: the same outbox.Writer, the same courier_outbox
// table (or, if they choose, no row at all: see Table-less messages). The relay publishes each committed row through the same
// broker.Publisher as the polling relay and deletes it (or moves it to
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
//     table-less messages alike. Within a transaction, messages keep
//     their insert order. A key's messages are
//     published one round trip at a time, or as a run to a broker that keeps
//     a key's order when pipelined (broker.OrderKeeper), exactly as the
//     polling relay does (package relay, Ordering).
//   - Failures are the polling relay's: an outage (broker.ErrUnavailable)
//     pauses publishing and builds a backlog in the log, never dead letters;
//     a counted failure holds its key back with a backoff while other keys
//     go on; a refusal for good, or MaxAttempts counted failures, make the
//     row a dead letter in courier_outbox_dead_letters, with its history.
//     Attempts are counted in memory: a relay that restarts counts a
//     message's attempts from zero again.
//   - One reader at a time: a replication slot has one reader. A second
//     relay on the same slot waits as a hot standby, trying every Standby,
//     and takes over when the first one's connection ends.
//
// # The polling relay as the fallback
//
// Rows stay in courier_outbox until they are published, so the polling
// relay (courier relay without --mode cdc) publishes whatever CDC left of
// them (table-less messages excepted, see below): when
// CDC is switched off, when its slot was dropped or lost (wal_status =
// lost), or next to a CDC relay that is down. Both may even run at once:
// each publishes a key's messages in order, and a message published by both
// is a duplicate the broker or the inbox drops. When it starts, the CDC relay
// itself publishes the rows already in the table, oldest first, before
// what the log brings: rows written before its slot existed, or left by a
// dead relay, are never stranded. It reads the table in one snapshot and,
// before it reads the slot, peeks at the slot's backlog up to that
// snapshot (pg_logical_slot_peek_binary_changes, which decodes without
// consuming): the rows of transactions the log still holds are left to the
// log, which brings them in commit order, and the table gives only rows
// older than anything in the log. The price is decoding that backlog twice
// at each start.
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
// sequence, so courier dlq
// replay puts it in the table, from where it is published like a row. The
// trade-off: no row means no polling fallback. Until the relay has
// published a table-less message and confirmed its transaction, the slot
// is its only copy: a slot that is dropped, or lost to
// max_slot_wal_keep_size, loses the table-less messages it had not
// confirmed (the rows of the same transactions are still in the table).
// LogOnly refuses to write when the database has no logical slot at all;
// keep max_slot_wal_keep_size (if set) above the backlog an outage can
// build. A relay that stops or crashes loses nothing: the slot keeps
// every transaction it did not confirm.
//
// # Cost and operations
//
// The database does less work than for the polling relay: no claim
// queries, no leases; the walsender decodes each transaction once and
// sends it, and the relay deletes published rows in the background, in
// batches (BatchSize rows, or what gathered in 200 ms), off the publishing
// path. The slot's confirmed position therefore trails publishing by up to
// that much plus StatusInterval: a relay that dies publishes those messages
// again when it comes back (duplicates, dropped by message id). Up to
// Concurrency Publish calls run at once, on disjoint keys. The walsender's
// cost is per transaction (PostgreSQL wakes it at each commit and writes
// each decoded message to the socket on its own), so the saving is largest
// at moderate rates; bench/RESULTS.md has the figures. At every start the
// relay decodes the slot's backlog once more, to learn which transactions
// the log still holds (see above).
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
// that says whether it reads the slot or waits as a standby; SlotLag reads
// one slot's lag from Go. On PostgreSQL 17,
// a slot created with failover = true is synchronised to physical standbys
// (sync_replication_slots), so the relay can follow a failover; on older
// releases a promoted standby has no slot, and the relay creates one and
// publishes the table's rows as above.
//
// The database needs wal_level = logical (ALTER SYSTEM SET wal_level =
// logical, then a restart) and a user with the REPLICATION attribute.
package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/relay"
)

// Defaults of Config's zero fields.
const (
	DefaultSlot           = "courier_outbox"
	DefaultPublication    = "courier_outbox"
	DefaultStandby        = time.Second
	DefaultStatusInterval = time.Second
)

// Config tunes a Relay. Zero fields take the defaults.
type Config struct {
	// Slot is the logical replication slot's name. Default DefaultSlot.
	Slot string
	// Publication is the publication on courier_outbox the slot decodes.
	// Default DefaultPublication.
	Publication string
	// BatchSize is the most messages one Publish call carries. Default
	// relay.DefaultBatchSize.
	BatchSize int
	// Concurrency is how many Publish calls may be in flight at once, each
	// on keys no other call holds: one publishing while the next is
	// answered. Default relay.DefaultConcurrency.
	Concurrency int
	// PublishTimeout bounds one Publish call. Default
	// relay.DefaultPublishTimeout.
	PublishTimeout time.Duration
	// MaxAttempts is how many counted failures make a dead letter. Default
	// relay.DefaultMaxAttempts.
	MaxAttempts int
	// Backoff spaces retries and outage pauses. Zero fields take the
	// polling relay's defaults.
	Backoff relay.Backoff
	// KeepPublished moves published rows to courier_outbox_published
	// instead of deleting them, and keeps published table-less messages
	// there too.
	KeepPublished bool
	// Standby is how often a relay whose slot another relay reads tries to
	// take it over. Default DefaultStandby.
	Standby time.Duration
	// StatusInterval is how often the relay tells PostgreSQL its confirmed
	// position when nothing else happens. Default DefaultStatusInterval;
	// keep it well under the server's wal_sender_timeout (60s).
	StatusInterval time.Duration
	// Logger receives the relay's logs. Default: discard.
	Logger *slog.Logger
}

var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// setDefaults fills zero fields and validates the rest.
func (c *Config) setDefaults() error {
	if c.Slot == "" {
		c.Slot = DefaultSlot
	}
	if c.Publication == "" {
		c.Publication = DefaultPublication
	}
	if !slotName.MatchString(c.Slot) {
		return fmt.Errorf("cdc: Config.Slot %q: use 1 to 63 lower-case letters, digits and underscores", c.Slot)
	}
	if !slotName.MatchString(c.Publication) {
		return fmt.Errorf("cdc: Config.Publication %q: use 1 to 63 lower-case letters, digits and underscores", c.Publication)
	}
	if c.BatchSize == 0 {
		c.BatchSize = relay.DefaultBatchSize
	}
	if c.BatchSize < 1 || c.BatchSize > 10000 {
		return fmt.Errorf("cdc: Config.BatchSize is %d: use 1 to 10000", c.BatchSize)
	}
	if c.Concurrency == 0 {
		c.Concurrency = relay.DefaultConcurrency
	}
	if c.Concurrency < 1 || c.Concurrency > 64 {
		return fmt.Errorf("cdc: Config.Concurrency is %d: use 1 to 64", c.Concurrency)
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = relay.DefaultPublishTimeout
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = relay.DefaultMaxAttempts
	}
	if c.Backoff.Initial <= 0 {
		c.Backoff.Initial = relay.DefaultBackoffInitial
	}
	if c.Backoff.Max <= 0 {
		c.Backoff.Max = relay.DefaultBackoffMax
	}
	if c.Backoff.Jitter == 0 {
		c.Backoff.Jitter = relay.DefaultBackoffJitter
	}
	if c.Standby <= 0 {
		c.Standby = DefaultStandby
	}
	if c.StatusInterval <= 0 {
		c.StatusInterval = DefaultStatusInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Validate reports the first field that is out of range, naming it and
// its range; zero fields are fine (they take the defaults).
func (c Config) Validate() error { return c.setDefaults() }

// Relay publishes the outbox from the log. Run it; it is not restartable
// concurrently with itself.
type Relay struct {
	pool *pgxpool.Pool
	pub  broker.Publisher
	cfg  Config
	repl *pgconn.Config // the replication connection's configuration
	log  *slog.Logger
	m    metrics
}

// New returns a Relay that reads the outbox of pool's database (through a
// replication connection with pool's settings) and publishes to pub.
func New(pool *pgxpool.Pool, pub broker.Publisher, cfg Config) (*Relay, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if pool == nil || pub == nil {
		return nil, errors.New("cdc: New needs a pool and a publisher")
	}
	repl := pool.Config().ConnConfig.Config.Copy()
	if repl.RuntimeParams == nil {
		repl.RuntimeParams = map[string]string{}
	}
	repl.RuntimeParams["replication"] = "database"
	repl.RuntimeParams["application_name"] = "courier-cdc"
	return &Relay{pool: pool, pub: pub, cfg: cfg, repl: repl, log: cfg.Logger}, nil
}

// Setup creates the publication on courier_outbox when it does not exist.
// Run calls it; the database user must own the table (or be a superuser).
func Setup(ctx context.Context, pool *pgxpool.Pool, publication string) error {
	if publication == "" {
		publication = DefaultPublication
	}
	if !slotName.MatchString(publication) {
		return fmt.Errorf("cdc: publication %q: use 1 to 63 lower-case letters, digits and underscores", publication)
	}
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, publication).Scan(&exists); err != nil {
		return fmt.Errorf("cdc: look for publication %s: %w", publication, err)
	}
	if exists {
		return nil
	}
	_, err := pool.Exec(ctx, "CREATE PUBLICATION "+publication+" FOR TABLE courier_outbox WITH (publish = 'insert')")
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42710" { // created meanwhile
		return nil
	}
	if err != nil {
		return fmt.Errorf("cdc: create publication %s on courier_outbox: %w (run courier migrate first; the user must own the table)", publication, err)
	}
	return nil
}

// Stats counts what the relay did since it was made.
type Stats struct {
	// Published counts messages the broker acknowledged.
	Published int64
	// Retried counts failed publishes that will be tried again.
	Retried int64
	// DeadLettered counts messages made dead letters.
	DeadLettered int64
	// Swept counts rows published from the table (not from the log)
	// while the relay made its slot.
	Swept int64
	// Confirmed is the slot position the relay last confirmed, as
	// PostgreSQL writes an LSN ("0/16B3748"); "" before the first.
	Confirmed string
	// Reading is true while this relay holds the slot, or makes it;
	// false while it waits as a standby or reconnects.
	Reading bool
	// Making is true while this relay makes the slot: it publishes the
	// rows already in the table, then the log, and makes the slot once
	// every row from the table is recorded.
	Making bool
}

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats { return r.m.snapshot() }

// SlotLag reports how far slot's confirmed position is behind the current
// end of the log, in bytes, and whether the slot exists. Each byte of it is
// log PostgreSQL keeps for the slot.
func SlotLag(ctx context.Context, pool *pgxpool.Pool, slot string) (lag int64, ok bool, err error) {
	err = pool.QueryRow(ctx, `SELECT coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint
FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lag)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("cdc: slot %s lag: %w", slot, err)
	}
	return lag, true, nil
}

// item is one message on its way to the broker.
type item struct {
	seq      int64 // the row's id; 0 for none
	msg      courier.Message
	txn      *txn // nil for a row swept from the table
	attempts int
	history  []failure
}

// failure is one failed publish, for a dead letter's history.
type failure struct {
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
	Counted bool      `json:"counted"`
}

// txn is one committed transaction's messages, in commit order.
type txn struct {
	xid  uint32 // its id, as the log gives it
	end  uint64 // the log position just past its commit
	left int    // messages not yet published or dead
}
