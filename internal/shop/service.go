package shop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/saga"
	"github.com/courier-go/courier/store"
)

// Service names, also their inbox consumer names.
const (
	Orders    = "orders"
	Payment   = "payment"
	Inventory = "inventory"
	Shipping  = "shipping"
)

// Services lists the service names in the order the saga visits them.
var Services = []string{Orders, Payment, Inventory, Shipping}

// Service is one of the shop's four services. Run may be called again after
// it returned: each call is a new incarnation on the same database, as a
// restarted process would be.
type Service interface {
	// Name returns the service's name.
	Name() string
	// Run serves until ctx ends (then returns nil) or the service crashes
	// (ErrCrashed) or cannot start.
	Run(ctx context.Context) error
	// Started is closed once the service's first incarnation is serving.
	Started() <-chan struct{}
	// Faults returns the faults in force.
	Faults() Faults
	// SetFaults changes the injected faults while the service runs.
	SetFaults(Faults)
	// Metrics returns the service's running totals over every incarnation.
	Metrics() Metrics
	// ChargeVersion returns the version of ChargeRequested the service's
	// next incarnations are built with (Config.ChargeVersion).
	ChargeVersion() int
	// SetChargeVersion changes it from the next incarnation on: what a
	// deploy of another build does (see Shop.Deploy).
	SetChargeVersion(v int) error
}

// Metrics are a service's running totals.
type Metrics struct {
	// Inbox counts what the inbox consumer did: applied, duplicates
	// skipped, deliveries retried, parked.
	Inbox inbox.ConsumerMetrics
	// Chaos counts the deliveries the chaos decorator duplicated and
	// reordered.
	Chaos ChaosStats
	// Published counts messages the service's relay published.
	Published int64
	// Runs counts the incarnations started.
	Runs int64
	// Charges counts what payment did with each version of
	// ChargeRequested (payment only).
	Charges ChargeStats
}

func (m Metrics) add(o Metrics) Metrics {
	m.Inbox.Applied += o.Inbox.Applied
	m.Inbox.Duplicates += o.Inbox.Duplicates
	m.Inbox.Retried += o.Inbox.Retried
	m.Inbox.Parked += o.Inbox.Parked
	m.Inbox.Replayed += o.Inbox.Replayed
	m.Chaos.Duplicated += o.Chaos.Duplicated
	m.Chaos.Reordered += o.Chaos.Reordered
	m.Published += o.Published
	m.Runs += o.Runs
	m.Charges = m.Charges.add(o.Charges)
	return m
}

// base is what the four services share: configuration, faults, metrics and
// the incarnation loop.
type base struct {
	name    string
	cfg     Config
	faults  atomic.Pointer[Faults]
	version atomic.Int64 // ChargeVersion
	charges chargeCounter
	started chan struct{}
	once    sync.Once
	running atomic.Bool

	mu      sync.Mutex
	past    Metrics        // totals of finished incarnations
	current func() Metrics // live totals of the running one
	chaos   *Chaos
}

func newBase(name string, cfg Config) (*base, error) {
	if err := cfg.setDefaults(name); err != nil {
		return nil, err
	}
	b := &base{name: name, cfg: cfg, started: make(chan struct{})}
	f := cfg.Faults
	b.faults.Store(&f)
	b.version.Store(int64(cfg.ChargeVersion))
	return b, nil
}

// ChargeVersion implements Service.
func (b *base) ChargeVersion() int { return int(b.version.Load()) }

// SetChargeVersion implements Service.
func (b *base) SetChargeVersion(v int) error {
	if err := checkChargeVersion(v); err != nil {
		return fmt.Errorf("shop %s: %w", b.name, err)
	}
	b.version.Store(int64(v))
	return nil
}

// Name implements Service.
func (b *base) Name() string { return b.name }

// Started implements Service.
func (b *base) Started() <-chan struct{} { return b.started }

// SetFaults implements Service.
func (b *base) SetFaults(f Faults) {
	b.faults.Store(&f)
	b.mu.Lock()
	if b.chaos != nil {
		b.chaos.Set(f.DuplicateRate, f.ReorderRate)
	}
	b.mu.Unlock()
}

// Faults returns the faults in force.
func (b *base) Faults() Faults { return *b.faults.Load() }

// Metrics implements Service.
func (b *base) Metrics() Metrics {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.past
	if b.current != nil {
		m = m.add(b.current())
	}
	m.Charges = b.charges.stats()
	return m
}

