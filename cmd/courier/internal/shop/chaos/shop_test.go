package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/cmd/courier/internal/shop"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/postgres"
)

// Settings of role shop, one service of the reference shop (see
// runShopService); envPG, envNATS, envStream and envPrefix say where it
// works.
const (
	envService = "COURIER_CHAOS_SERVICE" // orders, payment, inventory or shipping
	envHTTP    = "COURIER_CHAOS_HTTP"    // orders: the API's address
	envStep    = "COURIER_CHAOS_STEP"    // orders: the saga's step timeout
	envFaults  = "COURIER_CHAOS_FAULTS"  // shop.Faults, as JSON
	envStock   = "COURIER_CHAOS_STOCK"   // inventory: initial stock, as JSON
	envMetrics = "COURIER_CHAOS_METRICS" // directory for the service's metrics
)

// relayPause is how long a paused service stays stopped: past the shop's
// relay lease and ack wait (5s each), so its leases expire and the broker
// redelivers what it held.
const relayPause = 6500 * time.Millisecond

// stepTimeout bounds the wait for each saga step's reply: short enough that
// a service paused or killed now and then makes a step time out, so that
// compensations of steps whose reply comes late, and the late replies, are
// exercised too.
const stepTimeout = 5 * time.Second

// runShopService runs one service of the shop until SIGTERM, as `courier
// shop SERVICE` does, and keeps its metrics in a file of its own, for the
// test to add up over every incarnation.
func runShopService(ctx context.Context, log *slog.Logger) error {
	var faults shop.Faults
	if err := json.Unmarshal([]byte(os.Getenv(envFaults)), &faults); err != nil {
		return fmt.Errorf("%s: %w", envFaults, err)
	}
	cfg := shop.Config{
		DatabaseURL: os.Getenv(envPG), BrokerURL: os.Getenv(envNATS), Stream: os.Getenv(envStream),
		SubjectPrefix: os.Getenv(envPrefix), Faults: faults, Logger: log,
	}
	var svc shop.Service
	var err error
	switch name := os.Getenv(envService); name {
	case shop.Orders:
		step, perr := time.ParseDuration(os.Getenv(envStep))
		if perr != nil {
			return fmt.Errorf("%s: %w", envStep, perr)
		}
		svc, err = shop.NewOrders(shop.OrdersConfig{Config: cfg, HTTPAddr: os.Getenv(envHTTP), Timeouts: shop.Timeouts{Step: step}})
	case shop.Payment:
		svc, err = shop.NewPayment(cfg)
	case shop.Inventory:
		var stock map[string]int
		if err := json.Unmarshal([]byte(os.Getenv(envStock)), &stock); err != nil {
			return fmt.Errorf("%s: %w", envStock, err)
		}
		svc, err = shop.NewInventory(shop.InventoryConfig{Config: cfg, Stock: stock})
	case shop.Shipping:
		svc, err = shop.NewShipping(cfg)
	default:
		return fmt.Errorf("%s=%q: name one of %v", envService, name, shop.Services)
	}
	if err != nil {
		return err
	}
	file := filepath.Join(os.Getenv(envMetrics), fmt.Sprintf("%s.%d.json", svc.Name(), os.Getpid()))
	save := func() {
		b, _ := json.Marshal(svc.Metrics())
		if os.WriteFile(file+".tmp", b, 0o644) == nil {
			_ = os.Rename(file+".tmp", file)
		}
	}
	stopSaving := testenv.Every(250*time.Millisecond, save)
	err = svc.Run(ctx)
	stopSaving()
	save()
	return err
}

// shopSettings of one run.
type shopSettings struct {
	orders   int           // placed over HTTP, spread over most of the faults
	chaosFor time.Duration // of faults
	settle   time.Duration // bound on the wait for every saga to end once the faults stopped
}

func (s shopSettings) String() string {
	return fmt.Sprintf("%d orders, %s of faults, %s to settle", s.orders, s.chaosFor, s.settle)
}

