package shop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-go/courier/inbox"
)

// DemoConfig describes a demo run: the shop in one process, orders placed
// through its HTTP API with faults injected, then an audit. Zero fields take
// the defaults given.
type DemoConfig struct {
	// Databases, Transport, BrokerURL, Stream, SubjectPrefix: see
	// Options. Databases is required, and Transport or BrokerURL.
	Databases     Databases
	Transport     Transport
	BrokerURL     string
	Stream        string
	SubjectPrefix string
	// Instances is how many instances of each service run. Default
	// DefaultInstances.
	Instances int
	// Orders is how many orders to place. Default 1000.
	Orders int
	// Concurrency is how many POSTs are in flight at once. Default 16.
	Concurrency int
	// InFlight bounds the orders placed whose saga has not ended yet, so
	// that latency measures the saga rather than a queue. Default 50;
	// negative: no bound.
	InFlight int
	// Stock is the inventory's initial stock. Default DemoStock(Orders).
	Stock map[string]int
	// Faults are each service's faults, by service name.
	Faults map[string]Faults
	// ReplayRate is the probability that a placed order is POSTed again
	// with the same Idempotency-Key.
	ReplayRate float64
	// Crash names the service one instance of which (instance 0) is
	// crashed and restarted once half the orders are placed (and the
	// Deploy is done); empty for none.
	Crash string
	// Deploy deploys version 2 of ChargeRequested to the orders service
	// and payment once a third of the orders are placed (and payment
	// applied a version 1 request), in the order it names:
	// DeployConsumerFirst or DeployProducerFirst. The shop starts as it was
	// before version 2 (orders writes version 1, payment knows only version
	// 1); the last third of the orders waits until orders writes version 2.
	// Empty: no deploy, the shop knows version 2 throughout.
	Deploy string
	// DeployLate, with DeployProducerFirst, deploys payment only once a
	// version 2 request it could not handle waited NewerVersionWait and
	// was parked; otherwise payment is deployed as soon as one waits for
	// it. Either way the demo then replays what was parked as newer than
	// payment knew, as an operator would.
	DeployLate bool
	// NewerVersionWait is payment's (see Config). Default
	// DefaultLateNewerVersionWait with DeployLate, Courier's 15 minutes
	// otherwise.
	NewerVersionWait time.Duration
	// Group is every service's consumer's (see Config). Default: off.
	Group inbox.GroupConfig
	// Timeout bounds the wait for every saga to end. Default 3 minutes.
	Timeout time.Duration
	// Timeouts bound the saga's waits.
	Timeouts Timeouts
	// Progress, if set, receives a progress bar (carriage returns, one
	// line).
	Progress io.Writer
	// Logger receives the services' logs. Default: discard.
	Logger *slog.Logger
}

// DemoStock is the demo's default stock for n orders: four SKUs with
// plenty, and "vinyl" with about half of what its orders ask for, so that
// stock runs out during the run.
func DemoStock(n int) map[string]int {
	return map[string]int{"mug": 2 * n, "tee": 2 * n, "cap": 2 * n, "poster": 2 * n, "vinyl": max(n/5, 1)}
}

// Report is the outcome of a demo run.
type Report struct {
	// Config is the run's configuration, with defaults filled in.
	Config DemoConfig
	// Load is what the client did.
	Load LoadResult
	// Audit is what the databases say.
	Audit *Audit
	// Invariants are the audit's, with the entry's idempotency first.
	Invariants []Invariant
	// Metrics are each service's totals.
	Metrics map[string]Metrics
	// Instances are each service's instances, by number.
	Instances map[string][]InstanceReport
	// Sharing says how the instances of a service shared its messages
	// (Transport.Sharing).
	Sharing string
	// Crashes counts the crashes of each service's instances.
	Crashes map[string]int
	// Rollout is what the Deploy did; nil without one.
	Rollout *Rollout
	// Ignored counts saga events ignored as duplicate, late or out of
	// order; -1 when it could not be read.
	Ignored int
	// TimedOut is true when some sagas had not ended after Timeout.
	TimedOut bool
}

// OK reports whether every invariant holds.
func (r *Report) OK() bool {
	for _, inv := range r.Invariants {
		if !inv.OK {
			return false
		}
	}
	return true
}

