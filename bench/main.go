// Command bench measures Courier side by side with two peer projects that
// solve the same problem, in one run, on this machine's PostgreSQL and NATS
// JetStream:
//
//   - Watermill's forwarder (components/forwarder over watermill-sql, to
//     JetStream through watermill-nats);
//   - River used as a relay: one "publish this" job per message, inserted
//     with InsertTx in the business transaction and worked by a worker that
//     publishes to JetStream and waits for the ack.
//
// It measures drain throughput, commit→publish latency under a steady
// offered load, the write path's cost, the physical limits of the database
// and the broker, and each relay's CPU and memory, Courier's relay drain on
// each of its store dialects (PostgreSQL, SQLite, MySQL/MariaDB), and
// Courier under adversity (empty claims over dead rows that a long
// transaction keeps from vacuum; one key's latency behind another key's
// poison message), and Courier's scheduled messages (how late they are
// published, what a million waiting ones cost the relay), and a relay
// fleet (package tenant) serving the same load spread over 1, 100 and
// 1,000 tenant schemas, then writes a Markdown report and a PNG chart.
// Every system gets its own PostgreSQL schema and JetStream stream, removed
// afterwards, and systems run one after another.
//
// Usage:
//
//	cd bench && go run . -out RESULTS.md
//
// See README.md for the flags.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// sections are the parts of the benchmark, in the order they run.
var sections = []string{"drain", "latency", "write", "limits", "dialects", "adversity", "brokers", "cdc", "cleanup", "scheduled", "consumers", "handover", "tenants", "producers", "audit"}

// config is the command line.
type config struct {
	pgURL, natsURL string
	mysqlDSN       string
	amqpURL        string
	natsServer     string
	brokers        []string
	out, chart     string
	jsonOut        string
	runs           int
	quick          bool
	only           []string
	systems        []string
	cdcParts       []string // the parts of the cdc section to run (cdcParts)

	drainN              int
	brokersN            int
	keysChart           string // -keys-chart
	limitsN             int
	syncN               int
	rates               []int
	latencyWarmup       time.Duration
	latencyWindow       time.Duration
	latencyDrainTimeout time.Duration
	writeWarmup         time.Duration
	writeDuration       time.Duration

	advDeadRows int           // dead rows under the adversity section's claims
	advClaims   int           // timed claims per outbox state
	advScans    int           // timed reference scans per outbox state
	advWindow   time.Duration // how long key L is written in the isolation runs
}

// Bench is one invocation: its configuration, connections and results.
type Bench struct {
	cfg     config
	admin   *pgxpool.Pool
	natsPID int
	results *Results
	failed  []string

	// natsGroups are the nats-servers the bench started, by node count;
	// natsStartFailed says why a count could not be started.
	natsGroups      map[int]*natsGroup
	natsStartFailed map[int]string

	// tenants are the tenants section's schemas, made as its tenant counts
	// need them and dropped when the bench ends (closeTenants).
	tenants *tenantSet
}

