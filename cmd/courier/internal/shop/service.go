package shop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
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

// Service is one of the shop's four services. It runs as one or more
// instances at once ([Service.Instance]), as a service runs as several
// processes: each instance has its own relay and inbox consumer (and, for
// orders, its own HTTP API and saga deadlines), and every instance works on
// the service's one database, so they share its outbox, its inbox and its
// sagas, and consume the service's topic as one consumer (how they share
// its messages depends on the [Transport]). Faults, the charge version and
// the metrics are the service's, over every instance.
type Service interface {
	// Name returns the service's name.
	Name() string
	// Run runs instance 0 of the service: Instance(0).Run.
	Run(ctx context.Context) error
	// Instance returns instance i of the service (0, 1, …), made on first
	// use.
	Instance(i int) *Instance
	// Instances returns the instances made so far, by number.
	Instances() []*Instance
	// Started is closed once the first incarnation of any instance is
	// serving.
	Started() <-chan struct{}
	// Faults returns the faults in force.
	Faults() Faults
	// SetFaults changes the injected faults of every instance while they
	// run.
	SetFaults(Faults)
	// Metrics returns the service's running totals over every instance
	// and incarnation.
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

// base is what the four services share: configuration, faults, metrics,
// the instances and their incarnation loop.
type base struct {
	name    string
	cfg     Config
	spec    spec
	faults  atomic.Pointer[Faults]
	version atomic.Int64 // ChargeVersion
	charges chargeCounter
	started chan struct{}
	once    sync.Once

	mu        sync.Mutex
	instances []*Instance

	dbMu   sync.Mutex
	shared *dbShare // the instances' database, when they share it (see openDatabase)
}

// spec is what a service runs in each incarnation: its tables, the topic it
// consumes, and setup, which builds its handler on the incarnation's
// plumbing.
type spec struct {
	tables []string
	topic  string
	setup  func(ctx context.Context, n *node, drain time.Duration) (incarnation, error)
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

// Run implements Service.
func (b *base) Run(ctx context.Context) error { return b.Instance(0).Run(ctx) }

// Instance implements Service. A negative i is taken as 0.
func (b *base) Instance(i int) *Instance {
	i = max(i, 0)
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.instances) <= i {
		b.instances = append(b.instances, &Instance{b: b, n: len(b.instances), started: make(chan struct{})})
	}
	return b.instances[i]
}

// Instances implements Service.
func (b *base) Instances() []*Instance {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.instances)
}

// SetFaults implements Service.
func (b *base) SetFaults(f Faults) {
	b.faults.Store(&f)
	for _, in := range b.Instances() {
		in.mu.Lock()
		if in.chaos != nil {
			in.chaos.Set(f.DuplicateRate, f.ReorderRate)
		}
		in.mu.Unlock()
	}
}

// Faults returns the faults in force.
func (b *base) Faults() Faults { return *b.faults.Load() }

// Metrics implements Service.
func (b *base) Metrics() Metrics {
	var m Metrics
	for _, in := range b.Instances() {
		m = m.add(in.Metrics())
	}
	m.Charges = b.charges.stats()
	return m
}

// Instance is one instance of a service: what one process of it would be.
// Its Run may be called again after it returned: each call is a new
// incarnation on the service's database, as a restarted process would be.
// Instances of one service run at once (see [Service]).
type Instance struct {
	b       *base
	n       int
	started chan struct{}
	once    sync.Once
	running atomic.Bool

	mu      sync.Mutex
	past    Metrics        // totals of finished incarnations
	current func() Metrics // live totals of the running one
	chaos   *Chaos         // the running incarnation's subscriber, nil while down
}

// Number returns the instance's number, from 0.
func (in *Instance) Number() int { return in.n }

// Run serves until ctx ends (then returns nil) or the instance crashes
// (ErrCrashed) or cannot start. Running an instance that runs already is
// refused.
func (in *Instance) Run(ctx context.Context) error { return in.b.run(ctx, in) }

// Started is closed once the instance's first incarnation is serving.
func (in *Instance) Started() <-chan struct{} { return in.started }

// Metrics returns the instance's running totals over its incarnations;
// Charges are the service's only (see Service.Metrics).
func (in *Instance) Metrics() Metrics {
	in.mu.Lock()
	defer in.mu.Unlock()
	m := in.past
	if in.current != nil {
		m = m.add(in.current())
	}
	return m
}

// Partitions returns the partitions of the service's topic the running
// incarnation consumes, when the instances share the keys by partition
// (broker.KeySharer); nil otherwise, or while the instance is down.
func (in *Instance) Partitions() []int {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.chaos == nil || !in.chaos.SharesKeys() {
		return nil
	}
	return in.chaos.Partitions()
}