// node is one incarnation's plumbing: the database and the outbox writer
// that wakes the in-process relay.
type node struct {
	db   *serviceDB
	w    *outbox.Writer[*sql.Tx]
	wake *store.LocalNotifier
	log  *slog.Logger
}

// reply writes v, a reply to the command cause, to the orders topic with
// the order id as key; a non-empty reason goes in saga.HeaderReason.
func (n *node) reply(ctx context.Context, tx *sql.Tx, cause courier.Message, v any, reason string) error {
	opts := []courier.Option{courier.CausedBy(cause)}
	if reason != "" {
		opts = append(opts, courier.WithHeader(saga.HeaderReason, reason))
	}
	msg, err := courier.NewJSON(TopicOrders, cause.Key, v, opts...)
	if err != nil {
		return err
	}
	return n.w.Write(ctx, tx, msg)
}

// incarnation is what a service adds to the shared plumbing: the handler of
// its topic, goroutines of its own (HTTP server, saga deadlines) and an
// observer of its inbox consumer, if any.
type incarnation struct {
	handler  inbox.Handler[*sql.Tx]
	extra    []func(context.Context) error
	observer inbox.Observer
}

// Timings of the plumbing, chosen so that a crashed service's work comes
// back within seconds: its relay leases expire after relayLease, its
// unacknowledged deliveries after ackWait.
const (
	relayLease   = 5 * time.Second
	relayPublish = 2 * time.Second
	ackWait      = 5 * time.Second
	crashDrain   = time.Millisecond
)

// run runs one incarnation: it opens the database (migrating it), connects
// to the broker, lets setup build the service's handler, and runs the relay,
// the inbox consumer of topic and setup's goroutines until ctx ends or one
// of them fails.
func (b *base) run(ctx context.Context, tables []string, topic string, setup func(ctx context.Context, n *node, drain time.Duration) (incarnation, error)) error {
	if !b.running.CompareAndSwap(false, true) {
		return fmt.Errorf("shop %s: Run is already running; stop it before running it again", b.name)
	}
	defer b.running.Store(false)
	faults := b.Faults()
	drain := b.cfg.Drain
	if faults.CrashAfter > 0 {
		drain = crashDrain // an incarnation that crashes does not drain
	}
	life, cancel := context.WithCancel(ctx)
	defer cancel()
	log := b.cfg.Logger

	db, link, err := b.connect(life, tables, topic)
	if err != nil {
		return err
	}
	defer db.Close()
	defer func() { _ = link.Close() }()
	wake := store.NewLocalNotifier()
	n := &node{db: db, w: outbox.New(db.Inserter(), outbox.Config{Notify: wake.Signal}), wake: wake, log: log}
	inc, err := setup(life, n, drain)
	if err != nil {
		return fmt.Errorf("shop %s: %w", b.name, err)
	}
	r, obs, err := b.newRelay(life, db, link, wake, drain)
	if err != nil {
		return err
	}
	if obs != nil {
		defer obs.ln.Close()
	}
	cons, chaos, err := b.newConsumer(db, link, obs, inc, faults, drain)
	if err != nil {
		return err
	}
	defer b.track(r, cons, chaos)()

	g := newGroup(life)
	g.Go(wake.Run)
	g.Go(r.Run)
	g.Go(cons.Run)
	if obs != nil {
		g.Go(func(ctx context.Context) error { return obs.serve(ctx, r, db) })
	}
	for _, fn := range inc.extra {
		g.Go(fn)
	}
	if faults.CrashAfter > 0 {
		g.Go(func(ctx context.Context) error {
			if sleep(ctx, faults.CrashAfter) {
				log.Warn("crashing (Faults.CrashAfter)", "after", faults.CrashAfter)
				return ErrCrashed
			}
			return nil
		})
	}
	log.Info("service started", "database", db.String(), "dialect", db.Dialect(), "broker", b.cfg.Transport.String(), "topic", topic)
	b.once.Do(func() { close(b.started) })
	err = g.Wait()
	log.Info("service stopped", "error", err)
	return err
}

// connect opens the incarnation's database, migrating it with tables, and
// its link to the broker, consuming topic.
func (b *base) connect(ctx context.Context, tables []string, topic string) (*serviceDB, *Link, error) {
	db, err := openDB(ctx, b.cfg.DatabaseURL)
	if err != nil {
		return nil, nil, fmt.Errorf("shop %s: %w", b.name, err)
	}
	if err := db.migrate(ctx, tables); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("shop %s: %w", b.name, err)
	}
	link, err := b.cfg.Transport.Open(ctx, b.name, topic, b.cfg.Logger)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("shop %s: %w", b.name, err)
	}
	return db, link, nil
}

