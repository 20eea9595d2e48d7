package shop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/store/dburl"
)

// Databases names each service's database (see Config.DatabaseURL).
type Databases struct {
	Orders, Payment, Inventory, Shipping string
}

// URL returns the database URL of service.
func (d Databases) URL(service string) string {
	switch service {
	case Orders:
		return d.Orders
	case Payment:
		return d.Payment
	case Inventory:
		return d.Inventory
	case Shipping:
		return d.Shipping
	}
	return ""
}

// SQLiteDatabases puts each service's database in a SQLite file of its own
// in dir: orders.db, payment.db, inventory.db, shipping.db.
func SQLiteDatabases(dir string) Databases {
	f := func(s string) string { return filepath.Join(dir, s+".db") }
	return Databases{Orders: f(Orders), Payment: f(Payment), Inventory: f(Inventory), Shipping: f(Shipping)}
}

// PostgresDatabases gives each service a schema of its own, prefix_orders
// and so on, in the database of the postgres:// URL base.
func PostgresDatabases(base, prefix string) (Databases, error) {
	var d Databases
	for _, s := range []struct {
		name string
		dst  *string
	}{{Orders, &d.Orders}, {Payment, &d.Payment}, {Inventory, &d.Inventory}, {Shipping, &d.Shipping}} {
		u, err := dburl.WithSchema(base, prefix+"_"+s.name)
		if err != nil {
			return Databases{}, err
		}
		*s.dst = u
	}
	return d, nil
}

// Mark is the shop's mark on what it creates outside files: the comment of
// the PostgreSQL schemas Databases.Create makes, the description of the
// NATS streams a NATSTransport makes. It tells them from others' schemas
// and streams of the same names, which the shop never drops nor deletes.
const Mark = "Courier's reference shop (courier demo): dropped by its next run"

// Foreign returns the PostgreSQL schemas of d that exist without the
// shop's Mark: the shop did not create them, and Drop leaves them alone.
func (d Databases) Foreign(ctx context.Context) ([]string, error) {
	var foreign []string
	for _, s := range Services {
		exists, marked, err := dburl.SchemaMarked(ctx, d.URL(s), Mark)
		if err != nil {
			return nil, err
		}
		if exists && !marked {
			schema, err := dburl.Schema(d.URL(s))
			if err != nil {
				return nil, err
			}
			foreign = append(foreign, schema)
		}
	}
	return foreign, nil
}

// Create creates the PostgreSQL schemas of d that are missing, with the
// shop's Mark; it leaves existing schemas and SQLite files alone.
func (d Databases) Create(ctx context.Context) error {
	for _, s := range Services {
		if _, err := dburl.CreateSchema(ctx, d.URL(s), Mark); err != nil {
			return err
		}
	}
	return nil
}