// SharesKeys reports whether the running incarnation's subscriber shares
// the service's keys with the other instances (broker.KeySharer).
func (in *Instance) SharesKeys() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.chaos != nil && in.chaos.SharesKeys()
}

// node is one incarnation's plumbing: the database and the outbox writer
// that wakes the in-process relay.
type node struct {
	instance int
	db       *serviceDB
	w        *outbox.Writer[*sql.Tx]
	wake     *store.LocalNotifier
	log      *slog.Logger
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

// Timings of the plumbing, chosen so that a crashed instance's work comes
// back within seconds: its relay leases expire after relayLease, its
// unacknowledged deliveries after ackWait. An idle relay claims once every
// relayPoll: each relay is woken at once by its own instance's writes
// (store.LocalNotifier), so the poll only finds what another instance's
// relay left behind when it crashed, after its lease; 500ms keeps the idle
// claims of two instances' relays where one relay's were at 250ms.
const (
	relayLease   = 5 * time.Second
	relayPublish = 2 * time.Second
	relayPoll    = 500 * time.Millisecond
	ackWait      = 5 * time.Second
	crashDrain   = time.Millisecond
)

// run runs one incarnation of instance in: it opens the database
// (migrating it), connects to the broker, lets the service's setup build
// its handler, and runs the relay, the inbox consumer of the service's
// topic and setup's goroutines until ctx ends or one of them fails.
func (b *base) run(ctx context.Context, in *Instance) error {
	if !in.running.CompareAndSwap(false, true) {
		return fmt.Errorf("shop %s: instance %d is already running; stop it before running it again", b.name, in.n)
	}
	defer in.running.Store(false)
	faults := b.Faults()
	drain := b.cfg.Drain
	if faults.CrashAfter > 0 {
		drain = crashDrain // an incarnation that crashes does not drain
	}
	life, cancel := context.WithCancel(ctx)
	defer cancel()
	log := b.cfg.Logger.With("instance", in.n)

	db, release, err := b.openDatabase(life)
	if err != nil {
		return err
	}
	defer release()
	link, err := b.connect(life, log)
	if err != nil {
		return err
	}
	defer endLink(link, drain)
	wake := store.NewLocalNotifier()
	n := &node{instance: in.n, db: db.serviceDB, w: outbox.New(db.Inserter(), outbox.Config{Notify: wake.Signal}), wake: wake, log: log}
	inc, err := b.spec.setup(life, n, drain)
	if err != nil {
		return fmt.Errorf("shop %s: %w", b.name, err)
	}
	r, obs, err := b.newRelay(in, db, link, wake, drain, log)
	if err != nil {
		return err
	}
	if obs != nil {
		defer obs.ln.Close()
	}
	rec, err := b.newRecorder(db.serviceDB, log)
	if err != nil {
		return err
	}
	cons, chaos, back, err := b.newConsumer(db, link, obs, rec, inc, faults, drain, log)
	if err != nil {
		return err
	}
	stopRecorder := rec.start(ctx)
	defer in.track(r, cons, chaos)()

	g := newGroup(life)
	g.Go(wake.Run)
	g.Go(r.Run)
	g.Go(cons.Run)
	if obs != nil {
		g.Go(func(ctx context.Context) error { return obs.serve(ctx, r, db.serviceDB) })
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
	log.Info("service started", "database", db.String(), "dialect", db.Dialect(), "broker", b.cfg.Transport.String(), "topic", b.spec.topic,
		"keys_shared", chaos.SharesKeys())
	in.once.Do(func() { close(in.started) })
	b.once.Do(func() { close(b.started) })
	err = g.Wait()
	stopRecorder()
	if back != nil {
		if n := back.giveBack(context.WithoutCancel(ctx)); n > 0 {
			log.Info("deliveries left unsettled given back to the broker", "deliveries", n)
		}
	}
	log.Info("service stopped", "error", err)
	return err
}

// connect connects the incarnation to the broker, consuming the service's
// topic.
func (b *base) connect(ctx context.Context, log *slog.Logger) (*Link, error) {
	link, err := b.cfg.Transport.Open(ctx, b.name, b.spec.topic, log)
	if err != nil {
		return nil, fmt.Errorf("shop %s: %w", b.name, err)
	}
	return link, nil
}

// endLink ends the incarnation's link once it stopped: as a killed
// process's would end (Link.Kill) when it stopped without draining, a
// crash, else with Close.
func endLink(link *Link, drain time.Duration) {
	if drain <= crashDrain && link.Kill != nil {
		_ = link.Kill()
		return
	}
	_ = link.Close()
}

// newRelay makes the incarnation's relay, woken by wake, and its
// observability when Config.MetricsAddr is set, for instance 0 only (nil
// otherwise); the caller closes obs's listener.
func (b *base) newRelay(in *Instance, db *database, link *Link, wake *store.LocalNotifier, drain time.Duration, log *slog.Logger) (*relay.Relay, *observability, error) {
	var obs *observability
	var err error
	if in.n == 0 {
		if obs, err = b.observe(db.serviceDB); err != nil {
			return nil, nil, fmt.Errorf("shop %s: %w", b.name, err)
		}
	}
	r, err := relay.New(db.relay, link.Publisher, relay.Config{
		Notifier: wake, PollInterval: relayPoll, LeaseDuration: relayLease, PublishTimeout: relayPublish,
		Backoff:         courier.Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Jitter: 0.2},
		ShutdownTimeout: drain, Logger: log, Observer: obs.relayObserver(),
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
// chaos decorator that duplicates and reorders deliveries and, when the
// link asks for it (Link.GiveBack), a handback that keeps what the
// consumer leaves unsettled.
//
// The consumer keeps each key's order (inbox.ConsumerConfig.KeepOrder)
// when the link asks for it (webhooks: a retry through the sender would
// hold back its every message to the endpoint) and whenever the
// subscriber shares the service's keys among its instances
// (broker.KeySharer: NATS and RabbitMQ with partitions, Kafka's consumer
// group). The saga needs no order to converge: it ignores replies that come
// late, twice or out of order. But a key's order across the instances is
// what sharing the keys is for, and it costs the shop little: a key is an
// order, which has one command in flight to a service at a time (two when
// a compensation follows a step that timed out), so a failing message
// retried in place holds back next to nothing, and other keys go on. The
// chaos decorator still reorders some deliveries inside an instance, on
// purpose, which the saga absorbs. Without shared keys (one durable
// consumer or queue for every instance), the order would hold inside each
// instance only, and the consumer retries through the broker as before.
func (b *base) newConsumer(db *database, link *Link, obs *observability, rec *recorder, inc incarnation, faults Faults, drain time.Duration, log *slog.Logger) (*inbox.Consumer[*sql.Tx], *Chaos, *handback, error) {
	sub := link.Subscriber
	var back *handback
	if link.GiveBack {
		back = newHandback(sub)
		sub = back
	}
	chaos := NewChaos(sub, ChaosConfig{Duplicate: faults.DuplicateRate, Reorder: faults.ReorderRate})
	ib, err := inbox.New(db.inbox, b.name)
	if err != nil {
		return nil, nil, nil, err
	}
	ccfg := inbox.ConsumerConfig{
		Concurrency: 8, KeepOrder: link.KeepOrder || broker.SharesKeys(link.Subscriber) || len(b.cfg.HoldKeys) > 0, MaxDeliveries: 25,
		Backoff:     courier.Backoff{Initial: 25 * time.Millisecond, Max: time.Second, Jitter: 0.2},
		ExtendEvery: 2 * time.Second, ReplayEvery: time.Second, ShutdownTimeout: drain, Logger: log,
		NewerVersionWait: b.cfg.NewerVersionWait, HoldKeys: b.cfg.HoldKeys, Group: b.cfg.Group,
	}
	var observers []inbox.Observer
	if obs != nil {
		observers = append(observers, obs.col.Consumer())
	}
	if rec != nil {
		observers = append(observers, rec.Recorder)
	}
	ccfg.Observer = inbox.Observers(append(observers, inc.observer)...)
	cons, err := inbox.NewConsumer(ib, chaos, db.ConsumerStore(), withFaults(b.Faults, inc.handler), ccfg)
	if err != nil {
		return nil, nil, nil, err
	}
	return cons, chaos, back, nil
}

// track makes Metrics count the running incarnation's totals as they grow;
// the function it returns, called when the incarnation has stopped, adds
// them to the finished incarnations' totals.
func (in *Instance) track(r *relay.Relay, cons *inbox.Consumer[*sql.Tx], chaos *Chaos) (stopped func()) {
	live := func() Metrics {
		rm := r.Metrics()
		return Metrics{Inbox: cons.Metrics(), Chaos: chaos.Stats(), Published: rm.Published, Runs: 1}
	}
	in.mu.Lock()
	in.current, in.chaos = live, chaos
	in.mu.Unlock()
	return func() {
		in.mu.Lock()
		in.past = in.past.add(live())
		in.current, in.chaos = nil, nil
		in.mu.Unlock()
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