// TestShopUnderProcessKills runs the reference shop's four services as
// processes of their own, on PostgreSQL schemas and a NATS server that is a
// process too, with the shop's own faults on (declines, failing handlers,
// duplicated and reordered deliveries, failed shipments, exhausted stock,
// steps timing out). While orders are placed over HTTP, with Idempotency-Keys, the test kills
// services and NATS with SIGKILL, terminates the services' database
// sessions and pauses services past their relay lease. Then every saga must
// end and the audit of the four databases hold: no double charge, every
// refund matching a charge, stock conserved, one order per key, effects
// matching outcomes, no dead letters. The report lists what was checked and
// what the run absorbed; a failure shows the end of each process's log.
func TestShopUnderProcessKills(t *testing.T) {
	t.Parallel()
	s := shopSettings{orders: 250, chaosFor: 25 * time.Second, settle: 90 * time.Second}
	if testenv.Long() {
		s = shopSettings{orders: 5000, chaosFor: 4 * time.Minute, settle: 5 * time.Minute}
	}
	t.Logf("shop run: %s", s)
	ctx := context.Background()
	r := newShopRun(t, s)
	defer r.logOnFailure()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopAll := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopAll()
	r.natsProc.Supervise(t, stop, &wg)
	time.Sleep(500 * time.Millisecond)
	for _, p := range r.services {
		p.Supervise(t, stop, &wg)
	}
	stopSampling := r.sample()
	defer stopSampling()

	// Orders are placed in batches spread over most of the faults; a POST
	// that finds the orders service down or stopped is sent again with the
	// same key.
	skus := slices.Sorted(maps.Keys(r.stock))
	var placed atomic.Int64
	loadCtx, stopLoad := context.WithTimeout(ctx, s.chaosFor+s.settle)
	defer stopLoad()
	loaded := placeOrders(loadCtx, "http://"+r.httpAddr, s, skus, &placed)

	faults := runShopFaults(t, ctx, s, r.admin, r.name, r.natsProc, r.services)
	t.Logf("faults: %v", faults)

	// Every order placed, every saga ended, every outbox empty.
	faultsEnded := time.Now()
	deadline := faultsEnded.Add(s.settle)
	var res shop.LoadResult
	select {
	case out := <-loaded:
		res = out.res
		if out.err != nil {
			t.Fatalf("placing orders: %v (%d placed)", out.err, len(res.Orders))
		}
	case <-time.After(time.Until(deadline)):
		t.Fatalf("only %d of %d orders placed %s after the faults stopped", placed.Load(), s.orders, s.settle)
	}
	pools := r.pools(ctx)
	r.waitSettled(ctx, pools, len(res.Orders), faultsEnded)
	stopAll()
	stopSampling()
	r.audit(ctx, pools, res)
}

// shopRun is one run of TestShopUnderProcessKills: the shop's databases
// and its processes, each logging to a file of the run's directory.
type shopRun struct {
	t               *testing.T
	s               shopSettings
	name            string // of the run: its databases' prefix and sessions' application_name
	dbs             shop.Databases
	admin           *pgxpool.Pool
	dir, metricsDir string
	httpAddr        string // the orders API's
	stock           map[string]int
	natsProc        *testenv.Proc
	services, all   []*testenv.Proc
}

// newShopRun makes the run's databases and describes its processes, which
// it does not start: NATS, and the shop's four services with the shop's
// own faults on.
func newShopRun(t *testing.T, s shopSettings) *shopRun {
	ctx := context.Background()
	base := testenv.Need(t, testenv.EnvPostgres)
	r := &shopRun{t: t, s: s, name: testenv.Name("chaos_shop_"), dir: t.TempDir()}
	var err error
	r.dbs, err = shop.PostgresDatabases(base, r.name)
	testenv.Must(t, err, "databases")
	// Made with the shop's mark, so that Drop drops them.
	testenv.Must(t, r.dbs.Create(context.Background()), "create schemas")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.dbs.Drop(ctx); err != nil {
			t.Logf("drop schemas: %v", err)
		}
	})
	r.admin, err = pgxpool.New(ctx, base)
	testenv.Must(t, err, "connect to "+testenv.EnvPostgres)
	t.Cleanup(r.admin.Close)

	r.metricsDir = filepath.Join(r.dir, "metrics")
	testenv.Must(t, os.Mkdir(r.metricsDir, 0o755), "metrics directory")
	port := testenv.FreePort(t)
	r.httpAddr = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	r.stock = shop.DemoStock(s.orders) // vinyl runs out: some orders are cancelled for want of stock
	r.natsProc = &testenv.Proc{Name: "nats", Stderr: r.logFile("nats"),
		Env: []string{envRole + "=nats", envDir + "=" + filepath.Join(r.dir, "nats"), envPort + "=" + strconv.Itoa(port)}}
	r.describeServices(fmt.Sprintf("nats://127.0.0.1:%d", port), testenv.Name("SHOP"))
	r.all = append([]*testenv.Proc{r.natsProc}, r.services...)
	return r
}

