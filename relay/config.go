package relay

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/relay/internal/dispatch"
	"github.com/courier-go/courier/relay/internal/due"
	"github.com/courier-go/courier/relay/settings"
	"github.com/courier-go/courier/store"
)

// Config tunes a Relay. Zero fields take the defaults given.
type Config struct {
	// BatchSize is the most rows one claim leases, 1 to 10000. Default
	// DefaultBatchSize (1000).
	BatchSize int
	// Concurrency is how many claimed batches may be publishing at once,
	// 1 to 64. Default DefaultConcurrency (2): one publishing while the
	// next is claimed.
	Concurrency int
	// LeaseDuration is how long claimed rows stay reserved for this relay,
	// at least 1s. If the relay dies, other relays take the rows over after
	// this long. Default DefaultLeaseDuration (30s). It must exceed
	// PublishTimeout by more than half a second.
	LeaseDuration time.Duration
	// PublishTimeout bounds publishing one batch. Default
	// DefaultPublishTimeout (10s), or LeaseDuration/2 when that is shorter.
	// A batch's publishing also stops half a second before its lease ends,
	// whichever comes first.
	PublishTimeout time.Duration
	// MaxAttempts is how many counted failures make a dead letter.
	// Default DefaultMaxAttempts (10). A failure the broker calls permanent
	// (broker.ErrRejected) makes one at once.
	MaxAttempts int
	// Backoff spaces retries, and the pauses while the broker is
	// unavailable. Each zero field takes its default:
	// DefaultBackoffInitial (500ms), DefaultBackoffMax (1m),
	// DefaultBackoffJitter (0.2).
	Backoff Backoff
	// HoldKeys names the topics whose dead letters hold their key: the
	// key's later messages wait behind the dead letter
	// (courier_outbox_held) until it is replayed, then they follow it in
	// order, or discarded, then they go on without it. AllTopics ("*")
	// alone names every topic; names are not empty and given once.
	// Default: none, a dead letter leaves the order and its key moves on.
	HoldKeys []string
	// PollInterval is how often an idle relay looks for work when no
	// wake-up arrives. Default DefaultPollInterval (1s); wiring code
	// usually takes the dialect's (store.Database PollInterval).
	PollInterval time.Duration
	// IdleDelay is the first wait after a claim that found less than a
	// full batch; the waits double up to PollInterval while claims find
	// nothing. Default DefaultIdleDelay (1ms): a busy relay catches the
	// next commits at once. A fleet of many tenants (package tenant) sets
	// it to the PollInterval, so that a quiet tenant costs one claim per
	// PollInterval, not a run of them after each message.
	IdleDelay time.Duration
	// ReleaseInterval is how often an idle relay looks for scheduled
	// messages that have fallen due without a wake-up saying so. Default
	// DefaultReleaseInterval (100ms); a fleet of many tenants (package
	// tenant) sets it to the PollInterval, so that an idle tenant costs
	// one claim and one release per PollInterval.
	ReleaseInterval time.Duration
	// ShutdownTimeout bounds the work done after Run's context ends.
	// Default DefaultShutdownTimeout (15s).
	ShutdownTimeout time.Duration
	// Notifier, if set, wakes the relay soon after commits.
	Notifier store.Notifier
	// Owner names this relay in leases. Default host-pid-random.
	Owner string
	// Clock is the time the relay measures leases, retries, pauses and its
	// State with. Default: the real clock. (The store compares times with
	// its own, see store.Clock.)
	Clock courier.Clock
	// Logger receives the relay's logs. Default: discard.
	Logger *slog.Logger
	// Observer, if set, is told of claims, publishes and outcomes as they
	// happen: package metrics implements it. Default: none.
	Observer Observer
	// TracerProvider makes the relay's send spans, one per call to the
	// broker, linked to the trace context each message carries (see
	// Tracing in the package documentation). Default
	// otel.GetTracerProvider(), which records nothing unless the program
	// installed an SDK.
	TracerProvider trace.TracerProvider
}

// Backoff is courier.Backoff, kept here so relay configurations read
// naturally.
type Backoff = courier.Backoff

// The defaults of Config's zero fields; the first seven are the CDC
// relay's (relay/cdc) too, and so are the ranges of its fields that have
// the same names (package relay/settings holds them).
const (
	DefaultBatchSize       = settings.DefaultBatchSize
	DefaultConcurrency     = settings.DefaultConcurrency
	DefaultPublishTimeout  = settings.DefaultPublishTimeout // at most LeaseDuration/2
	DefaultMaxAttempts     = settings.DefaultMaxAttempts
	DefaultBackoffInitial  = settings.DefaultBackoffInitial
	DefaultBackoffMax      = settings.DefaultBackoffMax
	DefaultBackoffJitter   = settings.DefaultBackoffJitter
	DefaultLeaseDuration   = 30 * time.Second
	DefaultPollInterval    = time.Second
	DefaultShutdownTimeout = 15 * time.Second
	DefaultReleaseInterval = due.DefaultRecheck
	DefaultIdleDelay       = time.Millisecond
)

// AllTopics, alone in HoldKeys, makes the dead letters of every topic hold
// their key.
const AllTopics = settings.AllTopics

// shared points at the fields the CDC relay has too.
func (c *Config) shared() dispatch.Settings {
	return dispatch.Settings{BatchSize: &c.BatchSize, Concurrency: &c.Concurrency, PublishTimeout: &c.PublishTimeout,
		MaxAttempts: &c.MaxAttempts, Backoff: &c.Backoff, Observer: &c.Observer, Logger: &c.Logger, HoldKeys: &c.HoldKeys}
}

func (c *Config) setDefaults() {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	c.shared().SetDefaults(min(DefaultPublishTimeout, c.LeaseDuration/2))
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.ReleaseInterval == 0 {
		c.ReleaseInterval = DefaultReleaseInterval
	}
	if c.IdleDelay == 0 {
		c.IdleDelay = DefaultIdleDelay
	}
	if c.Owner == "" {
		c.Owner = NewOwner()
	}
}

func (c *Config) validate() error {
	if err := c.shared().Validate("relay: Config"); err != nil {
		return err
	}
	switch {
	case c.LeaseDuration < time.Second:
		return fmt.Errorf("relay: Config.LeaseDuration is %s: use at least 1s", c.LeaseDuration)
	case c.PublishTimeout >= c.LeaseDuration-leaseMargin:
		return fmt.Errorf("relay: Config.PublishTimeout is %s: use more than 0 and less than LeaseDuration (%s)", c.PublishTimeout, c.LeaseDuration)
	case c.PollInterval <= 0:
		return fmt.Errorf("relay: Config.PollInterval is %s: use more than 0", c.PollInterval)
	case c.ShutdownTimeout <= 0:
		return fmt.Errorf("relay: Config.ShutdownTimeout is %s: use more than 0", c.ShutdownTimeout)
	case c.IdleDelay < 0:
		return fmt.Errorf("relay: Config.IdleDelay is %s: use more than 0, up to PollInterval", c.IdleDelay)
	case c.ReleaseInterval < due.MinGap:
		return fmt.Errorf("relay: Config.ReleaseInterval is %s: use %s or more", c.ReleaseInterval, due.MinGap)
	}
	return nil
}

// NewOwner returns a name for a relay that is unique among running
// relays: host-pid-random, Config.Owner's default.
func NewOwner() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = cryptoRead(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

var cryptoRead = rand.Read

// Validate reports whether New would accept c: nil, or the error New would
// return, naming the field. Zero fields take their defaults first, as in
// New. Callers that do work before New (create a stream, open a database)
// call it first, so a bad setting fails before anything happens.
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}
