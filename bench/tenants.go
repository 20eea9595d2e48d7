package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/store/postgres"
)

// The tenants section measures tenant.Fleet, one relay process serving
// many tenants' outboxes (here: PostgreSQL schemas of one database, a
// tenant's URL carrying ?search_path=), with the same total load spread
// over 1, 100 and 1,000 tenants:
//
//   - drain: a backlog written beforehand (100,000 messages in all),
//     relayed to one JetStream stream until every message is marked;
//   - idle: the fleet with nothing to publish, a few seconds: the claims,
//     the scheduled-message releases and the tenants' sessions (database
//     opens) a second it makes, its connections and CPU;
//   - latency: a steady load (2,000 msg/s in all, message i to tenant
//     i mod n, one message per transaction), commit→receipt by a core
//     NATS subscriber, as the latency section measures it, and how many
//     tenants got anything published while the load ran.
//
// The fleet runs in a child process (the bench binary re-executed with
// -role tenants) so that its CPU and memory are its own; the parent
// counts its PostgreSQL connections in pg_stat_activity (by the tenants'
// application_name) and reads their backends' CPU. Every tenant schema is
// created and migrated beforehand, a few at a time, and dropped after.

// The tenants section's flags, registered here so that the section keeps
// its settings to itself.
var (
	// tenantCounts are the tenant counts measured, in increasing order.
	tenantCounts = []int{1, 100, 1000}
	// tenantsMaxOpen is the fleet's Config.MaxOpen: at most that many
	// tenants open, one connection each.
	tenantsMaxOpen = 50
	// tenantsN is the drain's backlog, in all (0: tenantsDefaultN, or
	// tenantsQuickN with -quick).
	tenantsN int
	// tenantsRate is the latency run's offered load, in all.
	tenantsRate = 2000
	// tenantsRuns is how many times the section measures each count, in
	// the bench's first run.
	tenantsRuns = 1
	// tenantsWindow is how long the latency run is measured after its
	// warm-up (0: 10 s, 3 s with -quick).
	tenantsWindow time.Duration
)

const (
	tenantsDefaultN = 100_000
	tenantsQuickN   = 10_000
	// tenantsKeys is how many keys the backlog is spread over in all:
	// tenantsKeys/n keys per tenant (at least one).
	tenantsKeys = 10_000
	// tenantsSetupWorkers bounds the schemas created, migrated, filled and
	// dropped at once.
	tenantsSetupWorkers = 8
	// tenantsSample is how often the parent counts the fleet's connections
	// and reads their backends' CPU.
	tenantsSample = 100 * time.Millisecond
	// tenantsAloneWindow is how long the latency run's load is offered
	// again with no fleet running.
	tenantsAloneWindow = 2 * time.Second
	// tenantsSettle is how long the fleet runs after the drain before the
	// idle window begins (the last sessions of the drain end).
	tenantsSettle = 2 * time.Second
	// tenantsMaxConnsCap is the most -tenants-max-open may be: the
	// machine's PostgreSQL allows 100 connections, shared with others.
	tenantsMaxConnsCap = 50
	// tenantsSchemaPrefix begins the names of the section's schemas, and
	// tenantsAppPrefix the application_name of its sessions.
	tenantsSchemaPrefix = "bench_tenants_"
	tenantsAppPrefix    = "bench-tenants-"
)

func init() {
	intListFlag("tenants-counts", "comma-separated tenant counts of the tenants section (default 1,100,1000)", "tenant count", &tenantCounts)
	flag.IntVar(&tenantsMaxOpen, "tenants-max-open", tenantsMaxOpen, fmt.Sprintf("tenant.Config.MaxOpen of the tenants section's fleet (one connection per open tenant; at most %d)", tenantsMaxConnsCap))
	flag.IntVar(&tenantsN, "tenants-n", 0, fmt.Sprintf("messages in all of the tenants section's drain (default %d, %d with -quick)", tenantsDefaultN, tenantsQuickN))
	flag.IntVar(&tenantsRate, "tenants-rate", tenantsRate, "messages per second in all offered in the tenants section's latency run")
	flag.IntVar(&tenantsRuns, "tenants-runs", tenantsRuns, "times the tenants section measures each tenant count (it runs in the bench's first run only, whatever -runs says)")
	flag.DurationVar(&tenantsWindow, "tenants-window", 0, "how long the tenants section's latency run is measured after its warm-up (default 10s, 3s with -quick)")
}

// tenantSettings are the section's settings, from the flags and -quick.
type tenantSettings struct {
	n, rate, maxOpen int
	// drain bounds a drain; idle is the idle window; arrive bounds the
	// wait for the steady load's last messages.
	warmup, window, idle, arrive, drain time.Duration
}

func tenantsSettings(cfg config) tenantSettings {
	s := tenantSettings{n: tenantsN, rate: tenantsRate, maxOpen: tenantsMaxOpen, window: tenantsWindow,
		warmup: time.Second, idle: 5 * time.Second, arrive: 100 * time.Second, drain: 150 * time.Second}
	def := func(v *time.Duration, full, quick time.Duration) {
		if *v <= 0 {
			*v = full
			if cfg.quick {
				*v = quick
			}
		}
	}
	if s.n <= 0 {
		s.n = tenantsDefaultN
		if cfg.quick {
			s.n = tenantsQuickN
		}
	}
	def(&s.window, 10*time.Second, 3*time.Second)
	if cfg.quick {
		s.warmup, s.idle, s.arrive, s.drain = 500*time.Millisecond, 2*time.Second, 45*time.Second, time.Minute
	}
	return s
}