// describeServices describes the shop's four services, on the NATS server
// at natsURL and stream, each with the shop's faults: failures, duplicates
// and reordered deliveries everywhere, declined payments and failed
// shipments.
func (r *shopRun) describeServices(natsURL, stream string) {
	stockJSON, _ := json.Marshal(r.stock)
	chaos := shop.Faults{FailureRate: 0.03, DuplicateRate: 0.03, ReorderRate: 0.03}
	faultsOf := map[string]shop.Faults{shop.Orders: chaos, shop.Payment: chaos, shop.Inventory: chaos, shop.Shipping: chaos}
	payment, shipping := chaos, chaos
	payment.DeclineRate, shipping.ShipmentFailureRate = 0.05, 0.05
	faultsOf[shop.Payment], faultsOf[shop.Shipping] = payment, shipping
	for _, svc := range shop.Services {
		faults, _ := json.Marshal(faultsOf[svc])
		env := []string{envRole + "=shop", envService + "=" + svc,
			envPG + "=" + r.dbs.URL(svc) + "&application_name=" + r.name + "_" + svc,
			envNATS + "=" + natsURL, envStream + "=" + stream, envPrefix + "=" + strings.ToLower(stream) + ".",
			envFaults + "=" + string(faults), envMetrics + "=" + r.metricsDir}
		switch svc {
		case shop.Orders:
			env = append(env, envHTTP+"="+r.httpAddr, envStep+"="+stepTimeout.String())
		case shop.Inventory:
			env = append(env, envStock+"="+string(stockJSON))
		}
		r.services = append(r.services, &testenv.Proc{Name: svc, Env: env, Stderr: r.logFile(svc)})
	}
}

