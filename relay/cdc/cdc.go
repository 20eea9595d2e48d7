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
	"go.opentelemetry.io/otel/trace"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/relay/internal/dispatch"
)

// Defaults of Config's zero fields.
const (
	DefaultSlot           = "courier_outbox"
	DefaultPublication    = "courier_outbox"
	DefaultStandby        = time.Second
	DefaultStatusInterval = time.Second
)

// Config tunes a Relay. Zero fields take the defaults; the fields the
// polling relay has too (BatchSize, Concurrency, PublishTimeout,
// MaxAttempts, Backoff) take its defaults and have its ranges.
type Config struct {
	// Slot is the logical replication slot's name. Default DefaultSlot.
	Slot string
	// Publication is the publication on courier_outbox the slot decodes.
	// Default DefaultPublication.
	Publication string
	// BatchSize is the most messages one Publish call carries, 1 to
	// 10000. Default relay.DefaultBatchSize.
	BatchSize int
	// Concurrency is how many Publish calls may be in flight at once, each
	// on keys no other call holds, 1 to 64: one publishing while the next
	// is answered. Default relay.DefaultConcurrency.
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
	// Clock is the time the relay measures retries, pauses and recording
	// delays with. Default: the real clock.
	Clock courier.Clock
	// Logger receives the relay's logs. Default: discard.
	Logger *slog.Logger
	// Observer, if set, is told of every call to the broker (Published)
	// and of what each call's messages became (Completed: published,
	// retried, dead; the table is written in the background): package
	// metrics implements it. Default: none.
	Observer relay.Observer
	// TracerProvider makes the relay's send spans, as the polling relay's
	// (package relay, Tracing). Default otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
}

var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// settings are the fields the polling relay shares.
func (c *Config) settings() *dispatch.Settings {
	return &dispatch.Settings{BatchSize: c.BatchSize, Concurrency: c.Concurrency, PublishTimeout: c.PublishTimeout,
		MaxAttempts: c.MaxAttempts, Backoff: c.Backoff}
}

// setDefaults fills the zero fields.
func (c *Config) setDefaults() {
	if c.Slot == "" {
		c.Slot = DefaultSlot
	}
	if c.Publication == "" {
		c.Publication = DefaultPublication
	}
	s := c.settings()
	s.SetDefaults(relay.DefaultPublishTimeout)
	c.BatchSize, c.Concurrency, c.PublishTimeout, c.MaxAttempts, c.Backoff = s.BatchSize, s.Concurrency, s.PublishTimeout, s.MaxAttempts, s.Backoff
	if c.Standby == 0 {
		c.Standby = DefaultStandby
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = DefaultStatusInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = relay.NopObserver{}
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
	return c.settings().Validate("cdc: Config")
}

// Validate reports the first field that is out of range, naming it and
// its range; zero fields are fine (they take the defaults).
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}

// Relay publishes the outbox from the log. Run it; it is not restartable
// concurrently with itself.
type Relay struct {
	pool      *pgxpool.Pool
	disp      *dispatch.Dispatcher
	pipelined bool // the publisher keeps a key's order (broker.OrderKeeper)
	cfg       Config
	repl      *pgconn.Config // the replication connection's configuration
	log       *slog.Logger
	m         metrics
}

// New returns a Relay that reads the outbox of pool's database (through a
// replication connection with pool's settings) and publishes to pub.
func New(pool *pgxpool.Pool, pub broker.Publisher, cfg Config) (*Relay, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
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
	disp := dispatch.New(pub, dispatch.Config{Policy: dispatch.Policy{MaxAttempts: cfg.MaxAttempts, Backoff: cfg.Backoff},
		Clock: cfg.Clock, Logger: cfg.Logger, Observer: cfg.Observer, TracerProvider: cfg.TracerProvider})
	return &Relay{pool: pool, disp: disp, pipelined: broker.KeepsKeyOrder(pub), cfg: cfg, repl: repl, log: cfg.Logger}, nil
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