// RunDemo runs the demo and returns its report. It fails only when the shop
// cannot run at all; broken invariants are in the report.
func RunDemo(ctx context.Context, cfg DemoConfig) (*Report, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	opts := Options{
		Databases: cfg.Databases, Transport: cfg.Transport, BrokerURL: cfg.BrokerURL, Stream: cfg.Stream, SubjectPrefix: cfg.SubjectPrefix,
		Instances: cfg.Instances, Faults: cfg.Faults, Stock: cfg.Stock, Timeouts: cfg.Timeouts, Logger: cfg.Logger, NewerVersionWait: cfg.NewerVersionWait,
		Group: cfg.Group,
	}
	if cfg.Deploy != "" {
		opts.ChargeVersion = 1 // the shop before version 2
	}
	cfg.Logger.Info("demo starting", "orders", cfg.Orders, "instances", cfg.Instances, "crash", cfg.Crash, "deploy", cfg.Deploy, "deploy_late", cfg.DeployLate)
	s, err := Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer s.Stop()
	ordersDB, err := openDB(ctx, cfg.Databases.Orders)
	if err != nil {
		return nil, err
	}
	defer ordersDB.Close()

	d := &demoRun{cfg: cfg, shop: s, ordersDB: ordersDB, switched: make(chan struct{})}
	if err := d.startLoad(ctx); err != nil {
		return nil, err
	}
	defer d.stopLoad()
	load, timedOut, err := d.waitForSagas(ctx)
	if err != nil {
		return nil, err
	}
	if d.deploy != nil && d.deploy.err != nil && !timedOut {
		return nil, fmt.Errorf("demo: deploy, %s: %w", cfg.Deploy, d.deploy.err)
	}
	return d.report(ctx, load, timedOut)
}