// logFile opens the log file of the process name, closed when the test
// ends.
func (r *shopRun) logFile(name string) *os.File {
	f, err := os.OpenFile(filepath.Join(r.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	testenv.Must(r.t, err, "log file")
	r.t.Cleanup(func() { f.Close() })
	return f
}

// logOnFailure shows the end of each process's log when the test failed.
func (r *shopRun) logOnFailure() {
	if r.t.Failed() {
		for _, p := range r.all {
			r.t.Logf("last lines of %s's log:\n%s", p.Name, tail(filepath.Join(r.dir, p.Name+".log"), 40))
		}
	}
}

// sample samples each process's memory every half second until the
// returned function is called; it may be called more than once.
func (r *shopRun) sample() (stop func()) {
	return testenv.Every(500*time.Millisecond, func() {
		for _, p := range r.all {
			p.Sample()
		}
	})
}

// pools connects to each service's schema.
func (r *shopRun) pools(ctx context.Context) map[string]*pgxpool.Pool {
	pools := map[string]*pgxpool.Pool{}
	for _, svc := range shop.Services {
		pool, err := pgxpool.New(ctx, r.dbs.URL(svc))
		testenv.Must(r.t, err, "connect to "+svc+"'s schema")
		r.t.Cleanup(pool.Close)
		pools[svc] = pool
	}
	return pools
}

// waitSettled waits until the orders service stored every one of the
// orders placed and none is open, and every outbox is empty; it fails the
// test if that is not so the run's settle time after faultsEnded.
func (r *shopRun) waitSettled(ctx context.Context, pools map[string]*pgxpool.Pool, orders int, faultsEnded time.Time) {
	t := r.t
	deadline := faultsEnded.Add(r.s.settle)
	var stored, open int
	pending := map[string]int64{}
	settled := false
	for !settled {
		_ = pools[shop.Orders].QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = $1) FROM shop_orders`, shop.StatusOpen).Scan(&stored, &open)
		settled = stored >= orders && open == 0
		for _, svc := range shop.Services {
			st, err := postgres.Admin(pools[svc]).Stats(ctx)
			if err != nil {
				st.Pending = -1
			}
			pending[svc] = st.Pending
			settled = settled && st.Pending == 0
		}
		if !settled && time.Now().After(deadline) {
			t.Errorf("not settled %s after the faults stopped: %d orders stored, %d of them still open; messages in the outboxes: %v",
				r.s.settle, stored, open, pending)
			logOpenOrders(t, ctx, pools[shop.Orders], "http://"+r.httpAddr)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("settled %s after the faults stopped", time.Since(faultsEnded).Round(time.Millisecond))
}

// audit audits the shop's databases once every process stopped, logs the
// report and fails the test on each invariant that does not hold, on data
// races and when no order completed or none was cancelled.
func (r *shopRun) audit(ctx context.Context, pools map[string]*pgxpool.Pool, res shop.LoadResult) {
	t := r.t
	a, err := shop.AuditShop(ctx, r.dbs)
	testenv.Must(t, err, "audit")
	rep := &shop.Report{Load: res, Audit: a, Metrics: readShopMetrics(t, r.metricsDir), Crashes: map[string]int{}, Ignored: -1}
	for _, p := range r.services {
		rep.Crashes[p.Name] = p.Runs() - 1
	}
	_ = pools[shop.Orders].QueryRow(ctx, `SELECT count(*) FROM courier_saga_history WHERE outcome = 'ignored'`).Scan(&rep.Ignored)
	rep.Invariants = append([]shop.Invariant{entryInvariant(t, ctx, pools[shop.Orders], res, a)}, a.Invariants...)
	rep.Invariants = append(rep.Invariants, deadLetterInvariant(t, ctx, pools))
	var b strings.Builder
	_, _ = rep.WriteTo(&b)
	t.Log(b.String())
	for _, inv := range rep.Invariants {
		if !inv.OK {
			t.Errorf("invariant %q does not hold: %s", inv.Name, inv.Detail)
		}
	}
	if a.ByState[shop.StateShippingReady] == 0 || a.ByState[shop.StateCancelled] == 0 {
		t.Errorf("orders by state %v: want some completed and some cancelled", a.ByState)
	}
	for _, p := range r.all {
		log := readFile(filepath.Join(r.dir, p.Name+".log"))
		if i := strings.Index(log, "WARNING: DATA RACE"); i >= 0 {
			report, _, _ := strings.Cut(log[i:], "\n==================")
			t.Errorf("%s: the race detector reported %d data races; the first:\n%s", p.Name, strings.Count(log, "WARNING: DATA RACE"), report)
		}
		t.Logf("%-10s %2d runs, peak RSS %6.1f MiB", p.Name, p.Runs(), float64(p.PeakKiB())/1024)
	}
	for _, p := range r.all {
		if exits := exitReasons(filepath.Join(r.dir, p.Name+".log")); len(exits) > 0 {
			t.Logf("%s exited by itself (then restarted): %v", p.Name, exits)
		}
	}
}

// loadOutcome is what placeOrders did.
type loadOutcome struct {
	res shop.LoadResult
	err error
}

// placeOrders places s.orders orders through the API at url in batches of
// the shop's load, spread over four fifths of s.chaosFor, some POSTed twice
// with the same key; placed counts them as they go.
func placeOrders(ctx context.Context, url string, s shopSettings, skus []string, placed *atomic.Int64) <-chan loadOutcome {
	out := make(chan loadOutcome, 1)
	go func() {
		const batch = 25
		batches := (s.orders + batch - 1) / batch
		every := s.chaosFor * 8 / 10 / time.Duration(batches)
		client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
		defer client.CloseIdleConnections()
		start := time.Now()
		var total shop.LoadResult
		for i := range batches {
			if wait := time.Until(start.Add(time.Duration(i) * every)); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					out <- loadOutcome{total, ctx.Err()}
					return
				}
			}
			before := placed.Load()
			l, err := shop.NewLoad(shop.LoadConfig{URL: url, Orders: min(batch, s.orders-i*batch), Concurrency: 8, SKUs: skus,
				ReplayRate: 0.1, Client: client, Placed: func(n int) { placed.Store(before + int64(n)) }})
			if err != nil {
				out <- loadOutcome{total, err}
				return
			}
			res, err := l.Run(ctx)
			total.Orders = append(total.Orders, res.Orders...)
			total.Replays += res.Replays
			total.ReplayMismatches += res.ReplayMismatches
			total.Retries += res.Retries
			total.Elapsed = time.Since(start)
			if err != nil {
				out <- loadOutcome{total, err}
				return
			}
		}
		out <- loadOutcome{total, nil}
	}()
	return out
}

// runShopFaults injects faults at random for s.chaosFor, every kind at
// least once, and returns how many of each.
func runShopFaults(t *testing.T, ctx context.Context, s shopSettings, admin *pgxpool.Pool, name string, natsProc *testenv.Proc, services []*testenv.Proc) map[string]int {
	faults := map[string]int{}
	kill := func(p *testenv.Proc) func() {
		return func() {
			p.Signal(syscall.SIGKILL)
			faults["SIGKILL "+p.Name]++
		}
	}
	pause := func(p *testenv.Proc) func() {
		return func() {
			p.Signal(syscall.SIGSTOP)
			time.Sleep(relayPause)
			p.Signal(syscall.SIGCONT)
			faults["SIGSTOP "+p.Name+" past its relay lease"]++
		}
	}
	killNATS := func() {
		natsProc.Hold(true)
		natsProc.Signal(syscall.SIGKILL)
		time.Sleep(time.Duration(500+rand.IntN(2500)) * time.Millisecond)
		natsProc.Hold(false)
		faults["SIGKILL nats, restarted after a pause"]++
	}
	terminate := func() {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE application_name LIKE $1 AND pid <> pg_backend_pid()`, name+"\\_%").Scan(&n)
		if err != nil {
			t.Logf("pg_terminate_backend: %v", err)
		}
		faults["PostgreSQL sessions terminated"]++
		faults["PostgreSQL backends terminated"] += n
	}
	random := func() func() {
		p := services[rand.IntN(len(services))]
		switch rand.IntN(6) {
		case 0, 1:
			return kill(p)
		case 2:
			return killNATS
		case 3:
			return terminate
		case 4:
			return pause(p)
		}
		return func() {} // breathing room: faults need quiet moments to be survived
	}
	var first []func() // every kind at least once, each service killed once
	for _, p := range services {
		first = append(first, kill(p))
	}
	first = append(first, killNATS, terminate, pause(services[rand.IntN(len(services))]))
	rand.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	deadline := time.Now().Add(s.chaosFor)
	for round := 0; round < len(first) || time.Now().Before(deadline); round++ {
		time.Sleep(time.Duration(300+rand.IntN(1200)) * time.Millisecond)
		if round < len(first) {
			first[round]()
		} else {
			random()()
		}
	}
	return faults
}