// tenantsKey keys a cell of the section: its tenant count.
func tenantsKey(n int) string { return strconv.Itoa(n) }

// tenantFigures are the tenants section's figures, keyed by tenantsKey.
var tenantFigures = []Figure{
	{ID: "ten_cold", Section: "tenants", Label: "A new connection's first release + first claim, no fleet running, p50", Unit: "ms", LowerIsBetter: true, Digits: 1},
	{ID: "ten_drain", Section: "tenants", Label: "Drain of the backlog", Unit: "msg/s", Digits: -1},
	{ID: "ten_drain_s", Section: "tenants", Label: "… its time, from the fleet's start to the last message marked", Unit: "s", LowerIsBetter: true, Digits: 2},
	{ID: "ten_drain_done", Section: "tenants", Label: "… messages published by its end", Unit: "messages", Digits: -1},
	{ID: "ten_drain_sessions", Section: "tenants", Label: "… turns (tenant sessions: database opens) it took", Unit: "turns", LowerIsBetter: true, Digits: -1},
	{ID: "ten_drain_turn_rate", Section: "tenants", Label: "… turns a second", Unit: "/s", Digits: 1},
	{ID: "ten_drain_lost", Section: "tenants", Label: "… turns that ended with their first release or claim cut short", Unit: "turns", LowerIsBetter: true, Digits: -1},
	{ID: "ten_drain_cut", Section: "tenants", Label: "… claims and releases cut short by a turn's end", Unit: "calls", LowerIsBetter: true, Digits: -1},
	{ID: "ten_drain_first_p50", Section: "tenants", Label: "… a turn's first claim returned, after the open began, p50", Unit: "ms", LowerIsBetter: true, Digits: 1},
	{ID: "ten_drain_first_p99", Section: "tenants", Label: "… the same, p99", Unit: "ms", LowerIsBetter: true, Digits: 1},
	{ID: "ten_drain_conns", Section: "tenants", Label: "… the fleet's PostgreSQL connections, most seen", Unit: "connections", LowerIsBetter: true, Digits: -1},
	{ID: "ten_drain_cpu_relay", Section: "tenants", Label: "… relay process CPU per 100k msgs", Unit: "s", LowerIsBetter: true, Digits: 2},
	{ID: "ten_drain_cpu_pg", Section: "tenants", Label: "… PostgreSQL backends' CPU per 100k msgs", Unit: "s", LowerIsBetter: true, Digits: 2},
	{ID: "ten_drain_rss", Section: "tenants", Label: "… relay process peak RSS", Unit: "MiB", LowerIsBetter: true, Digits: 1},
	{ID: "ten_idle_claims", Section: "tenants", Label: "Idle: claims", Unit: "/s", LowerIsBetter: true, Digits: -1},
	{ID: "ten_idle_releases", Section: "tenants", Label: "Idle: releases (scheduled messages due?)", Unit: "/s", LowerIsBetter: true, Digits: -1},
	{ID: "ten_idle_sessions", Section: "tenants", Label: "Idle: turns (tenant sessions opened)", Unit: "/s", LowerIsBetter: true, Digits: 1},
	{ID: "ten_idle_lost", Section: "tenants", Label: "Idle: turns that ended with their first release or claim cut short", Unit: "/s", LowerIsBetter: true, Digits: 1},
	{ID: "ten_idle_conns", Section: "tenants", Label: "Idle: the fleet's connections, most seen", Unit: "connections", LowerIsBetter: true, Digits: -1},
	{ID: "ten_idle_cpu_relay", Section: "tenants", Label: "Idle: relay process CPU", Unit: "cores", LowerIsBetter: true, Digits: 3},
	{ID: "ten_idle_cpu_pg", Section: "tenants", Label: "Idle: PostgreSQL backends' CPU", Unit: "cores", LowerIsBetter: true, Digits: 3},
	{ID: "ten_lat_p50", Section: "tenants", Label: "Steady load: commit→publish p50", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "ten_lat_p99", Section: "tenants", Label: "Steady load: commit→publish p99", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "ten_lat_max", Section: "tenants", Label: "Steady load: commit→publish max", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "ten_lat_missing", Section: "tenants", Label: "Steady load: messages not published by the end of the wait after the last commit", Unit: "messages", LowerIsBetter: true, Digits: -1},
	{ID: "ten_lat_offered", Section: "tenants", Label: "Steady load: rate actually offered (committed)", Unit: "msg/s", Digits: -1},
	{ID: "ten_alone_offered", Section: "tenants", Label: "Same load with no fleet running: rate committed", Unit: "msg/s", Digits: -1},
	{ID: "ten_lat_served", Section: "tenants", Label: "Steady load: tenants with a message published while it ran", Unit: "tenants", Digits: -1},
	{ID: "ten_lat_claims", Section: "tenants", Label: "Steady load: claims", Unit: "/s", LowerIsBetter: true, Digits: -1},
	{ID: "ten_lat_sessions", Section: "tenants", Label: "Steady load: turns (tenant sessions opened)", Unit: "/s", LowerIsBetter: true, Digits: 1},
	{ID: "ten_lat_lost", Section: "tenants", Label: "Steady load: turns that ended with their first release or claim cut short", Unit: "/s", LowerIsBetter: true, Digits: 1},
	{ID: "ten_lat_first_p99", Section: "tenants", Label: "Steady load: a turn's first claim returned, after the open began, p99", Unit: "ms", LowerIsBetter: true, Digits: 1},
	{ID: "ten_lat_conns", Section: "tenants", Label: "Steady load: the fleet's connections, most seen", Unit: "connections", LowerIsBetter: true, Digits: -1},
	{ID: "ten_lat_cpu_relay", Section: "tenants", Label: "Steady load: relay process CPU", Unit: "cores", LowerIsBetter: true, Digits: 3},
	{ID: "ten_lat_cpu_pg", Section: "tenants", Label: "Steady load: PostgreSQL backends' CPU", Unit: "cores", LowerIsBetter: true, Digits: 3},
	{ID: "ten_rss", Section: "tenants", Label: "Relay process RSS at the end of the steady load", Unit: "MiB", LowerIsBetter: true, Digits: 1},
	{ID: "ten_heap", Section: "tenants", Label: "… of which Go heap in use", Unit: "MiB", LowerIsBetter: true, Digits: 1},
	{ID: "ten_goroutines", Section: "tenants", Label: "… goroutines", Unit: "goroutines", LowerIsBetter: true, Digits: -1},
}

