package tenant

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
)

// Config configures a Fleet. Zero fields take the defaults given.
type Config struct {
	// Source lists the tenants. Required.
	Source Source
	// Relay is the configuration of each tenant's relay (see package
	// relay). Its Owner names this process, in leases and among the
	// Members; PollInterval defaults to the dialect's, and IdleDelay and
	// ReleaseInterval to PollInterval, so that a quiet tenant costs a
	// claim and a release of scheduled messages per PollInterval; Concurrency defaults to 1 here, so that a tenant takes one
	// connection; Notifier must be nil (tenants are polled: a wake-up
	// listener per tenant would hold a connection each); Observer is
	// replaced by Observers' observer of the tenant.
	Relay relay.Config
	// Store configures each tenant's relay store (KeepPublished).
	Store store.RelayConfig
	// Refresh is how often Source is read again. Default 30s.
	Refresh time.Duration
	// MaxOpen is how many tenants are served at once: each has its
	// database open, with Relay.Concurrency connections at most. While
	// other tenants wait for a place, a tenant that has found nothing to
	// publish for IdleAfter, or has had its place for Turn, closes its
	// database and gives its place to the one that has waited longest:
	// the tenants take turns. Default 100.
	MaxOpen int
	// IdleAfter: see MaxOpen. Default 1s.
	IdleAfter time.Duration
	// Turn: see MaxOpen. A tenant busy for longer goes on publishing at
	// its next turn. Default 5s.
	Turn time.Duration
	// ConnectTimeout bounds opening a tenant's database. Default 5s.
	ConnectTimeout time.Duration
	// MaxConnecting is how many tenants' databases are being opened at
	// once, so that a fleet starting, or a server coming back, does not
	// meet a storm of connections. Default 8.
	MaxConnecting int
	// Members, when set, is the database in which the relay processes
	// that share the tenants keep their heartbeats (store.Operations.Beat):
	// each process serves the tenants that rendezvous hashing gives it
	// (Owner), and takes over those of a process that stops beating
	// within 3 heartbeats. Default: none, this process serves every
	// tenant.
	Members store.Operations
	// Heartbeat is how often the process beats in Members. Default 2s.
	Heartbeat time.Duration
	// Observers returns the observer of a tenant's relay (package metrics
	// implements one per tenant). Default: none.
	Observers func(tenant string) relay.Observer
	// Open opens a tenant's database. Default: dburl.Open with the
	// connection bound and timeout above.
	Open func(ctx context.Context, t Tenant, opts dburl.Options) (*dburl.DB, error)
	// OnOpen, if set, is called in a goroutine of its own each time a
	// tenant's database is opened, with a context that ends before the
	// database closes: per-tenant upkeep such as cleanup runs there.
	OnOpen func(ctx context.Context, t Tenant, d *dburl.DB)
	// Logger receives the fleet's logs, and the tenants' relays' with a
	// tenant attribute. Default: Relay.Logger, or discard.
	Logger *slog.Logger
	// Clock is the time the fleet measures IdleAfter and Turn with, and
	// when a tenant's failures began (Status). Default: the real clock. A
	// test sets a clock it moves (memstore.Clock's Now) to end a turn
	// without waiting for it; the tenants' relays read Relay.Clock, and
	// Refresh, Heartbeat and the retries of a failed tenant run on real
	// time.
	Clock courier.Clock
}

// The defaults of Config's zero fields.
const (
	DefaultRefresh        = 30 * time.Second
	DefaultMaxOpen        = 100
	DefaultIdleAfter      = time.Second
	DefaultTurn           = 5 * time.Second
	DefaultConnectTimeout = 5 * time.Second
	DefaultMaxConnecting  = 8
	DefaultHeartbeat      = 2 * time.Second
)

func (c *Config) setDefaults() {
	if c.Refresh == 0 {
		c.Refresh = DefaultRefresh
	}
	if c.MaxOpen == 0 {
		c.MaxOpen = DefaultMaxOpen
	}
	if c.IdleAfter == 0 {
		c.IdleAfter = DefaultIdleAfter
	}
	if c.Turn == 0 {
		c.Turn = DefaultTurn
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.MaxConnecting == 0 {
		c.MaxConnecting = DefaultMaxConnecting
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.Relay.Concurrency == 0 {
		c.Relay.Concurrency = 1
	}
	if c.Logger == nil {
		c.Logger = c.Relay.Logger
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Open == nil {
		c.Open = func(ctx context.Context, t Tenant, opts dburl.Options) (*dburl.DB, error) {
			return dburl.Open(ctx, t.URL, opts)
		}
	}
}

func (c *Config) validate() error {
	switch {
	case c.Source == nil:
		return errors.New("tenant: Config.Source is nil: give the tenants (List, File or Query)")
	case c.Relay.Notifier != nil:
		return errors.New("tenant: Config.Relay.Notifier is set: tenants are polled; leave it nil")
	case c.Refresh < time.Second:
		return fmt.Errorf("tenant: Config.Refresh is %s: use 1s or more", c.Refresh)
	case c.MaxOpen < 1:
		return fmt.Errorf("tenant: Config.MaxOpen is %d: use 1 or more", c.MaxOpen)
	case c.IdleAfter <= 0:
		return fmt.Errorf("tenant: Config.IdleAfter is %s: use more than 0", c.IdleAfter)
	case c.Turn <= 0:
		return fmt.Errorf("tenant: Config.Turn is %s: use more than 0", c.Turn)
	case c.MaxConnecting < 1:
		return fmt.Errorf("tenant: Config.MaxConnecting is %d: use 1 or more", c.MaxConnecting)
	case c.ConnectTimeout <= 0:
		return fmt.Errorf("tenant: Config.ConnectTimeout is %s: use more than 0", c.ConnectTimeout)
	case c.Heartbeat < 100*time.Millisecond:
		return fmt.Errorf("tenant: Config.Heartbeat is %s: use 100ms or more", c.Heartbeat)
	}
	return c.Relay.Validate()
}

// Validate reports whether New would accept c: nil, or the error naming
// the field. Zero fields take their defaults first.
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}