// entryInvariant checks the API's idempotency: one order per key, every
// replay answered with the first response, and every order the client was
// told of stored.
func entryInvariant(t *testing.T, ctx context.Context, orders *pgxpool.Pool, res shop.LoadResult, a *shop.Audit) shop.Invariant {
	rows, err := orders.Query(ctx, `SELECT id FROM shop_orders`)
	testenv.Must(t, err, "read orders")
	stored := map[string]bool{}
	for rows.Next() {
		var id string
		testenv.Must(t, rows.Scan(&id), "scan order")
		stored[id] = true
	}
	testenv.Must(t, rows.Err(), "read orders")
	ids := map[string]bool{}
	var unknown []string
	for _, o := range res.Orders {
		ids[o.ID] = true
		if !stored[o.ID] {
			unknown = append(unknown, o.ID+" (key "+o.Key+")")
		}
	}
	inv := shop.Invariant{Name: "one order per Idempotency-Key",
		OK: len(ids) == len(res.Orders) && a.Orders == len(res.Orders) && res.ReplayMismatches == 0 && len(unknown) == 0,
		Detail: fmt.Sprintf("%d keys, %d distinct order ids, %d orders stored, %d answered but not stored; %d replayed responses, %d of them for another order",
			len(res.Orders), len(ids), a.Orders, len(unknown), res.Replays, res.ReplayMismatches)}
	if len(unknown) > 0 {
		inv.Detail += ": " + strings.Join(unknown[:min(3, len(unknown))], ", ")
	}
	return inv
}