// setDefaults fills in the zero fields and checks Crash.
func (cfg *DemoConfig) setDefaults() error {
	if cfg.Orders <= 0 {
		cfg.Orders = 1000
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.Instances <= 0 {
		cfg.Instances = DefaultInstances
	}
	if cfg.InFlight == 0 {
		cfg.InFlight = 50
	}
	if cfg.Stock == nil {
		cfg.Stock = DemoStock(cfg.Orders)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 3 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Crash != "" && !slices.Contains(Services, cfg.Crash) {
		return fmt.Errorf("demo: cannot crash %q: name one of %v, or none", cfg.Crash, Services)
	}
	switch cfg.Deploy {
	case "", DeployConsumerFirst, DeployProducerFirst:
	default:
		return fmt.Errorf("demo: cannot deploy %q: use %q, %q or none", cfg.Deploy, DeployConsumerFirst, DeployProducerFirst)
	}
	if cfg.DeployLate && cfg.Deploy != DeployProducerFirst {
		return fmt.Errorf("demo: DeployLate deploys payment late, after the orders service: it needs Deploy %q", DeployProducerFirst)
	}
	if cfg.DeployLate && cfg.NewerVersionWait <= 0 {
		cfg.NewerVersionWait = DefaultLateNewerVersionWait
	}
	return nil
}

// demoRun is a demo under way: the shop, the orders' database its
// progress is read from, and the load placing orders in the background.
type demoRun struct {
	cfg      DemoConfig
	shop     *Shop
	ordersDB *serviceDB

	placed, ended atomic.Int64     // orders placed, sagas ended
	loaded        chan loadOutcome // the load's outcome, once it returned
	loadDone      atomic.Bool      // the load returned
	gated         atomic.Bool      // the load waits for switched
	switched      chan struct{}    // closed once the orders service writes version 2, or the Deploy returned
	switchOnce    sync.Once
	stopLoad      context.CancelFunc // ends the load (it ends by itself after cfg.Timeout)
	deploy        *deployRun         // the Deploy under way or done, nil before it began
}

// deployRun is the Deploy running in the background.
type deployRun struct {
	cancel context.CancelFunc
	done   chan struct{} // closed once it returned
	ro     *Rollout
	err    error
}

// deployFinished reports whether the Deploy returned, or was not asked for.
func (d *demoRun) deployFinished() bool {
	if d.cfg.Deploy == "" {
		return true
	}
	if d.deploy == nil {
		return false
	}
	select {
	case <-d.deploy.done:
		return true
	default:
		return false
	}
}

// startDeploy runs the Deploy in the background.
func (d *demoRun) startDeploy(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	dr := &deployRun{cancel: cancel, done: make(chan struct{})}
	d.deploy = dr
	go func() {
		defer close(dr.done)
		defer d.markSwitched()
		dr.ro, dr.err = d.rollout(ctx)
	}()
}

// markSwitched closes d.switched, once.
func (d *demoRun) markSwitched() { d.switchOnce.Do(func() { close(d.switched) }) }

// stopDeploy ends the Deploy, if one runs, and waits until it returned.
func (d *demoRun) stopDeploy() {
	if d.deploy != nil {
		d.deploy.cancel()
		<-d.deploy.done
	}
}

// loadOutcome is what Load.Run returned.
type loadOutcome struct {
	res LoadResult
	err error
}

// placedOne counts the orders placed, n so far. With a Deploy, the last
// third of them waits until the orders service writes version 2 (or ctx
// ends), so that some are placed after it however fast the others went.
func (d *demoRun) placedOne(ctx context.Context, n int) {
	d.placed.Store(int64(n))
	if d.cfg.Deploy == "" || n < 2*d.cfg.Orders/3 {
		return
	}
	d.gated.Store(true)
	select {
	case <-d.switched:
	case <-ctx.Done():
	}
}

// startLoad starts placing the orders, in a goroutine that sends its
// outcome to d.loaded; d.stopLoad stops it.
func (d *demoRun) startLoad(ctx context.Context) error {
	loadCtx, stop := context.WithTimeout(ctx, d.cfg.Timeout)
	skus := make([]string, 0, len(d.cfg.Stock))
	for sku := range d.cfg.Stock {
		skus = append(skus, sku)
	}
	slices.Sort(skus)
	load, err := NewLoad(LoadConfig{URL: d.shop.URL(), Orders: d.cfg.Orders, Concurrency: d.cfg.Concurrency, SKUs: skus,
		ReplayRate: d.cfg.ReplayRate, Placed: func(n int) { d.placedOne(loadCtx, n) },
		MaxInFlight: max(d.cfg.InFlight, 0), Ended: func() int { return int(d.ended.Load()) }})
	if err != nil {
		stop()
		return err
	}
	d.loaded, d.stopLoad = make(chan loadOutcome, 1), stop
	go func() {
		res, err := load.Run(loadCtx)
		d.loadDone.Store(true)
		d.loaded <- loadOutcome{res, err}
	}()
	return nil
}

// waitForSagas waits until the load has returned, the Deploy is done and
// the saga of every order the load placed has ended, or until cfg.Timeout
// passed (timedOut), drawing the progress bar, starting the Deploy once a
// third of the orders are placed and crashing cfg.Crash once half are and
// the Deploy is done. It returns what the load did.
func (d *demoRun) waitForSagas(ctx context.Context) (load LoadResult, timedOut bool, err error) {
	bar := newProgress(d.cfg.Progress, d.cfg.Orders)
	crashed := d.cfg.Crash == ""
	deadline := time.Now().Add(d.cfg.Timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	defer d.stopDeploy()
	var loadDone *loadOutcome
	for {
		n, err := countEnded(ctx, d.ordersDB)
		if err != nil && ctx.Err() == nil {
			d.cfg.Logger.Warn("count ended orders", "error", err)
		}
		d.ended.Store(int64(n))
		bar.draw(int(d.placed.Load()), n)
		placed := d.placed.Load()
		if d.cfg.Deploy != "" && d.deploy == nil &&
			((placed >= int64(max(d.cfg.Orders/3, 1)) && d.shop.Payment.Metrics().Charges.V1 > 0) || loadDone != nil) {
			d.startDeploy(ctx) // once payment applied version 1
		}
		deployed := d.deployFinished()
		if !crashed && deployed && placed >= int64(d.cfg.Orders/2) {
			crashed = true
			if err := d.shop.Restart(d.cfg.Crash); err != nil {
				return LoadResult{}, false, err
			}
		}
		if loadDone != nil && deployed && n >= len(loadDone.res.Orders) {
			break
		}
		if time.Now().After(deadline) {
			timedOut = true
			break
		}
		select {
		case <-ctx.Done():
			bar.done()
			d.stopLoad()
			<-d.loaded
			return LoadResult{}, false, ctx.Err()
		case out := <-d.loaded:
			loadDone = &out
			if out.err != nil && !errors.Is(out.err, context.DeadlineExceeded) {
				bar.done()
				return LoadResult{}, false, fmt.Errorf("demo: placing orders: %w", out.err)
			}
		case <-tick.C:
		}
	}
	bar.done()
	if loadDone == nil {
		d.stopLoad()
		out := <-d.loaded
		loadDone = &out
	}
	return loadDone.res, timedOut, nil
}

// InstanceReport is what one instance of a service did in a demo.
type InstanceReport struct {
	// Metrics are the instance's totals over its incarnations (Charges
	// left out: they are the service's).
	Metrics Metrics
	// Partitions are the partitions of the service's topic the instance
	// consumed at the end of the run, when the instances shared the keys
	// by partition; nil otherwise.
	Partitions []int
}

// report collects the services' totals, stops the shop and audits it.
func (d *demoRun) report(ctx context.Context, load LoadResult, timedOut bool) (*Report, error) {
	rep := &Report{Config: d.cfg, Load: load, Ignored: -1, TimedOut: timedOut, Sharing: d.shop.opts.Transport.Sharing(),
		Metrics: map[string]Metrics{}, Instances: map[string][]InstanceReport{}}
	for _, svc := range d.shop.Services() {
		rep.Metrics[svc.Name()] = svc.Metrics()
		for _, in := range svc.Instances() {
			rep.Instances[svc.Name()] = append(rep.Instances[svc.Name()], InstanceReport{Metrics: in.Metrics(), Partitions: in.Partitions()})
		}
	}
	rep.Crashes = d.shop.Crashes()
	if d.deploy != nil {
		rep.Rollout = d.deploy.ro
		if rep.Rollout != nil {
			rep.Rollout.Charges = rep.Metrics[Payment].Charges
		}
	}
	d.shop.Stop()
	var err error
	if rep.Audit, err = AuditShop(ctx, d.cfg.Databases); err != nil {
		return nil, err
	}
	if n, err := countIgnored(ctx, d.ordersDB); err == nil {
		rep.Ignored = n
	}
	rep.Invariants = append([]Invariant{entryInvariant(rep.Load, rep.Audit)}, rep.Audit.Invariants...)
	return rep, nil
}

// entryInvariant checks the entry point's idempotency: one order per key,
// and every replay answered with the first response.
func entryInvariant(l LoadResult, a *Audit) Invariant {
	ids := map[string]bool{}
	for _, o := range l.Orders {
		ids[o.ID] = true
	}
	ok := len(ids) == len(l.Orders) && a.Orders == len(l.Orders) && l.ReplayMismatches == 0
	return Invariant{Name: "one order per Idempotency-Key", OK: ok,
		Detail: fmt.Sprintf("%d keys, %d distinct order ids, %d orders stored; %d replayed responses, %d of them for another order",
			len(l.Orders), len(ids), a.Orders, l.Replays, l.ReplayMismatches)}
}

func countEnded(ctx context.Context, db *serviceDB) (int, error) {
	var n int
	err := db.sql.QueryRowContext(ctx, db.q(`SELECT COUNT(*) FROM shop_orders WHERE status <> ?`), StatusOpen).Scan(&n)
	return n, err
}

// countIgnored counts the saga events recorded as ignored, from Courier's
// saga history table.
func countIgnored(ctx context.Context, db *serviceDB) (int, error) {
	var n int
	err := db.sql.QueryRowContext(ctx, db.q(`SELECT COUNT(*) FROM courier_saga_history WHERE outcome = ?`), "ignored").Scan(&n)
	return n, err
}

// progress draws a progress bar: redrawn in place on a terminal, a line
// every few seconds elsewhere (a log, a CI run).
type progress struct {
	w        io.Writer
	total    int
	start    time.Time
	terminal bool
	drawn    time.Time
	last     string
}

func newProgress(w io.Writer, total int) *progress {
	p := &progress{w: w, total: total, start: time.Now()}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.terminal = true
		}
	}
	return p
}

func (p *progress) draw(placed, ended int) {
	if p.w == nil {
		return
	}
	if !p.terminal && time.Since(p.drawn) < 2*time.Second && ended < p.total {
		return
	}
	const width = 30
	filled := 0
	if p.total > 0 {
		filled = min(width, ended*width/p.total)
	}
	bar := make([]byte, width)
	for i := range bar {
		switch {
		case i < filled:
			bar[i] = '#'
		case p.total > 0 && i < placed*width/p.total:
			bar[i] = '-'
		default:
			bar[i] = '.'
		}
	}
	line := fmt.Sprintf("[%s] %s/%d placed, %s ended  %5.1fs", bar, pad(placed, p.total), p.total, pad(ended, p.total),
		time.Since(p.start).Seconds())
	if line[:len(line)-8] == p.last { // nothing moved but the clock
		if !p.terminal {
			return
		}
	}
	p.last = line[:len(line)-8]
	if p.terminal {
		fmt.Fprintf(p.w, "\r%s ", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
	p.drawn = time.Now()
}

func (p *progress) done() {
	if p.w != nil && p.terminal && !p.drawn.IsZero() {
		fmt.Fprintln(p.w)
	}
}

func pad(n, total int) string {
	return fmt.Sprintf("%*d", len(strconv.Itoa(total)), n)
}
