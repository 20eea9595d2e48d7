package tenant

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/internal/waits"
	"github.com/courier-go/courier/relay"
)

// Fleet relays the outboxes of many tenants' databases to one broker:
// each tenant has a relay of its own (its own claims, leases, retries,
// dead letters and scheduled messages, in its own database), none of
// which ever mixes two tenants' rows in a batch or a broker call. Several
// processes share the tenants through Config.Members. Create it with New
// and start it with Run.
type Fleet struct {
	cfg   Config
	src   *Sieve // cfg.Source's valid tenants; it logs the others
	pub   broker.Publisher
	log   *slog.Logger
	slots *slots
	// connecting bounds the databases being opened at once.
	connecting chan struct{}

	mu                    sync.Mutex
	tenants               []Tenant           // as Source last gave them, by name
	members               []string           // as the last heartbeat gave them
	served                map[string]*server // the tenants this process serves, by name
	sourceErr, membersErr string
}

// New returns a fleet that publishes with pub. It fails when the
// configuration is invalid, naming the field.
func New(pub broker.Publisher, cfg Config) (*Fleet, error) {
	if pub == nil {
		return nil, errors.New("tenant: New needs a publisher")
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Relay.Owner == "" {
		cfg.Relay.Owner = relay.NewOwner()
	}
	log := cfg.Logger.With("relay", cfg.Relay.Owner)
	return &Fleet{cfg: cfg, src: NewSieve(cfg.Source, log), pub: pub, log: log, slots: newSlots(cfg.MaxOpen),
		connecting: make(chan struct{}, cfg.MaxConnecting), served: map[string]*server{}}, nil
}

// Owner returns the name this process leases rows and beats under.
func (f *Fleet) Owner() string { return f.cfg.Relay.Owner }

// Run serves the tenants until ctx ends, then stops each tenant's relay
// gracefully (see package relay) and returns nil. A tenant whose database
// cannot be opened or answers with errors is retried, with a growing
// pause, without holding a place other tenants wait for; the others go
// on. An entry of Source that is not a valid tenant is logged once,
// reported by Status and left out; the others are served. Run fails only
// when Source gives no tenant list at all at the start.
func (f *Fleet) Run(ctx context.Context) error {
	if err := f.refresh(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer func() {
		f.mu.Lock()
		for _, s := range f.served {
			s.stop()
		}
		f.mu.Unlock()
		wg.Wait()
		if f.cfg.Members != nil {
			if err := f.cfg.Members.Leave(context.WithoutCancel(ctx), f.Owner()); err != nil {
				f.log.Warn("leave the fleet", "error", err)
			}
		}
		f.log.Info("fleet stopped")
	}()
	f.log.Info("fleet started", "tenants", len(f.tenants), "max_open", f.cfg.MaxOpen)
	f.beat(ctx)
	f.assign(ctx, &wg)
	refresh := time.NewTicker(f.cfg.Refresh)
	defer refresh.Stop()
	heartbeat := time.NewTicker(f.cfg.Heartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-refresh.C:
			if err := f.refresh(ctx); err != nil && ctx.Err() == nil {
				f.log.Warn("tenants not read again; serving the last ones read", "error", err)
			}
		case <-heartbeat.C:
			if f.cfg.Members == nil {
				continue
			}
			f.beat(ctx)
		}
		f.assign(ctx, &wg)
	}
}

// refresh reads Source.
func (f *Fleet) refresh(ctx context.Context) error {
	ts, err := f.src.Tenants(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.sourceErr = err.Error()
		return err
	}
	f.tenants, f.sourceErr = sorted(ts), ""
	return nil
}

// beat records this process's heartbeat and reads the live members. A
// failed beat keeps the members of the last one: the tenants stay served
// (the rows' leases keep two relays of one tenant correct, should the
// others divide them differently meanwhile).
func (f *Fleet) beat(ctx context.Context) {
	if f.cfg.Members == nil {
		return
	}
	members, err := f.cfg.Members.Beat(ctx, f.Owner(), 3*f.cfg.Heartbeat)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil && f.membersErr == "" {
			f.log.Warn("heartbeat failed; serving the tenants of the last one", "error", err)
		}
		f.membersErr = err.Error()
		return
	}
	if !slices.Equal(members, f.members) {
		f.log.Info("fleet members", "members", members)
	}
	f.members, f.membersErr = members, ""
}

// mine reports whether this process serves t.
func (f *Fleet) mine(t Tenant) bool {
	if f.cfg.Members == nil || len(f.members) == 0 {
		return true
	}
	return Owner(t.Name, f.members) == f.Owner()
}

// assign starts serving the tenants that are this process's and stops
// serving the others (removed from Source, given to another member, or
// with a new URL).
func (f *Fleet) assign(ctx context.Context, wg *sync.WaitGroup) {
	f.mu.Lock()
	defer f.mu.Unlock()
	want := map[string]Tenant{}
	for _, t := range f.tenants {
		if f.mine(t) {
			want[t.Name] = t
		}
	}
	for name, s := range f.served {
		if t, ok := want[name]; !ok || t.URL != s.t.URL {
			s.stop()
			delete(f.served, name)
			f.log.Info("tenant handed over or removed", "tenant", name)
		}
	}
	for name, t := range want {
		if _, ok := f.served[name]; ok {
			continue
		}
		s := f.newServer(ctx, t)
		f.served[name] = s
		wg.Go(func() { s.run(); s.finished() })
	}
}

// sleep waits d or until ctx ends, and reports whether ctx is live.
func sleep(ctx context.Context, d time.Duration) bool { return waits.Sleep(ctx, d) }
