package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/trace"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/relay/internal/dispatch"
	"github.com/courier-go/courier/relay/internal/due"
	"github.com/courier-go/courier/relay/settings"
	"github.com/courier-go/courier/store"
)

// Defaults of Config's zero fields.
const (
	DefaultSlot           = store.DefaultSlot
	DefaultPublication    = store.DefaultPublication
	DefaultStandby        = time.Second
	DefaultStatusInterval = time.Second
)

// Config tunes a Relay. Zero fields take the defaults; the fields the
// polling relay has too (BatchSize, Concurrency, PublishTimeout,
// MaxAttempts, Backoff, Observer, Logger, HoldKeys) take its defaults and have its
// ranges, which package relay/settings holds.
type Config struct {
	// Slot is the logical replication slot's name. Default DefaultSlot.
	Slot string
	// Publication is the publication on courier_outbox the slot decodes.
	// Default DefaultPublication.
	Publication string
	// BatchSize is the most messages one Publish call carries, 1 to
	// 10000. Default settings.DefaultBatchSize.
	BatchSize int
	// Concurrency is how many Publish calls may be in flight at once, each
	// on keys no other call holds, 1 to 64: one publishing while the next
	// is answered. Default settings.DefaultConcurrency.
	Concurrency int
	// PublishTimeout bounds one Publish call. Default
	// settings.DefaultPublishTimeout.
	PublishTimeout time.Duration
	// MaxAttempts is how many counted failures make a dead letter. Default
	// settings.DefaultMaxAttempts.
	MaxAttempts int
	// Backoff spaces retries and outage pauses. Zero fields take the
	// polling relay's defaults.
	Backoff courier.Backoff
	// HoldKeys names the topics whose dead letters hold their key, as the
	// polling relay's (package relay, Config.HoldKeys): the key's later
	// messages, read from the log, move to courier_outbox_held instead of
	// being published, until the dead letter is replayed or discarded.
	// settings.AllTopics ("*") alone names every topic. Default: none.
	HoldKeys []string
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
	// Clock is the time the relay measures retries, pauses and recording
	// delays with. Default: the real clock.
	Clock courier.Clock
	// Logger receives the relay's logs. Default: discard.
	Logger *slog.Logger
	// Observer, if set, is told of every call to the broker (Published)
	// and of what each call's messages became (Completed: published,
	// retried, dead; the table is written in the background): package
	// metrics implements it. Default: none.
	Observer settings.Observer
	// TracerProvider makes the relay's send spans, as the polling relay's
	// (package relay, Tracing). Default otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
}

var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// shared points at the fields the polling relay has too.
func (c *Config) shared() dispatch.Settings {
	return dispatch.Settings{BatchSize: &c.BatchSize, Concurrency: &c.Concurrency, PublishTimeout: &c.PublishTimeout,
		MaxAttempts: &c.MaxAttempts, Backoff: &c.Backoff, Observer: &c.Observer, Logger: &c.Logger, HoldKeys: &c.HoldKeys}
}

// setDefaults fills the zero fields.
func (c *Config) setDefaults() {
	if c.Slot == "" {
		c.Slot = DefaultSlot
	}
	if c.Publication == "" {
		c.Publication = DefaultPublication
	}
	c.shared().SetDefaults(settings.DefaultPublishTimeout)
	if c.Standby == 0 {
		c.Standby = DefaultStandby
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = DefaultStatusInterval
	}
}

// validate reports the first field out of range.
func (c *Config) validate() error {
	switch {
	case !slotName.MatchString(c.Slot):
		return fmt.Errorf("cdc: Config.Slot %q: use 1 to 63 lower-case letters, digits and underscores", c.Slot)
	case !slotName.MatchString(c.Publication):
		return fmt.Errorf("cdc: Config.Publication %q: use 1 to 63 lower-case letters, digits and underscores", c.Publication)
	case c.Standby < 0:
		return fmt.Errorf("cdc: Config.Standby is %s: use more than 0", c.Standby)
	case c.StatusInterval < 0:
		return fmt.Errorf("cdc: Config.StatusInterval is %s: use more than 0", c.StatusInterval)
	}
	return c.shared().Validate("cdc: Config")
}

// Validate reports the first field that is out of range, naming it and
// its range; zero fields are fine (they take the defaults).
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}