// newRelay makes the incarnation's relay, woken by wake, and its
// observability when Config.MetricsAddr is set (nil otherwise); the caller
// closes obs's listener.
func (b *base) newRelay(ctx context.Context, db *serviceDB, link *Link, wake *store.LocalNotifier, drain time.Duration) (*relay.Relay, *observability, error) {
	st, err := db.RelayStore(ctx, store.RelayConfig{})
	if err != nil {
		return nil, nil, fmt.Errorf("shop %s: relay store: %w", b.name, err)
	}
	obs, err := b.observe(db)
	if err != nil {
		return nil, nil, fmt.Errorf("shop %s: %w", b.name, err)
	}
	r, err := relay.New(st, link.Publisher, relay.Config{
		Notifier: wake, PollInterval: 250 * time.Millisecond, LeaseDuration: relayLease, PublishTimeout: relayPublish,
		Backoff:         courier.Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Jitter: 0.2},
		ShutdownTimeout: drain, Logger: b.cfg.Logger, Observer: obs.relayObserver(),
	})
	if err != nil {
		if obs != nil {
			obs.ln.Close()
		}
		return nil, nil, fmt.Errorf("shop %s: %w", b.name, err)
	}
	return r, obs, nil
}

// newConsumer makes the incarnation's inbox consumer: its handler, with the
// faults in force, applies what link's subscriber delivers, through the
// chaos decorator that duplicates and reorders deliveries.
func (b *base) newConsumer(db *serviceDB, link *Link, obs *observability, inc incarnation, faults Faults, drain time.Duration) (*inbox.Consumer[*sql.Tx], *Chaos, error) {
	chaos := NewChaos(link.Subscriber, ChaosConfig{Duplicate: faults.DuplicateRate, Reorder: faults.ReorderRate})
	ib, err := inbox.New(db.Inbox(), b.name)
	if err != nil {
		return nil, nil, err
	}
	ccfg := inbox.ConsumerConfig{
		Concurrency: 8, KeepOrder: link.KeepOrder, MaxDeliveries: 25, Backoff: courier.Backoff{Initial: 25 * time.Millisecond, Max: time.Second, Jitter: 0.2},
		ExtendEvery: 2 * time.Second, ReplayEvery: time.Second, ShutdownTimeout: drain, Logger: b.cfg.Logger,
		NewerVersionWait: b.cfg.NewerVersionWait,
	}
	var observers teeObserver
	if obs != nil {
		observers = append(observers, obs.col.Consumer())
	}
	if inc.observer != nil {
		observers = append(observers, inc.observer)
	}
	if len(observers) > 0 {
		ccfg.Observer = observers
	}
	cons, err := inbox.NewConsumer(ib, chaos, db.ConsumerStore(), withFaults(b.Faults, inc.handler), ccfg)
	if err != nil {
		return nil, nil, err
	}
	return cons, chaos, nil
}

// track makes Metrics count the running incarnation's totals as they grow;
// the function it returns, called when the incarnation has stopped, adds
// them to the finished incarnations' totals.
func (b *base) track(r *relay.Relay, cons *inbox.Consumer[*sql.Tx], chaos *Chaos) (stopped func()) {
	live := func() Metrics {
		rm := r.Metrics()
		return Metrics{Inbox: cons.Metrics(), Chaos: chaos.Stats(), Published: rm.Published, Runs: 1}
	}
	b.mu.Lock()
	b.current, b.chaos = live, chaos
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		b.past = b.past.add(live())
		b.current, b.chaos = nil, nil
		b.mu.Unlock()
	}
}

// group runs goroutines that stop together: the first that fails cancels
// the context of all of them. Every goroutine is waited for.
type group struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
}

func newGroup(ctx context.Context) *group {
	ctx, cancel := context.WithCancel(ctx)
	return &group{ctx: ctx, cancel: cancel}
}

// Go runs fn in a goroutine of the group.
func (g *group) Go(fn func(context.Context) error) {
	g.wg.Go(func() {
		err := fn(g.ctx)
		if err == nil || errors.Is(err, context.Canceled) {
			return
		}
		g.mu.Lock()
		if g.err == nil {
			g.err = err
		}
		g.mu.Unlock()
		g.cancel()
	})
}

// Wait waits for every goroutine and returns the first error.
func (g *group) Wait() error {
	g.wg.Wait()
	g.cancel()
	return g.err
}