// deadLetterInvariant checks the services' dead letters, read through the
// store's admin API: every fault of the run was survivable, so there must
// be none, and any there is must say why.
func deadLetterInvariant(t *testing.T, ctx context.Context, pools map[string]*pgxpool.Pool) shop.Invariant {
	var dead, parked, noReason int
	var evidence []string
	for _, svc := range shop.Services {
		adm := postgres.Admin(pools[svc])
		ds, err := adm.DeadLetters(ctx, 1000)
		testenv.Must(t, err, svc+": dead letters")
		for _, d := range ds {
			dead++
			if d.LastError == "" {
				noReason++
			}
			evidence = append(evidence, fmt.Sprintf("%s dead letter %s %s after %d attempts: %q", svc, d.Type, d.Key, d.Attempts, d.LastError))
		}
		ps, err := adm.Parked(ctx, "", 1000)
		testenv.Must(t, err, svc+": parked")
		for _, p := range ps {
			parked++
			if p.Reason == "" || p.Error == "" {
				noReason++
			}
			evidence = append(evidence, fmt.Sprintf("%s parked %s (%s) after %d attempts: %s: %q", svc, p.MessageID, p.Subject, p.Attempts, p.Reason, p.Error))
		}
	}
	inv := shop.Invariant{Name: "no dead letters", OK: dead+parked == 0,
		Detail: fmt.Sprintf("%d relay dead letters, %d parked deliveries, %d without a reason", dead, parked, noReason)}
	if len(evidence) > 0 {
		inv.Detail += ": " + strings.Join(evidence[:min(3, len(evidence))], "; ")
	}
	return inv
}

// readShopMetrics adds up the metrics each service's incarnations left; an
// incarnation killed loses its last quarter second.
func readShopMetrics(t *testing.T, dir string) map[string]shop.Metrics {
	out := map[string]shop.Metrics{}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	testenv.Must(t, err, "metrics")
	for _, f := range files {
		var m shop.Metrics
		if err := json.Unmarshal([]byte(readFile(f)), &m); err != nil {
			t.Logf("metrics %s: %v", filepath.Base(f), err)
			continue
		}
		svc, _, _ := strings.Cut(filepath.Base(f), ".")
		total := out[svc]
		total.Inbox.Applied += m.Inbox.Applied
		total.Inbox.Duplicates += m.Inbox.Duplicates
		total.Inbox.Retried += m.Inbox.Retried
		total.Inbox.Parked += m.Inbox.Parked
		total.Inbox.Replayed += m.Inbox.Replayed
		total.Chaos.Duplicated += m.Chaos.Duplicated
		total.Chaos.Reordered += m.Chaos.Reordered
		total.Published += m.Published
		total.Runs += m.Runs
		out[svc] = total
	}
	return out
}

// logOpenOrders logs a few orders whose saga has not ended, as the orders
// API shows them: state, phase and history.
func logOpenOrders(t *testing.T, ctx context.Context, orders *pgxpool.Pool, url string) {
	rows, err := orders.Query(ctx, `SELECT id FROM shop_orders WHERE status = $1 ORDER BY created_at LIMIT 3`, shop.StatusOpen)
	if err != nil {
		t.Logf("open orders: %v", err)
		return
	}
	var ids []string
	for rows.Next() {
		var id string
		if rows.Scan(&id) == nil {
			ids = append(ids, id)
		}
	}
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for _, id := range ids {
		resp, err := client.Get(url + "/orders/" + id)
		if err != nil {
			t.Logf("GET /orders/%s: %v", id, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var pretty bytes.Buffer
		if json.Indent(&pretty, body, "  ", "  ") != nil {
			pretty.Write(body)
		}
		t.Logf("open order %s: %s", id, pretty.String())
	}
}

// exitReasons counts the errors a process's incarnations exited with, as
// its log has them: a service started while NATS is down exits at once, for
// its supervisor to start it again.
func exitReasons(path string) map[string]int {
	out := map[string]int{}
	for line := range strings.Lines(readFile(path)) {
		if !strings.Contains(line, `msg="role failed"`) {
			continue
		}
		_, reason, _ := strings.Cut(strings.TrimSpace(line), " error=")
		out[reason]++
	}
	return out
}

// readFile returns the file at path, empty when there is none, or the error
// reading it.
func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err.Error()
	}
	return string(b)
}

// tail returns the last n lines of the file at path, leaving out the
// failures the shop injects on purpose.
func tail(path string, n int) string {
	var lines []string
	for line := range strings.Lines(readFile(path)) {
		if !strings.Contains(line, shop.ErrInjected.Error()) {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "")
}