// Database is what the relay asks of the database whose log it reads,
// besides the log itself: its publication and slots, the decoding of the
// log, the table's rows while it makes its slot, and the writes of what
// the broker answered. store/postgres's Driver.CDC is one:
//
//	r, err := cdc.New(postgres.NewDriver(pool).CDC(), publisher, cdc.Config{})
//	if err != nil {
//		return err
//	}
type Database interface {
	// ReplicationConfig is the configuration of a replication connection.
	ReplicationConfig() *pgconn.Config
	// Setup creates the publication when it does not exist.
	Setup(ctx context.Context, publication string) error
	// Decoder returns a decoder of the log for this outbox.
	Decoder(ctx context.Context) (store.LogDecoder, error)
	// Slot returns the state of a replication slot.
	Slot(ctx context.Context, slot string) (store.SlotState, error)
	// DropSlot drops a replication slot.
	DropSlot(ctx context.Context, slot string) error
	// CopySlot makes slot to a copy of from, starting at from's confirmed
	// position; store.ErrSlotExists when to exists.
	CopySlot(ctx context.Context, from, to string) error
	// LockSlot takes the lock that lets one relay at a time make slot
	// until release; store.ErrLocked while another relay holds it.
	LockSlot(ctx context.Context, slot string) (release func(), err error)
	// ReadTable reads the outbox's rows in an exported snapshot.
	ReadTable(ctx context.Context, snapshot string) (store.TableReader, error)
	// Record writes what the broker said of published and dead items
	// (rows deleted, or archived with keep; dead letters).
	Record(ctx context.Context, published, dead []*store.LogItem, keep bool) (store.Recorded, error)
	// Fail records failed publishes and returns each item's counted
	// attempts as the database holds them (-1: its row is gone).
	Fail(ctx context.Context, fs []store.LogFailure) ([]int, error)
	// Held returns the keys that dead letters hold (Config.HoldKeys),
	// each with its dead letter's id.
	Held(ctx context.Context) (map[string]int64, error)
	// Hold moves items whose key a dead letter holds behind it
	// (courier_outbox_held), taking its turn with the replays and
	// discards that release keys, and says what became of each.
	Hold(ctx context.Context, items []*store.LogItem) (store.Holding, error)
	// Releaser moves scheduled messages that have fallen due into the
	// outbox, from where the log brings them.
	store.Releaser
}

// Relay publishes the outbox from the log. Run it; it is not restartable
// concurrently with itself.
type Relay struct {
	db        Database
	disp      *dispatch.Dispatcher
	pipelined bool // the publisher keeps a key's order (broker.OrderKeeper)
	cfg       Config
	repl      *pgconn.Config // the replication connection's configuration
	log       *slog.Logger
	m         metrics
	due       *due.Timer // when to release scheduled messages
}

// New returns a Relay that reads the outbox of db's database (through a
// replication connection with its settings) and publishes to pub.
func New(db Database, pub broker.Publisher, cfg Config) (*Relay, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if db == nil || pub == nil {
		return nil, errors.New("cdc: New needs a database (postgres.Driver's CDC) and a publisher")
	}
	disp := dispatch.New(pub, dispatch.Config{Policy: dispatch.Policy{MaxAttempts: cfg.MaxAttempts, Backoff: cfg.Backoff},
		Clock: cfg.Clock, Logger: cfg.Logger, Observer: cfg.Observer, TracerProvider: cfg.TracerProvider, Holds: dispatch.NewHolds(cfg.HoldKeys)})
	timer := due.New(db, due.Config{Limit: cfg.BatchSize, Timeout: cfg.PublishTimeout, Clock: cfg.Clock, Logger: cfg.Logger, Released: cfg.Observer.Released})
	return &Relay{db: db, disp: disp, pipelined: broker.KeepsKeyOrder(pub), cfg: cfg, repl: db.ReplicationConfig(), log: cfg.Logger, due: timer}, nil
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

// item is one message on its way to the broker.
type item struct {
	store.LogItem
	txn  *txn // nil for a row read from the table
	held bool // handed to the recorder to hold
}

// txn is one committed transaction's messages, in commit order.
type txn struct {
	xid  uint32 // its id, as the log gives it
	end  uint64 // the log position just past its commit
	left int    // messages not yet published or dead
}