// Drop drops the PostgreSQL schemas of d that carry the shop's Mark, with
// everything in them; it leaves other schemas (see Foreign) and SQLite
// files alone.
func (d Databases) Drop(ctx context.Context) error {
	var errs []error
	for _, s := range Services {
		_, err := dburl.DropMarkedSchema(ctx, d.URL(s), Mark)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DefaultInstances is how many instances of each service Start runs.
const DefaultInstances = 2

// DefaultKeyPartitions is the number of partitions over which the
// instances of a service share its keys on NATS and RabbitMQ, in the
// in-process shop (Start's NATS transport, courier demo).
const DefaultKeyPartitions = 8

// Options configure the whole shop run in one process by Start.
type Options struct {
	// Databases are the services' databases. Required.
	Databases Databases
	// Transport carries the services' messages; Start sets it up. The
	// caller closes it once the shop stopped. Default: a NATSTransport on
	// BrokerURL, Stream and SubjectPrefix, whose instances share each
	// service's keys over DefaultKeyPartitions partitions when Instances is
	// more than 1.
	Transport Transport
	// BrokerURL, Stream and SubjectPrefix: see Config. Ignored when
	// Transport is set.
	BrokerURL     string
	Stream        string
	SubjectPrefix string
	// Instances is how many instances of each service run (see
	// Service.Instance). Default DefaultInstances.
	Instances int
	// Faults are each service's faults, by service name.
	Faults map[string]Faults
	// Stock is the inventory's initial stock.
	Stock map[string]int
	// Timeouts bound the saga's waits.
	Timeouts Timeouts
	// DeadlineEvery: see OrdersConfig. Default 500ms.
	DeadlineEvery time.Duration
	// HTTPAddr is where the orders API listens: a load balancer over the
	// orders instances, each on a free port of the same host. Default
	// 127.0.0.1:0, a free port (see Shop.URL).
	HTTPAddr string
	// RestartDelay is how long a crashed instance stays down before it is
	// started again. Default 200ms.
	RestartDelay time.Duration
	// ChargeVersion is the version of ChargeRequested the orders service
	// and payment start with (Config.ChargeVersion); Deploy changes it
	// service by service. Default ChargeVersion, the newest.
	ChargeVersion int
	// NewerVersionWait: see Config. Default: Courier's, 15 minutes.
	NewerVersionWait time.Duration
	// Group: see Config. Default: off.
	Group inbox.GroupConfig
	// Logger receives every service's logs. Default: discard.
	Logger *slog.Logger
}

// Shop is the four services running in one process, each as
// Options.Instances instances on its own database, talking to the others
// only through the broker; the orders API is a load balancer over the
// orders instances. An instance stops as a killed process would: its
// contexts are cancelled and nothing is drained, so Restart is a crash and
// a restart on the same database.
type Shop struct {
	Orders    *OrdersService
	Payment   *PaymentService
	Inventory *InventoryService
	Shipping  *ShippingService

	opts Options
	log  *slog.Logger
	api  *balancerServer

	mu      sync.Mutex
	running map[instanceKey]*run
	crashes map[string]int
	deploys map[string]int
}

// instanceKey names an instance of a service.
type instanceKey struct {
	service string
	n       int
}

// run is one instance's restart loop.
type run struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Start starts the four services, Options.Instances instances each, and
// returns once all of them serve. Stop them with Stop.
func Start(ctx context.Context, opts Options) (*Shop, error) {
	if opts.HTTPAddr == "" {
		opts.HTTPAddr = "127.0.0.1:0"
	}
	if opts.RestartDelay <= 0 {
		opts.RestartDelay = 200 * time.Millisecond
	}
	if opts.Instances <= 0 {
		opts.Instances = DefaultInstances
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Transport == nil {
		t, err := natsTransport(opts.BrokerURL, opts.Stream, opts.SubjectPrefix)
		if err != nil {
			return nil, fmt.Errorf("shop: %w", err)
		}
		if opts.Instances > 1 {
			t.Partitions = DefaultKeyPartitions
		}
		opts.Transport = t
	}
	if err := opts.Transport.Setup(ctx); err != nil {
		return nil, fmt.Errorf("shop: set up %s: %w", opts.Transport, err)
	}
	s := &Shop{opts: opts, log: opts.Logger, running: map[instanceKey]*run{}, crashes: map[string]int{}, deploys: map[string]int{}}
	if err := s.newServices(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", opts.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("shop: orders API: %w", err)
	}
	s.api = serveBalancer(ln, newBalancer(s.Orders.URLs))
	failed := make(chan error, len(Services)*opts.Instances)
	for _, svc := range s.Services() {
		for i := range opts.Instances {
			s.start(svc.Instance(i), svc, failed)
		}
	}
	for _, svc := range s.Services() {
		for i := range opts.Instances {
			select {
			case <-svc.Instance(i).Started():
			case err := <-failed:
				s.Stop()
				return nil, err
			case <-ctx.Done():
				s.Stop()
				return nil, ctx.Err()
			}
		}
	}
	return s, nil
}

// newServices makes the four services; the orders instances listen on
// free ports of the API's host, behind its balancer.
func (s *Shop) newServices() error {
	opts := s.opts
	cfg := func(service string) Config {
		return Config{
			DatabaseURL: opts.Databases.URL(service), Transport: opts.Transport,
			Faults: opts.Faults[service], Drain: crashDrain, Logger: opts.Logger,
			ChargeVersion: opts.ChargeVersion, NewerVersionWait: opts.NewerVersionWait, Group: opts.Group,
		}
	}
	host, _, err := net.SplitHostPort(opts.HTTPAddr)
	if err != nil {
		return fmt.Errorf("shop: Options.HTTPAddr %q: %w", opts.HTTPAddr, err)
	}
	if s.Orders, err = NewOrders(OrdersConfig{Config: cfg(Orders), HTTPAddr: net.JoinHostPort(host, "0"), Timeouts: opts.Timeouts, DeadlineEvery: opts.DeadlineEvery}); err != nil {
		return err
	}
	if s.Payment, err = NewPayment(cfg(Payment)); err != nil {
		return err
	}
	if s.Inventory, err = NewInventory(InventoryConfig{Config: cfg(Inventory), Stock: opts.Stock}); err != nil {
		return err
	}
	s.Shipping, err = NewShipping(cfg(Shipping))
	return err
}

// Services returns the four services, in the order the saga visits them.
func (s *Shop) Services() []Service {
	return []Service{s.Orders, s.Payment, s.Inventory, s.Shipping}
}

// Service returns the service called name, or nil.
func (s *Shop) Service(name string) Service {
	for _, svc := range s.Services() {
		if svc.Name() == name {
			return svc
		}
	}
	return nil
}

// Instances returns how many instances of each service run.
func (s *Shop) Instances() int { return s.opts.Instances }

// URL returns the orders API's base URL: its load balancer's.
func (s *Shop) URL() string { return "http://" + s.api.addr }

// start runs instance in of svc until Stop or Restart: an incarnation that
// crashes (Faults.CrashAfter) is started again after RestartDelay, without
// the crash; one that fails before the instance served once reports to
// failed.
func (s *Shop) start(in *Instance, svc Service, failed chan<- error) {
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	s.running[instanceKey{svc.Name(), in.Number()}] = r
	s.mu.Unlock()
	go func() {
		defer close(r.done)
		for {
			err := in.Run(ctx)
			if ctx.Err() != nil {
				return
			}
			select {
			case <-in.Started():
			default:
				failed <- err
				return
			}
			if errors.Is(err, ErrCrashed) {
				s.mu.Lock()
				s.crashes[svc.Name()]++
				s.mu.Unlock()
				faults := svc.Faults()
				faults.CrashAfter = 0
				svc.SetFaults(faults)
			}
			s.log.Warn("service instance down; restarting it", "service", svc.Name(), "instance", in.Number(), "error", err, "in", s.opts.RestartDelay)
			if !sleep(ctx, s.opts.RestartDelay) {
				return
			}
		}
	}()
}

// Restart crashes instance 0 of the service called name (its contexts are
// cancelled, nothing is drained) and starts it again on the same database;
// the service's other instances go on meanwhile.
func (s *Shop) Restart(name string) error { return s.RestartInstance(name, 0) }

// RestartInstance crashes instance i of the service called name and starts
// it again on the same database, as Restart does.
func (s *Shop) RestartInstance(name string, i int) error {
	svc, err := s.stop(name, i)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.crashes[name]++
	s.mu.Unlock()
	s.log.Warn("service instance crashed on purpose; restarting it", "service", name, "instance", i, "in", s.opts.RestartDelay)
	time.Sleep(s.opts.RestartDelay)
	s.start(svc.Instance(i), svc, make(chan error, 1))
	return nil
}

// Deploy replaces the service called name with its build of version
// chargeVersion of ChargeRequested (see Config.ChargeVersion), as a deploy
// would: it stops every instance of the service as Restart does (all at
// once: a deploy that recreates the service rather than rolls over it, so
// that no instance of the old build runs beside one of the new), calls
// whileDown (unless nil) while the service is down, and starts its
// instances again on the same database. whileDown's error is returned, the
// service started all the same.
func (s *Shop) Deploy(name string, chargeVersion int, whileDown func() error) error {
	if err := checkChargeVersion(chargeVersion); err != nil {
		return fmt.Errorf("shop: deploy %s: %w", name, err)
	}
	svc, err := s.stop(name, -1)
	if err != nil {
		return err
	}
	s.log.Warn("service stopped for a deploy", "service", name, "charge_version", chargeVersion)
	if whileDown != nil {
		err = whileDown()
	}
	if serr := svc.SetChargeVersion(chargeVersion); serr != nil {
		err = errors.Join(err, serr)
	}
	s.mu.Lock()
	s.deploys[name]++
	s.mu.Unlock()
	for i := range s.opts.Instances {
		s.start(svc.Instance(i), svc, make(chan error, 1))
	}
	return err
}

// stop stops instance i of the service called name (every instance when i
// is negative), as a crash would, and returns the service.
func (s *Shop) stop(name string, i int) (Service, error) {
	svc := s.Service(name)
	if svc == nil {
		return nil, fmt.Errorf("shop: no service %q: use one of %v", name, Services)
	}
	if i >= s.opts.Instances {
		return nil, fmt.Errorf("shop: %s has no instance %d: it runs instances 0 to %d", name, i, s.opts.Instances-1)
	}
	var runs []*run
	s.mu.Lock()
	for k, r := range s.running {
		if k.service == name && (i < 0 || k.n == i) {
			runs = append(runs, r)
		}
	}
	s.mu.Unlock()
	for _, r := range runs {
		r.cancel()
	}
	for _, r := range runs {
		<-r.done
	}
	return svc, nil
}

// Deploys returns how many times each service was deployed (Deploy).
func (s *Shop) Deploys() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.deploys)
}

// Crashes returns how many times an instance of each service crashed and
// was restarted.
func (s *Shop) Crashes() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.crashes)
}

// Stop stops every instance and the orders API's balancer, and waits until
// they stopped. Later calls do nothing.
func (s *Shop) Stop() {
	s.mu.Lock()
	runs := make([]*run, 0, len(s.running))
	for _, r := range s.running {
		runs = append(runs, r)
	}
	s.running = map[instanceKey]*run{}
	s.mu.Unlock()
	for _, r := range runs {
		r.cancel()
	}
	for _, r := range runs {
		<-r.done
	}
	if s.api != nil {
		_ = s.api.stop()
	}
}