// runTenants runs the tenants section: tenantsRuns times, each tenant
// count in increasing order, the database holding as many of the
// section's schemas as the count measured (they are added before each
// count, and dropped after each repetition and when the bench ends: see
// closeTenants). It runs in the bench's first run only.
func (b *Bench) runTenants(ctx context.Context, try func(string, func() error)) {
	s := tenantsSettings(b.cfg)
	if err := b.tenantsPreflight(ctx, s); err != nil {
		try("tenants: preflight", func() error { return err })
		return
	}
	b.dropTenantLeftovers(ctx)
	for rep := range tenantsRuns {
		b.closeTenants()
		b.tenants = &tenantSet{token: randomToken(4)}
		for _, n := range tenantCounts {
			if ctx.Err() != nil {
				return
			}
			grown := false
			if add := n - len(b.tenants.schemas); add > 0 {
				try(fmt.Sprintf("tenants: create and migrate %s more schemas, %d at a time", thousands(int64(add)), tenantsSetupWorkers), func() error {
					err := b.tenants.grow(ctx, b, n)
					grown = err == nil
					return err
				})
			} else {
				grown = true
			}
			if !grown {
				return
			}
			try(fmt.Sprintf("tenants: %s tenants (repetition %d of %d), MaxOpen %d: drain %s, idle, %s msg/s", thousands(int64(n)), rep+1, tenantsRuns,
				s.maxOpen, thousands(int64(s.n)), thousands(int64(s.rate))), func() error { return b.tenantsRun(ctx, s, n) })
		}
	}
}

// closeTenants drops the section's schemas, if it made any.
func (b *Bench) closeTenants() {
	if b.tenants == nil {
		return
	}
	t0 := time.Now()
	b.dropSchemas(b.tenants.schemas)
	if len(b.tenants.schemas) > 0 {
		logf("dropped the tenants section's %s schemas in %s", thousands(int64(len(b.tenants.schemas))), time.Since(t0).Round(100*time.Millisecond))
	}
	b.tenants = nil
}

// tenantsPreflight refuses a MaxOpen above tenantsMaxConnsCap, and one
// the server's free connections cannot hold with the latency run's
// writers beside it.
func (b *Bench) tenantsPreflight(ctx context.Context, s tenantSettings) error {
	if s.maxOpen < 1 || s.maxOpen > tenantsMaxConnsCap {
		return fmt.Errorf("-tenants-max-open is %d: use 1 to %d (the fleet holds one PostgreSQL connection per open tenant, and the server's connections are shared)", s.maxOpen, tenantsMaxConnsCap)
	}
	var maxConns, reserved, used int
	err := b.admin.QueryRow(ctx, `SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int`).Scan(&maxConns, &reserved, &used)
	if err != nil {
		return err
	}
	need := s.maxOpen + latencyWriters + 2
	if free := maxConns - reserved - used; need > free {
		return fmt.Errorf("the fleet's %d connections and the writers' %d need %d of PostgreSQL's connections, and %d are free (max_connections %d, %d reserved, %d in use): lower -tenants-max-open",
			s.maxOpen, latencyWriters+2, need, free, maxConns, reserved, used)
	}
	return nil
}

// tenantsMark is the comment on each of the section's schemas: the
// process that made it, so that a later run can tell a leftover.
func tenantsMark(pid int) string { return fmt.Sprintf("courier bench pid %d", pid) }

// dropTenantLeftovers drops the section's schemas that an interrupted
// run left: those whose comment names a process that no longer runs.
func (b *Bench) dropTenantLeftovers(ctx context.Context) {
	rows, err := b.admin.Query(ctx, `SELECT nspname, coalesce(obj_description(oid, 'pg_namespace'), '') FROM pg_namespace WHERE starts_with(nspname, $1)`,
		tenantsSchemaPrefix)
	if err != nil {
		logf("warning: look for leftover tenant schemas: %v", err)
		return
	}
	var left []string
	var name, mark string
	_, err = pgx.ForEachRow(rows, []any{&name, &mark}, func() error {
		var pid int
		if _, err := fmt.Sscanf(mark, "courier bench pid %d", &pid); err == nil && pid > 0 {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				return nil // its bench still runs
			}
		}
		left = append(left, name)
		return nil
	})
	if err != nil || len(left) == 0 {
		return
	}
	logf("  dropping %d tenant schemas an interrupted run left", len(left))
	b.dropSchemas(left)
}

// tenantSet is the section's tenants: migrated schemas, the first n of
// which a measurement of n tenants uses.
type tenantSet struct {
	token   string
	schemas []string
}