func main() {
	role := flag.String("role", "", "internal: run as a child process (drain, tenants)")
	spec := flag.String("spec", "", "internal: the child's task, JSON")
	var cfg config
	var only, systems, brokers, cdcParts string
	flag.StringVar(&cfg.pgURL, "pg", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL URL (sslmode=disable is enforced)")
	flag.StringVar(&cfg.natsURL, "nats", "nats://127.0.0.1:4222", "NATS URL (JetStream enabled)")
	flag.StringVar(&cfg.mysqlDSN, "mysql", cmp.Or(os.Getenv("BENCH_MYSQL_URL"), defaultMySQLDSN),
		"MySQL/MariaDB DSN (go-sql-driver) for the dialects section; $BENCH_MYSQL_URL sets the default; empty: not measured")
	flag.StringVar(&cfg.amqpURL, "amqp", cmp.Or(os.Getenv("BENCH_AMQP_URL"), defaultAMQPURL),
		"RabbitMQ URL for the brokers section; $BENCH_AMQP_URL sets the default; empty: not measured")
	flag.StringVar(&cfg.natsServer, "nats-server", cmp.Or(os.Getenv("COURIER_TEST_NATS_SERVER"), defaultNATSServer),
		"nats-server binary the brokers section starts for nats-current and nats-r3; $COURIER_TEST_NATS_SERVER sets the default; empty: not measured")
	flag.StringVar(&brokers, "brokers", strings.Join(brokerNames, ","), "comma-separated brokers of the brokers section: "+strings.Join(brokerNames, ", "))
	flag.IntVar(&cfg.brokersN, "brokers-n", 0, "messages per drain in the brokers section (default 20000, 5000 with -quick)")
	flag.StringVar(&cfg.out, "out", "RESULTS.md", "Markdown report to write")
	flag.StringVar(&cfg.chart, "chart", "results.png", "PNG chart to write")
	flag.StringVar(&cfg.jsonOut, "json", "results.json", "raw samples to write (empty: none)")
	flag.IntVar(&cfg.runs, "runs", 3, "runs per figure (the median is reported)")
	flag.BoolVar(&cfg.quick, "quick", false, "development mode: fewer messages, shorter windows, 1 run")
	flag.StringVar(&only, "only", "", "comma-separated sections to run: "+strings.Join(sections, ", ")+" (default all)")
	flag.StringVar(&cdcParts, "cdc-parts", strings.Join(cdcPartNames, ","), "comma-separated parts of the cdc section to run: "+strings.Join(cdcPartNames, ", "))
	flag.StringVar(&systems, "systems", strings.Join(allSystems, ","), "comma-separated systems to measure")
	flag.IntVar(&latencyWriters, "latency-writers", latencyWriters, "writer goroutines sharing the offered load in the latency section")
	flag.StringVar(&latencySyncCommit, "latency-sync-commit", latencySyncCommit, "synchronous_commit of the latency section's writer sessions (on holds commits until the WAL is flushed)")
	flag.IntVar(&cfg.drainN, "n", 0, "messages per drain (default 100000, 10000 with -quick)")
	keys := flag.String("keys", "10000,1", "comma-separated key counts of the drains of the brokers and cdc sections, from "+joinInts(sweepKeys))
	flag.StringVar(&cfg.keysChart, "keys-chart", "keys.png", "PNG chart of the drains over 3 key counts or more to write (brokers and cdc sections)")
	flag.Parse()
	drainKeys = nil
	for _, k := range splitList(*keys) {
		n, err := strconv.Atoi(k)
		if err != nil || !slices.Contains(sweepKeys, n) {
			fatalf("-keys: %q is not one of %s", k, joinInts(sweepKeys))
		}
		drainKeys = append(drainKeys, n)
	}

	if *role != "" {
		child := map[string]func(string) error{"drain": childDrain, "tenants": childTenants, "instance": childInstance}[*role]
		if child == nil {
			fmt.Fprintf(os.Stderr, "unknown role %q\n", *role)
			os.Exit(2)
		}
		if err := child(*spec); err != nil {
			fmt.Fprintf(os.Stderr, "%s child: %v\n", *role, err)
			os.Exit(1)
		}
		return
	}

	cfg.rates = []int{1000, 5000}
	if cfg.quick {
		if !flagSet("runs") {
			cfg.runs = 1
		}
		cfg.drainN = cmp.Or(cfg.drainN, 10000)
		cfg.brokersN = cmp.Or(cfg.brokersN, 5000)
		cfg.limitsN, cfg.syncN = 10000, 5000
		cfg.latencyWarmup, cfg.latencyWindow, cfg.latencyDrainTimeout = 500*time.Millisecond, 3*time.Second, 30*time.Second
		cfg.writeWarmup, cfg.writeDuration = 300*time.Millisecond, 2*time.Second
		cfg.advDeadRows, cfg.advClaims, cfg.advScans, cfg.advWindow = 500000, 200, 10, 5*time.Second
	} else {
		cfg.drainN = cmp.Or(cfg.drainN, 100000)
		cfg.brokersN = cmp.Or(cfg.brokersN, 20000)
		cfg.limitsN, cfg.syncN = 100000, 20000
		cfg.latencyWarmup, cfg.latencyWindow, cfg.latencyDrainTimeout = time.Second, 10*time.Second, 90*time.Second
		cfg.writeWarmup, cfg.writeDuration = 500*time.Millisecond, 5*time.Second
		cfg.advDeadRows, cfg.advClaims, cfg.advScans, cfg.advWindow = 5000000, 200, 20, 20*time.Second
	}
	cfg.only = splitList(only)
	for _, s := range cfg.only {
		if !slices.Contains(sections, s) {
			fatalf("unknown section %q (want %s)", s, strings.Join(sections, ", "))
		}
	}
	if len(cfg.only) == 0 {
		cfg.only = sections
	}
	cfg.cdcParts = splitList(cdcParts)
	for _, p := range cfg.cdcParts {
		if !slices.Contains(cdcPartNames, p) {
			fatalf("unknown part %q of the cdc section (want %s)", p, strings.Join(cdcPartNames, ", "))
		}
	}
	cfg.systems = splitList(systems)
	for _, s := range cfg.systems {
		if _, err := systemByName(s); err != nil {
			fatalf("%v", err)
		}
	}
	cfg.brokers = splitList(brokers)
	for _, br := range cfg.brokers {
		if _, err := brokerByName(br); err != nil {
			fatalf("-brokers: %v", err)
		}
	}
	if cfg.runs < 1 {
		fatalf("-runs must be at least 1")
	}
	if tenantsRuns < 1 {
		fatalf("-tenants-runs must be at least 1")
	}
	if !cfg.quick && cfg.runs < 3 {
		logf("warning: fewer than 3 runs per figure")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fatalf("%v", err)
	}
}

// run measures everything cfg asks for and writes the outputs.
func run(ctx context.Context, cfg config) error {
	var err error
	if cfg.pgURL, err = withParams(cfg.pgURL); err != nil {
		return err
	}
	admin, err := newPool(ctx, cfg.pgURL, 4)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer admin.Close()
	if err := admin.Ping(ctx); err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	b := &Bench{cfg: cfg, admin: admin, natsPID: findProcess("nats-server"), results: NewResults(),
		natsGroups: map[int]*natsGroup{}, natsStartFailed: map[int]string{}}
	defer b.stopNATSServers()
	defer b.closeTenants()
	if b.natsPID == 0 {
		logf("warning: nats-server's process not found: its CPU is not measured")
	}
	info, err := collectMachineInfo(ctx, b)
	if err != nil {
		return err
	}
	info.Start = time.Now()
	logf("bench: %d run(s) of %s for %s", cfg.runs, strings.Join(cfg.only, ", "), strings.Join(cfg.systems, ", "))
	for run := range cfg.runs {
		// Rotate the systems' order from run to run so that slow drifts of
		// the machine do not always hit the same system.
		order := rotate(cfg.systems, run)
		for _, section := range cfg.only {
			logf("run %d/%d: %s", run+1, cfg.runs, section)
			b.runSection(ctx, section, order, run+1)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	info.End = time.Now()
	logf("bench: done in %s", info.End.Sub(info.Start).Round(time.Second))
	b.warnSpread()
	if cfg.jsonOut != "" {
		if err := b.results.WriteJSON(cfg.jsonOut); err != nil {
			return err
		}
	}
	if cfg.chart != "" {
		if err := writeChart(cfg.chart, b.results, cfg.systems); err != nil {
			return fmt.Errorf("chart: %w", err)
		}
	}
	if cfg.keysChart != "" && len(drainKeys) >= 3 {
		if err := writeKeysChart(cfg.keysChart, b.results, cfg); err != nil {
			return fmt.Errorf("keys chart: %w", err)
		}
	}
	report := renderReport(info, cfg, b.results, b.failed)
	if err := os.WriteFile(cfg.out, []byte(report), 0o644); err != nil {
		return err
	}
	fmt.Print(renderTables(b.results, cfg))
	logf("wrote %s, %s", cfg.out, cfg.chart)
	return nil
}

// runSection runs one section for every system once.
func (b *Bench) runSection(ctx context.Context, section string, order []string, run int) {
	try := func(what string, f func() error) {
		if ctx.Err() != nil {
			return
		}
		start := time.Now()
		logf(" %s", what)
		if err := f(); err != nil {
			msg := fmt.Sprintf("run %d: %s: %v", run, what, err)
			logf("  FAILED: %v", err)
			b.failed = append(b.failed, msg)
			return
		}
		logf("  (%s)", time.Since(start).Round(100*time.Millisecond))
	}
	switch section {
	case "drain":
		for _, keys := range []int{10000, 1} {
			for _, s := range order {
				try(fmt.Sprintf("drain %s, %d keys", s, keys), func() error { return b.runDrain(ctx, s, keys, keys == 10000) })
			}
		}
	case "latency":
		for _, rate := range b.cfg.rates {
			for _, s := range order {
				try(fmt.Sprintf("latency %s @ %d msg/s", s, rate), func() error { return b.runLatency(ctx, s, rate) })
			}
		}
	case "write":
		try("write plain insert", func() error { return b.runWrite(ctx, "") })
		if slices.Contains(order, "courier") {
			try("write courier pipelined", func() error { return b.runWrite(ctx, pipelinedCourier) })
		}
		for _, s := range order {
			try("write "+s, func() error { return b.runWrite(ctx, s) })
		}
	case "limits":
		try("limit PostgreSQL SKIP LOCKED queue", func() error { return b.runRefPGQueue(ctx) })
		try("limit JetStream raw async publish", func() error { return b.runRefJSAsync(ctx) })
		for _, s := range order {
			try("limit database side "+s, func() error { return b.runLimitDB(ctx, s) })
			try("limit broker side "+s, func() error { return b.runLimitBroker(ctx, s) })
		}
	case "dialects":
		for _, d := range rotate(dialects, run-1) {
			try("dialect drain courier on "+d, func() error { return b.runDialect(ctx, d) })
		}
	case "brokers":
		for _, br := range rotate(b.cfg.brokers, run-1) {
			for _, keys := range drainKeys {
				try(fmt.Sprintf("broker drain courier to %s, %d keys", br, keys), func() error { return b.runBrokerDrain(ctx, br, keys) })
			}
		}
	case "cdc":
		b.runCDC(ctx, try)
	case "cleanup":
		for _, p := range cleanupPauses {
			try("cleanup: writers during a retention cleanup, "+pauseKey(p), func() error { return b.runCleanup(ctx, p) })
		}
	case "scheduled":
		b.runScheduled(ctx, try, run)
	case "consumers":
		b.runConsumers(ctx, try, run)
	case "handover":
		b.runHandovers(ctx, try, run)
	case "producers":
		b.runProducers(ctx, try, run)
	case "audit":
		b.runAudits(ctx, try, run)
	case "tenants":
		if run == 1 { // it repeats itself (-tenants-runs)
			b.runTenants(ctx, try)
		}
	case "adversity":
		try("adversity: empty claims, clean and with dead rows", func() error { return b.runAdversityClaim(ctx) })
		for _, d := range rotate(dialects, run-1) {
			try("adversity: isolation, poison rejected, on "+d, func() error { return b.runIsolation(ctx, d, false) })
			try("adversity: isolation, poison unbound, on "+d, func() error { return b.runIsolation(ctx, d, true) })
		}
	}
}

// warnSpread prints a warning for every cell whose spread exceeds
// maxSpread or that has fewer samples than runs (the report marks them too).
func (b *Bench) warnSpread() {
	for _, f := range append(slices.Clone(figures), referenceFigures...) {
		for _, s := range append(slices.Clone(b.cfg.systems), reference) {
			b.warnCell(f, s)
		}
	}
	for _, f := range slices.Concat(dialectFigures, adversityFigures) {
		for _, d := range dialects {
			b.warnCell(f, d)
		}
	}
	for _, f := range brokerFigures {
		for _, br := range b.cfg.brokers {
			b.warnCell(f, br)
		}
	}
	for _, f := range producerFigures {
		for _, d := range dialects {
			for _, lang := range producerLanguages {
				b.warnCell(f, prodKey(lang, d))
			}
		}
	}
	for _, f := range auditFigures {
		for _, br := range auditBrokers {
			for _, n := range b.auditNs() {
				b.warnCell(f, auditKey(br, n))
			}
		}
	}
	for _, f := range scheduledFigures {
		for _, k := range []string{reference, schedWithout, schedWith} {
			b.warnCell(f, k)
		}
	}
	runs := b.cfg.runs
	b.cfg.runs = tenantsRuns
	for _, f := range tenantFigures {
		for _, n := range tenantCounts {
			b.warnCell(f, tenantsKey(n))
		}
	}
	b.cfg.runs = runs
	for _, f := range consumerFigures {
		for _, br := range consBrokerList {
			for _, sh := range consShapes() {
				for _, n := range consInstanceList {
					b.warnCell(f, consKey(br, sh, n))
				}
			}
		}
	}
	for _, f := range handoverFigures {
		for _, br := range handoverBrokerList {
			for _, fault := range handoverFaultList {
				b.warnCell(f, handoverKey(br, fault))
			}
		}
	}
}

// warnCell warns about one cell (system is a dialect for dialectFigures).
func (b *Bench) warnCell(f Figure, system string) {
	st, ok := b.results.Stat(f.ID, system)
	if !ok {
		return
	}
	if st.N > 1 && st.Spread() > maxSpread {
		logf("warning: %s / %s: spread %.0f%% > %.0f%% (median %s, range %s–%s)", f.ID, system, 100*st.Spread(), 100*maxSpread,
			formatValue(f, st.Median), formatValue(f, st.Min), formatValue(f, st.Max))
	}
	if st.N < b.cfg.runs {
		logf("warning: %s / %s: only %d of %d runs succeeded", f.ID, system, st.N, b.cfg.runs)
	}
}

// rotate returns s rotated left by k.
func rotate[T any](s []T, k int) []T {
	if len(s) == 0 {
		return nil
	}
	k %= len(s)
	return append(slices.Clone(s[k:]), s[:k]...)
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// flagSet reports whether flag name was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// logf prints a progress line on stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

// fatalf prints an error and exits.
func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(1)
}