// grow creates and migrates schemas until the set holds n,
// tenantsSetupWorkers at a time. Each schema is migrated with the scripts
// of postgres.ExportSQL (what an external migration tool runs: the
// migrations, each recording its version in courier_schema_migrations)
// in one transaction: postgres.Driver's Migrate takes one advisory lock
// for the whole database, so that migrations of different schemas would
// run one at a time. Every tenant's turn checks its schema (RelayStore).
// The schemas made are in the set, to be dropped, whatever happens.
func (ts *tenantSet) grow(ctx context.Context, b *Bench, n int) error {
	from := len(ts.schemas)
	for i := from; i < n; i++ {
		ts.schemas = append(ts.schemas, fmt.Sprintf("%s%s_%04d", tenantsSchemaPrefix, ts.token, i))
	}
	setupURL, err := withParams(b.cfg.pgURL, "application_name", "bench-setup-"+ts.token)
	if err != nil {
		return err
	}
	pool, err := newPool(ctx, setupURL, tenantsSetupWorkers)
	if err != nil {
		return err
	}
	defer pool.Close()
	var script strings.Builder
	for _, m := range postgres.ExportSQL() {
		script.WriteString(m.SQL)
		script.WriteString("\n")
	}
	start := time.Now()
	mark := tenantsMark(os.Getpid())
	err = forEach(ctx, n-from, tenantsSetupWorkers, func(i int) error {
		schema := pgx.Identifier{ts.schemas[from+i]}.Sanitize()
		// No arguments: one simple-protocol call, many statements, one
		// transaction.
		_, err := pool.Exec(ctx, "BEGIN; CREATE SCHEMA "+schema+"; COMMENT ON SCHEMA "+schema+" IS '"+mark+"'; SET LOCAL search_path TO "+
			schema+";\n"+script.String()+"COMMIT;")
		if err != nil {
			return fmt.Errorf("create and migrate schema %s: %w", ts.schemas[from+i], err)
		}
		return nil
	})
	if err == nil {
		err = checkTenantSchema(ctx, b.cfg.pgURL, ts.schemas[n-1])
	}
	if err != nil {
		return err
	}
	logf("  %s schemas created and migrated in %s", thousands(int64(n-from)), time.Since(start).Round(100*time.Millisecond))
	return nil
}

// checkTenantSchema checks that a schema is what postgres.Driver expects
// (CheckSchema).
func checkTenantSchema(ctx context.Context, pgURL, schema string) error {
	u, err := withParams(pgURL, "search_path", schema)
	if err != nil {
		return err
	}
	pool, err := newPool(ctx, u, 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := postgres.NewDriver(pool).CheckSchema(ctx); err != nil {
		return fmt.Errorf("schema %s after the exported migrations: %w", schema, err)
	}
	return nil
}

// empty empties the tenants' outboxes and leases (TRUNCATE), no fleet
// running.
func (tr *tenantRun) empty(ctx context.Context, pgURL string) error {
	pool, err := newPool(ctx, pgURL, tenantsSetupWorkers)
	if err != nil {
		return err
	}
	defer pool.Close()
	err = forEach(ctx, len(tr.schemas), tenantsSetupWorkers, func(i int) error {
		_, err := pool.Exec(ctx, "TRUNCATE "+pgx.Identifier{tr.schemas[i], "courier_outbox"}.Sanitize()+", "+
			pgx.Identifier{tr.schemas[i], "courier_outbox_leases"}.Sanitize())
		return err
	})
	if err != nil {
		return fmt.Errorf("empty the outboxes: %w", err)
	}
	return nil
}

// tenantName is the name of tenant i.
func tenantName(i int) string { return fmt.Sprintf("tenant-%04d", i) }

// tenantRun is one measurement's tenants: the set's first n schemas,
// listed in a tenants file of their own whose URLs carry the
// measurement's application_name.
type tenantRun struct {
	schemas []string
	app     string
	file    string
	token   string
}

// use writes the tenants file of the first n schemas (a name and a URL per
// line) and empties their outboxes (the previous measurement's dead rows
// and leases).
func (ts *tenantSet) use(ctx context.Context, b *Bench, n int) (*tenantRun, error) {
	tr := &tenantRun{schemas: ts.schemas[:n], token: randomToken(4)}
	tr.app = tenantsAppPrefix + tr.token
	tr.file = filepath.Join(os.TempDir(), "bench-tenants-"+tr.token)
	var lines strings.Builder
	lines.WriteString("# name url\n")
	for i, schema := range tr.schemas {
		u, err := withParams(b.cfg.pgURL, "search_path", schema, "application_name", tr.app)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&lines, "%s %s\n", tenantName(i), u)
	}
	if err := os.WriteFile(tr.file, []byte(lines.String()), 0o600); err != nil {
		return nil, err
	}
	if err := tr.empty(ctx, b.cfg.pgURL); err != nil {
		_ = os.Remove(tr.file)
		return nil, err
	}
	return tr, nil
}

// dropSchemas drops schemas, tenantsSetupWorkers at a time, each with
// what it holds; failures are warned about.
func (b *Bench) dropSchemas(schemas []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pool, err := newPool(ctx, b.cfg.pgURL, tenantsSetupWorkers)
	if err != nil {
		logf("warning: drop tenant schemas: %v", err)
		return
	}
	defer pool.Close()
	_ = forEach(ctx, len(schemas), tenantsSetupWorkers, func(i int) error {
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schemas[i]}.Sanitize()+" CASCADE"); err != nil {
			logf("warning: drop schema %s: %v", schemas[i], err)
		}
		return nil
	})
}

// forEach runs f(0) … f(n-1), at most workers at once, and returns the
// first error (the others stop taking work once one failed).
func forEach(ctx context.Context, n, workers int, f func(i int) error) error {
	next := atomic.Int64{}
	var (
		wg       sync.WaitGroup
		firstErr error
		once     sync.Once
		failed   atomic.Bool
	)
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || failed.Load() || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { firstErr = err })
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// inSchema sets the transaction's search_path to schema: the writers
// share one pool across every tenant's schema.
func inSchema(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", schema)
	return err
}

// fill writes total messages spread evenly over the tenants (tenant i
// gets its share; keys tenantsKeys/n per tenant) with Courier's outbox
// writer, in transactions of at most 1000 of one tenant.
func (ts *tenantRun) fill(ctx context.Context, pgURL string, total int) error {
	n := len(ts.schemas)
	u, err := withParams(pgURL, "application_name", "bench-setup-"+ts.token)
	if err != nil {
		return err
	}
	pool, err := newPool(ctx, u, tenantsSetupWorkers)
	if err != nil {
		return err
	}
	defer pool.Close()
	keys := max(1, tenantsKeys/n)
	w := outbox.New(postgres.Pgx(), outbox.Config{})
	return forEach(ctx, n, tenantsSetupWorkers, func(i int) error {
		share := total / n
		if i < total%n {
			share++
		}
		for done := 0; done < share; {
			k := min(1000, share-done)
			msgs := make([]courier.Message, k)
			for j := range msgs {
				msgs[j] = courierMessage(keyFor(done+j, keys), payloadFor(done+j))
			}
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := inSchema(ctx, tx, ts.schemas[i]); err != nil {
					return err
				}
				return w.Write(ctx, tx, msgs...)
			})
			if err != nil {
				return fmt.Errorf("fill %s: %w", ts.schemas[i], err)
			}
			done += k
		}
		return nil
	})
}

// left counts the rows left in the tenants' outboxes.
func (ts *tenantRun) left(ctx context.Context, admin *pgxpool.Pool) (int64, error) {
	var total int64
	for start := 0; start < len(ts.schemas); start += 200 {
		parts := []string{}
		for _, s := range ts.schemas[start:min(start+200, len(ts.schemas))] {
			parts = append(parts, "SELECT count(*) AS c FROM "+pgx.Identifier{s, "courier_outbox"}.Sanitize())
		}
		var c int64
		if err := admin.QueryRow(ctx, "SELECT coalesce(sum(c), 0)::bigint FROM ("+strings.Join(parts, " UNION ALL ")+") t").Scan(&c); err != nil {
			return 0, err
		}
		total += c
	}
	return total, nil
}

// diagnose logs, for a drain that failed, the tenants whose outbox still
// holds rows (at most 5): how many, the lowest id, how many wait for a
// retry, and their live leases.
func (ts *tenantRun) diagnose(ctx context.Context, admin *pgxpool.Pool) {
	shown := 0
	for start := 0; start < len(ts.schemas) && shown < 5; start += 200 {
		var parts []string
		for i, schema := range ts.schemas[start:min(start+200, len(ts.schemas))] {
			parts = append(parts, fmt.Sprintf(`SELECT %d AS i, count(*) AS n, min(id) AS low, count(*) FILTER (WHERE retry_at IS NOT NULL) AS retrying,
       (SELECT count(*) FROM %s WHERE until > now()) AS leases FROM %s`, start+i,
				pgx.Identifier{schema, "courier_outbox_leases"}.Sanitize(), pgx.Identifier{schema, "courier_outbox"}.Sanitize()))
		}
		rows, err := admin.Query(ctx, "SELECT * FROM ("+strings.Join(parts, " UNION ALL ")+") t WHERE n > 0 ORDER BY i LIMIT 5")
		if err != nil {
			logf("  look at the outboxes: %v", err)
			return
		}
		var i int
		var n, retrying, leases int64
		var low *int64
		_, err = pgx.ForEachRow(rows, []any{&i, &n, &low, &retrying, &leases}, func() error {
			if shown++; shown <= 5 {
				logf("  %s (%s): %d rows left, lowest id %v, %d waiting for a retry, %d live leases", tenantName(i), ts.schemas[i], n, deref(low), retrying, leases)
			}
			return nil
		})
		if err != nil {
			logf("  look at the outboxes: %v", err)
			return
		}
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// tenantsColdTurns is how many cold turns tenantsColdTurn times.
const tenantsColdTurns = 10

// tenantsColdTurn times what a turn asks of the database before it can
// publish, with no fleet running, one turn at a time, on tenantsColdTurns
// of the tenants (spread over them), their outboxes empty: a new
// connection (dburl.Open, as the fleet's), the relay store's schema check,
// a first Release and a first Claim, the calls a new backend runs for the
// first time. It records the p50 of release + claim.
func (b *Bench) tenantsColdTurn(ctx context.Context, ts *tenantRun) error {
	var took []float64
	for k := range tenantsColdTurns {
		i := k * len(ts.schemas) / tenantsColdTurns
		if k > 0 && i == 0 {
			break
		}
		u, err := withParams(b.cfg.pgURL, "search_path", ts.schemas[i], "application_name", "bench-setup-"+ts.token)
		if err != nil {
			return err
		}
		d, err := dburl.Open(ctx, u, dburl.Options{MaxConns: 1})
		if err != nil {
			return err
		}
		st, err := d.RelayStore(ctx, store.RelayConfig{})
		if err != nil {
			d.Close()
			return err
		}
		t0 := time.Now()
		if _, err := st.Release(ctx, relay.DefaultBatchSize); err != nil {
			d.Close()
			return err
		}
		if _, err := st.Claim(ctx, "bench-cold", relay.DefaultBatchSize, relay.DefaultLeaseDuration); err != nil {
			d.Close()
			return err
		}
		took = append(took, ms(time.Since(t0)))
		d.Close()
	}
	slices.Sort(took)
	b.results.Add("ten_cold", tenantsKey(len(ts.schemas)), quantile(took, 0.5))
	return nil
}

// tenantsRun measures n tenants: setup, drain, idle, steady load.
func (b *Bench) tenantsRun(ctx context.Context, s tenantSettings, n int) error {
	key := tenantsKey(n)
	ts, err := b.tenants.use(ctx, b, n)
	if err != nil {
		return err
	}
	defer os.Remove(ts.file)
	env, err := newStreamEnv(ctx, b.cfg.natsURL, "tenants")
	if err != nil {
		return err
	}
	defer env.Close()
	if err := b.tenantsColdTurn(ctx, ts); err != nil {
		return err
	}
	t0 := time.Now()
	if err := ts.fill(ctx, b.cfg.pgURL, s.n); err != nil {
		return err
	}
	logf("  %s messages written in %s", thousands(int64(s.n)), time.Since(t0).Round(100*time.Millisecond))

	spec := tenantsSpec{TenantsFile: ts.file, NATSURL: env.NATSURL, Prefix: env.Prefix, MaxOpen: s.maxOpen, DrainTimeout: s.drain}
	child, err := startFleetChild(ctx, spec)
	if err != nil {
		return err
	}
	defer func() { child.stop() }()
	bound := s.maxOpen // one connection per open tenant (Relay.Concurrency 1)

	// Drain.
	smp := b.startConnSampler(ctx, ts.app)
	drain, err := child.drain(ctx, s.n)
	conns := smp.stop()
	if drain.Snap.At.IsZero() { // no report
		return fmt.Errorf("drain: %w", err)
	}
	// What the turns did, also (above all) when the drain failed.
	b.results.Add("ten_drain_done", key, float64(drain.Snap.Published))
	b.results.Add("ten_drain_sessions", key, float64(drain.Snap.Opens))
	b.results.Add("ten_drain_turn_rate", key, float64(drain.Snap.Opens)/drain.Elapsed.Seconds())
	b.results.Add("ten_drain_lost", key, float64(drain.Snap.Since.ReleaseCut+drain.Snap.Since.ClaimCut))
	b.results.Add("ten_drain_cut", key, float64(drain.Snap.ClaimsCut+drain.Snap.ReleasesCut))
	logf("  drain: %s", drain.Snap.Since)
	if drain.Snap.Since.ClaimedN > 0 {
		b.results.Add("ten_drain_first_p50", key, drain.Snap.Since.Claimed[0])
		b.results.Add("ten_drain_first_p99", key, drain.Snap.Since.Claimed[1])
	}
	b.recordConns("ten_drain_conns", key, conns, bound)
	var drainErr error
	if err != nil {
		// The failure is reported at the end; the idle and steady phases
		// still run, on emptied outboxes and a fresh fleet.
		drainErr = fmt.Errorf("drain: %w (%d of %d messages published; %s)", err, drain.Snap.Published, s.n, drain.Snap.Since)
		ts.diagnose(ctx, b.admin)
		child.stop()
		if err := ts.empty(ctx, b.cfg.pgURL); err != nil {
			return errors.Join(drainErr, err)
		}
		if child, err = startFleetChild(ctx, spec); err != nil {
			return errors.Join(drainErr, err)
		}
		if _, err := child.drain(ctx, 0); err != nil { // runs the fleet
			return errors.Join(drainErr, err)
		}
	} else {
		if err := b.checkStream(ctx, env, s.n); err != nil {
			b.results.Flag("ten_drain", key, err.Error())
		}
		if left, err := ts.left(ctx, b.admin); err != nil {
			b.results.Flag("ten_drain", key, "outboxes not counted after the drain: "+err.Error())
		} else if left != 0 {
			b.results.Flag("ten_drain", key, fmt.Sprintf("%d messages left in the outboxes after the drain", left))
		}
		per := 100000 / float64(s.n)
		b.results.Add("ten_drain", key, float64(s.n)/drain.Elapsed.Seconds())
		b.results.Add("ten_drain_s", key, drain.Elapsed.Seconds())
		b.results.Add("ten_drain_cpu_relay", key, drain.CPU.Seconds()*per)
		if conns.cpuOK {
			b.results.Add("ten_drain_cpu_pg", key, conns.cpu.Seconds()*per)
		}
		b.results.Add("ten_drain_rss", key, float64(drain.Snap.HWM)/(1<<20))
	}

	// Idle.
	if !sleepCtx(ctx, tenantsSettle) {
		return ctx.Err()
	}
	i0, err := child.snap(ctx)
	if err != nil {
		return err
	}
	smp = b.startConnSampler(ctx, ts.app)
	sleepCtx(ctx, s.idle)
	i1, err := child.snap(ctx)
	conns = smp.stop()
	if err != nil {
		return err
	}
	logf("  idle: %s", i1.Since)
	secs := i1.At.Sub(i0.At).Seconds()
	b.results.Add("ten_idle_claims", key, float64(i1.Claims-i0.Claims)/secs)
	b.results.Add("ten_idle_releases", key, float64(i1.Releases-i0.Releases)/secs)
	b.results.Add("ten_idle_sessions", key, float64(i1.Opens-i0.Opens)/secs)
	b.results.Add("ten_idle_lost", key, float64(i1.Since.ReleaseCut+i1.Since.ClaimCut)/secs)
	b.recordConns("ten_idle_conns", key, conns, bound)
	b.results.Add("ten_idle_cpu_relay", key, (i1.CPU-i0.CPU).Seconds()/secs)
	if conns.cpuOK {
		b.results.Add("ten_idle_cpu_pg", key, conns.cpu.Seconds()/conns.elapsed.Seconds())
	}
	if got := i1.Published - i0.Published; got != 0 {
		b.results.Flag("ten_idle_claims", key, fmt.Sprintf("%d messages published while idle", got))
	}

	// Steady load.
	return errors.Join(drainErr, b.tenantsLatency(ctx, s, ts, env, child, bound))
}

// tenantsLatency offers s.rate messages a second in all, message i to
// tenant i mod n, one per transaction, for s.warmup+s.window, and records
// commit→receipt (by a core NATS subscriber) over the window, the tenants
// served while the load ran, and the fleet's cost meanwhile. Then it stops
// the fleet and offers the same load for tenantsAloneWindow with no fleet
// running: the rate the machine's writers commit without it.
func (b *Bench) tenantsLatency(ctx context.Context, s tenantSettings, ts *tenantRun, env *Env, child *fleetChild, bound int) error {
	n := len(ts.schemas)
	key := tenantsKey(n)
	wu, err := withParams(b.cfg.pgURL, "application_name", "bench-writers-"+ts.token)
	if err != nil {
		return err
	}
	wcfg, err := pgxpool.ParseConfig(wu)
	if err != nil {
		return err
	}
	wcfg.MaxConns = int32(latencyWriters)
	wcfg.ConnConfig.RuntimeParams["synchronous_commit"] = latencySyncCommit
	wpool, err := pgxpool.NewWithConfig(ctx, wcfg)
	if err != nil {
		return err
	}
	defer wpool.Close()
	warmupN := int(float64(s.rate) * s.warmup.Seconds())
	total := warmupN + int(float64(s.rate)*s.window.Seconds())
	nc, err := natsgo.Connect(b.cfg.natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	arr, err := subscribeArrivals(nc, env.Prefix+">", total)
	if err != nil {
		return err
	}
	defer arr.Close()

	start, wait := tenantsOffer(ctx, wpool, ts.schemas, s.rate, total)
	// The window's cost: from the end of the warm-up to the last commit.
	sleepCtx(ctx, time.Until(start.Add(s.warmup)))
	l0, err0 := child.snap(ctx)
	smp := b.startConnSampler(ctx, ts.app)
	commits, end, writeErr := wait()
	l1, err1 := child.snap(ctx)
	conns := smp.stop()
	if writeErr != nil {
		return fmt.Errorf("writer: %w", writeErr)
	}
	if err := cmp.Or(err0, err1); err != nil {
		return err
	}
	offered := float64(total) / end.Sub(start).Seconds()

	// Tenants served while the load ran: those with a message received
	// before the last commit.
	served := map[int]bool{}
	arr.mu.Lock()
	for i, c := range commits {
		if at, ok := arr.at[c.id]; ok && !at.After(end) {
			served[i%n] = true
		}
	}
	arr.mu.Unlock()

	// Wait for every message: tenants that were kept waiting for a turn
	// publish theirs once the load stops.
	t0 := time.Now()
	_ = waitFor(ctx, s.arrive, 10*time.Millisecond, func() (bool, error) { return arr.count() >= total, nil })
	logf("  %d of %d messages received %s after the last commit", arr.count(), total, time.Since(t0).Round(100*time.Millisecond))
	lat, missing := arr.latencies(commits[warmupN:])
	if len(lat) == 0 {
		return fmt.Errorf("no message arrived")
	}
	if offered < 0.95*float64(s.rate) {
		for _, f := range []string{"ten_lat_p50", "ten_lat_p99", "ten_lat_max"} {
			b.results.Flag(f, key, fmt.Sprintf("offered load not held: the writers committed less than 95%% of %s msg/s (see the rows \"rate actually offered\")", thousands(int64(s.rate))))
		}
	}
	b.results.Add("ten_lat_missing", key, float64(missing))
	if missing > 0 {
		for _, f := range []string{"ten_lat_p50", "ten_lat_p99", "ten_lat_max"} {
			b.results.Flag(f, key, fmt.Sprintf("%d of %d messages had not arrived %s after the last commit; percentiles of the others (understated)",
				missing, total-warmupN, s.arrive))
		}
	}
	secs := l1.At.Sub(l0.At).Seconds()
	b.results.Add("ten_lat_p50", key, quantile(lat, 0.50))
	b.results.Add("ten_lat_p99", key, quantile(lat, 0.99))
	b.results.Add("ten_lat_max", key, lat[len(lat)-1])
	b.results.Add("ten_lat_offered", key, offered)
	b.results.Add("ten_lat_served", key, float64(len(served)))
	b.results.Add("ten_lat_claims", key, float64(l1.Claims-l0.Claims)/secs)
	b.results.Add("ten_lat_sessions", key, float64(l1.Opens-l0.Opens)/secs)
	b.results.Add("ten_lat_lost", key, float64(l1.Since.ReleaseCut+l1.Since.ClaimCut)/secs)
	logf("  steady load: %s", l1.Since)
	if l1.Since.ClaimedN > 0 {
		b.results.Add("ten_lat_first_p99", key, l1.Since.Claimed[1])
	}
	b.recordConns("ten_lat_conns", key, conns, bound)
	b.results.Add("ten_lat_cpu_relay", key, (l1.CPU-l0.CPU).Seconds()/secs)
	if conns.cpuOK {
		b.results.Add("ten_lat_cpu_pg", key, conns.cpu.Seconds()/conns.elapsed.Seconds())
	}
	b.results.Add("ten_rss", key, float64(l1.RSS)/(1<<20))
	b.results.Add("ten_heap", key, float64(l1.HeapInuse)/(1<<20))
	b.results.Add("ten_goroutines", key, float64(l1.Goroutines))

	// The same load with no fleet running (its rows stay in the outboxes:
	// the next measurement empties them).
	child.stop()
	alone := int(float64(s.rate) * tenantsAloneWindow.Seconds())
	start, wait = tenantsOffer(ctx, wpool, ts.schemas, s.rate, alone)
	if _, end, err := wait(); err != nil {
		return fmt.Errorf("writer, no fleet running: %w", err)
	} else {
		b.results.Add("ten_alone_offered", key, float64(alone)/end.Sub(start).Seconds())
	}
	return nil
}

// tenantsOffer starts a pacer that offers rate messages a second in all,
// total of them, to latencyWriters writer goroutines on pool, message i
// to tenant i mod len(schemas), one message per transaction (the latency
// section's pacer: a writer that falls behind leaves its turns queued,
// the pacer does not slow down). wait waits for the writers and returns
// each message's commit, when the last commit returned, and the first
// error.
func tenantsOffer(ctx context.Context, pool *pgxpool.Pool, schemas []string, rate, total int) (start time.Time, wait func() ([]commitRecord, time.Time, error)) {
	n := len(schemas)
	w := outbox.New(postgres.Pgx(), outbox.Config{})
	keys := max(1, tenantsKeys/n)
	commits := make([]commitRecord, total)
	turns := make(chan int, total)
	start = time.Now()
	go func() {
		defer close(turns)
		for i := range total {
			due := start.Add(time.Duration(i) * time.Second / time.Duration(rate))
			if d := time.Until(due); d > 20*time.Microsecond {
				time.Sleep(d)
			}
			select {
			case turns <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	var (
		writers  sync.WaitGroup
		writeErr error
		errOnce  sync.Once
	)
	for range latencyWriters {
		writers.Go(func() {
			for i := range turns {
				m := courierMessage(keyFor(i/n, keys), payloadFor(i))
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if err := inSchema(ctx, tx, schemas[i%n]); err != nil {
						return err
					}
					return w.Write(ctx, tx, m)
				})
				if err != nil {
					errOnce.Do(func() { writeErr = err })
					for range turns { // stop the pacer
					}
					return
				}
				commits[i] = commitRecord{id: m.ID.String(), at: time.Now()}
			}
		})
	}
	return start, func() ([]commitRecord, time.Time, error) {
		writers.Wait()
		return commits, time.Now(), cmp.Or(writeErr, ctx.Err())
	}
}

// recordConns records the most connections seen, flagged when over the
// bound (MaxOpen × Relay.Concurrency).
func (b *Bench) recordConns(id, key string, c connReading, bound int) {
	if c.samples == 0 {
		return
	}
	if c.most > bound {
		b.results.Flag(id, key, fmt.Sprintf("more connections than MaxOpen × Relay.Concurrency = %d", bound))
	}
	b.results.Add(id, key, float64(c.most))
}

// sleepCtx sleeps d or until ctx ends, and reports whether ctx is live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// connSampler counts the sessions of one application_name in
// pg_stat_activity every tenantsSample and reads their backends' CPU
// (/proc): a backend that appears counts from zero, one that ends keeps
// what its last sample saw.
type connSampler struct {
	cancel context.CancelFunc
	done   chan connReading
}

// connReading is what a connSampler saw.
type connReading struct {
	samples, most int
	cpu           time.Duration // the backends' CPU over the sampling
	cpuOK         bool
	elapsed       time.Duration
}

func (b *Bench) startConnSampler(ctx context.Context, app string) *connSampler {
	ctx, cancel := context.WithCancel(ctx)
	cs := &connSampler{cancel: cancel, done: make(chan connReading, 1)}
	begin := time.Now()
	first, errFirst := backendsCPU(ctx, b.admin, app)
	go func() {
		var r connReading
		last := cpuSnapshot{}
		sample := func(sctx context.Context) {
			snap, err := backendsCPU(sctx, b.admin, app)
			if err != nil {
				return
			}
			r.samples++
			r.most = max(r.most, len(snap))
			for pid, c := range snap {
				last[pid] = c
			}
		}
		t := time.NewTicker(tenantsSample)
		defer t.Stop()
	loop:
		for {
			select {
			case <-t.C:
				sample(ctx)
			case <-ctx.Done():
				break loop
			}
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		sample(sctx) // the last look, at the stop
		cancel()
		r.elapsed = time.Since(begin)
		if errFirst == nil && r.samples > 0 {
			r.cpu, r.cpuOK = cpuDelta(first, last), true
		}
		cs.done <- r
	}()
	return cs
}

// stop ends the sampling and returns what it saw.
func (cs *connSampler) stop() connReading {
	cs.cancel()
	return <-cs.done
}
