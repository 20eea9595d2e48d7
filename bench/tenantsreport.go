package main

import (
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/tenant"
)

// renderTenants renders the tenants section's table, a column per tenant
// count, and a sentence per finding, from the medians.
func renderTenants(sb *strings.Builder, fn *footnotes, res *Results, cfg config) {
	s := tenantsSettings(cfg)
	w := func(format string, args ...any) { fmt.Fprintf(sb, format, args...) }
	w("A relay fleet (`tenant.Fleet`) over tenants that are PostgreSQL schemas of one database, the same load spread over each tenant count: a drain of %s messages written beforehand (over %s keys in all), then %s of idle, then %s msg/s offered in all (message i to tenant i mod n, one per transaction) for %s after %s of warm-up; `MaxOpen` %d, one connection per open tenant (`Relay.Concurrency` 1), `IdleAfter` %s, `Turn` %s, the relay's defaults otherwise (PostgreSQL's 1 s `PollInterval`, no wake-ups); the fleet in a child process; CPU in cores of the machine's %d:\n\n",
		thousands(int64(s.n)), thousands(tenantsKeys), s.idle, thousands(int64(s.rate)), s.window, s.warmup, s.maxOpen, tenant.DefaultIdleAfter, tenant.DefaultTurn, runtime.NumCPU())
	w("| Figure |")
	for _, n := range tenantCounts {
		w(" %s tenant%s |", thousands(int64(n)), plural(n))
	}
	last, first := tenantCounts[len(tenantCounts)-1], tenantCounts[0]
	ratio := len(tenantCounts) > 1
	if ratio {
		w(" %s ÷ %s |", thousands(int64(last)), thousands(int64(first)))
	}
	w("\n|---|")
	for range tenantCounts {
		w("---:|")
	}
	if ratio {
		w("---:|")
	}
	w("\n")
	for _, f := range tenantFigures {
		if _, ok := res.Samples[f.ID]; !ok {
			continue
		}
		dir := "↑"
		if f.LowerIsBetter {
			dir = "↓"
		}
		w("| %s (%s, %s better) |", f.Label, f.Unit, dir)
		for _, n := range tenantCounts {
			c, _, _ := cell(res, fn, f, tenantsKey(n), tenantsRuns)
			w(" %s |", c)
		}
		if ratio {
			a, okA := res.Stat(f.ID, tenantsKey(first))
			z, okZ := res.Stat(f.ID, tenantsKey(last))
			if okA && okZ && a.Median > 0 {
				w(" %s |", ratioText(z.Median/a.Median))
			} else {
				w(" — |")
			}
		}
		w("\n")
	}
	if lines := tenantsFindings(res, s); len(lines) > 0 {
		w("\nHow the cost grows with the tenants (medians):\n\n%s\n", strings.Join(lines, "\n"))
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// tenantsFindings says, from the medians, how each cost grows with the
// tenants.
func tenantsFindings(res *Results, s tenantSettings) []string {
	med := func(id string, n int) (float64, bool) {
		st, ok := res.Stat(id, tenantsKey(n))
		return st.Median, ok
	}
	idle, turn := tenant.DefaultIdleAfter, tenant.DefaultTurn
	var out []string
	// Drain.
	var parts []string
	cutAny := false
	for _, n := range tenantCounts {
		sess, _ := med("ten_drain_sessions", n)
		rate, _ := med("ten_drain_turn_rate", n)
		lost, _ := med("ten_drain_lost", n)
		cutAny = cutAny || lost > 0
		first, okF := med("ten_drain_first_p50", n)
		turns := fmt.Sprintf("%s turn%s", thousands(int64(sess)), plural(int(sess)))
		if n > 1 {
			turns += fmt.Sprintf(", %.1f a second", rate)
			if lost > 0 {
				turns += fmt.Sprintf(", %s of them cut short before their first claim returned", thousands(int64(lost)))
			}
			if okF {
				turns += fmt.Sprintf("; a turn's first claim returned %.0f ms (p50) after its open began", first)
			}
		}
		if t, ok := med("ten_drain_s", n); ok {
			parts = append(parts, fmt.Sprintf("%.1f s over %s tenant%s (%s)", t, thousands(int64(n)), plural(n), turns))
		} else if done, ok := med("ten_drain_done", n); ok {
			parts = append(parts, fmt.Sprintf("over %s tenants **not finished in %s**: %s of %s messages published (%s)",
				thousands(int64(n)), s.drain, thousands(int64(done)), thousands(int64(s.n)), turns))
		}
	}
	if len(parts) > 0 {
		txt := fmt.Sprintf("- **Drain**: %s. Every tenant with messages needs a turn of its own, and beyond MaxOpen (%d) a turn ends only once the tenant has found nothing for IdleAfter (%s): a drain over n tenants takes at least n ÷ (turns a second), however few messages each has.",
			strings.Join(parts, "; "), s.maxOpen, idle)
		var cold []string
		rising, prev := true, 0.0
		for _, n := range tenantCounts {
			if c, ok := med("ten_cold", n); ok {
				cold = append(cold, fmt.Sprintf("%.0f ms with %s schema%s", c, thousands(int64(n)), plural(n)))
				rising, prev = rising && c > prev, c
			}
		}
		if len(cold) > 0 {
			txt += fmt.Sprintf(" The turns a second are bounded by what a turn costs the database: a new connection, and a new backend's first release and first claim (`courier_release`, `courier_claim` compiled and planned), which took %s in the database, one at a time with no fleet running (p50)",
				strings.Join(cold, ", "))
			if rising && len(cold) > 1 {
				txt += ": the more schemas, the dearer"
			}
			txt += "."
		}
		for _, n := range tenantCounts {
			if rate, ok := med("ten_drain_turn_rate", n); ok && n > s.maxOpen && rate > 0 {
				txt += fmt.Sprintf(" At %.1f turns a second, %s tenants each get a turn once every %.0f s.", rate, thousands(int64(n)), float64(n)/rate)
			}
		}
		if cutAny {
			txt += " Turns cut short before their first claim returned are turns lost: when a turn's first release and claim take longer than IdleAfter while other tenants wait, the turn ends with its claim cut short, and the tenant waits for its next turn, which costs the same again."
		}
		out = append(out, txt)
	}
	// Idle claims and turns.
	parts = nil
	for _, n := range tenantCounts {
		c, ok := med("ten_idle_claims", n)
		if !ok {
			continue
		}
		txt := fmt.Sprintf("%s tenant%s: %s claims/s", thousands(int64(n)), plural(n), formatValue(figureByID("ten_idle_claims"), c))
		if n <= s.maxOpen {
			txt += fmt.Sprintf(" (%.1f per tenant)", c/float64(n))
		}
		sess, okS := med("ten_idle_sessions", n)
		pg, okP := med("ten_idle_cpu_pg", n)
		if okS && sess > 0.5 {
			txt += fmt.Sprintf(", %.1f turns/s", sess)
			if okP {
				txt += fmt.Sprintf(", PostgreSQL's backends %.2f cores (%.0f ms per turn, claims included)", pg, 1000*pg/sess)
			}
		} else if okP {
			txt += fmt.Sprintf(", PostgreSQL's backends %.3f cores", pg)
		}
		parts = append(parts, txt)
	}
	if len(parts) > 0 {
		out = append(out, fmt.Sprintf("- **Idle**: %s. An open idle tenant claims and releases once per poll interval (1 s), so the claims grow with min(tenants, MaxOpen), not with the tenants. Beyond MaxOpen the cost is the turns: while others wait, an idle tenant gives up its place after IdleAfter (%s), so up to MaxOpen ÷ IdleAfter turns a second, each a new connection (a backend forked, its caches filled, `courier_release` and `courier_claim` compiled and planned again).",
			strings.Join(parts, "; "), idle))
	}
	// Connections.
	parts = nil
	for _, n := range tenantCounts {
		var most float64
		found := false
		for _, id := range []string{"ten_drain_conns", "ten_idle_conns", "ten_lat_conns"} {
			if v, ok := med(id, n); ok {
				most, found = max(most, v), true
			}
		}
		if found {
			parts = append(parts, fmt.Sprintf("%s with %s tenant%s", thousands(int64(most)), thousands(int64(n)), plural(n)))
		}
	}
	if len(parts) > 0 {
		out = append(out, fmt.Sprintf("- **Connections** (the most seen in pg_stat_activity, sampled every %s): %s; the bound is MaxOpen × Relay.Concurrency = %d.",
			tenantsSample, strings.Join(parts, ", "), s.maxOpen))
	}
	// Steady load.
	parts = nil
	for _, n := range tenantCounts {
		p50, ok1 := med("ten_lat_p50", n)
		p99, ok2 := med("ten_lat_p99", n)
		if !ok1 || !ok2 {
			continue
		}
		txt := fmt.Sprintf("%s tenant%s: p50 %s ms, p99 %s ms", thousands(int64(n)), plural(n),
			formatValue(figureByID("ten_lat_p50"), p50), formatValue(figureByID("ten_lat_p99"), p99))
		if served, ok := med("ten_lat_served", n); ok {
			txt += fmt.Sprintf(", %s of %s tenants served while the load ran", thousands(int64(served)), thousands(int64(n)))
		}
		if off, ok := med("ten_lat_offered", n); ok {
			txt += fmt.Sprintf(", %s msg/s committed", thousands(int64(off)))
			if alone, ok := med("ten_alone_offered", n); ok {
				txt += fmt.Sprintf(" (%s with no fleet running)", thousands(int64(alone)))
			}
		}
		if n > s.maxOpen {
			rounds := (n + s.maxOpen - 1) / s.maxOpen
			txt += fmt.Sprintf("; a busy tenant keeps its place for Turn (%s), so one waits at least %d × %s = %s between turns", turn, rounds-1, turn, time.Duration(rounds-1)*turn)
			if rate, ok := med("ten_lat_sessions", n); ok && rate > 0 {
				txt += fmt.Sprintf(", and at the %.1f turns a second the fleet made, %.0f s", rate, float64(n)/rate)
			}
		}
		parts = append(parts, txt)
	}
	if len(parts) > 0 {
		if tenantCounts[0] <= s.maxOpen {
			parts[0] += " (within MaxOpen the latency is the poll: a fleet's tenant waits a PollInterval, 1 s, after each claim that found less than a full batch — its `IdleDelay` is the PollInterval)"
		}
		out = append(out, fmt.Sprintf("- **Steady load, %s msg/s in all**: %s. Under a steady load every tenant always has work, so beyond MaxOpen the tenants take turns of up to Turn each: a message waits for its tenant's next turn, and the p99 grows with the time a round of turns over every tenant takes, not with the load.",
			thousands(int64(s.rate)), strings.Join(parts, "; ")))
	}
	// Memory.
	if len(tenantCounts) > 1 {
		first, last := tenantCounts[0], tenantCounts[len(tenantCounts)-1]
		r0, ok0 := med("ten_rss", first)
		r1, ok1 := med("ten_rss", last)
		h0, okh0 := med("ten_heap", first)
		h1, okh1 := med("ten_heap", last)
		g1, _ := med("ten_goroutines", last)
		if ok0 && ok1 && okh0 && okh1 && last > first {
			txt := fmt.Sprintf("- **Memory**: RSS %.1f → %.1f MiB and Go heap %.1f → %.1f MiB from %s to %s tenants (%s goroutines) at the end of the steady load: about %.0f KiB of RSS per tenant listed.",
				r0, r1, h0, h1, thousands(int64(first)), thousands(int64(last)), thousands(int64(g1)), (r1-r0)*1024/float64(last-first))
			var peaks []string
			for _, n := range tenantCounts {
				if v, ok := med("ten_drain_rss", n); ok {
					peaks = append(peaks, fmt.Sprintf("%.0f MiB with %s", v, thousands(int64(n))))
				}
			}
			if len(peaks) > 1 {
				txt += fmt.Sprintf(" The drain's peak RSS (%s) follows the messages in flight, up to MaxOpen batches of up to %s (a tenant's share), not the tenants.",
					strings.Join(peaks, ", "), thousands(relay.DefaultBatchSize))
			}
			out = append(out, txt)
		}
	}
	return out
}

// tenantsSettingsText documents how the tenants section is measured.
func tenantsSettingsText(cfg config) string {
	s := tenantsSettings(cfg)
	return fmt.Sprintf(`- **A relay fleet over many tenants** (Courier alone, `+"`tenant.Fleet`"+`), in the bench's first run only, %d time(s) (`+"`-tenants-runs`"+`):
  for each tenant count n (%s, in increasing order) the database holds n fresh schemas of the section's, added before the count is measured
  (`+"`CREATE SCHEMA`"+` and the scripts of `+"`postgres.ExportSQL`"+` in one transaction per schema, %d schemas at a time: `+"`postgres.Driver`"+`'s
  `+"`Migrate`"+` takes one advisory lock for the whole database, so it migrates one schema at a time; the last schema is checked with
  `+"`CheckSchema`"+`, and every tenant's turn checks its own), dropped (%d at a time) before a next repetition and when the bench ends; the
  measurement empties them first (`+"`TRUNCATE courier_outbox, courier_outbox_leases`"+`). Then, with no fleet running, on %d of the tenants
  one at a time: a new connection, the relay store's schema check, then a first `+"`Release`"+` and a first `+"`Claim`"+`, timed (the calls a new
  backend runs first, as each turn does). Each schema is a tenant
  `+"`tenant-NNNN`"+` whose URL is `+"`-pg`"+` with `+"`search_path`"+` set to its schema and an `+"`application_name`"+` of the measurement's, listed in a
  tenants file (`+"`tenant.File`"+`); one fresh stream per measurement. %s messages in all are written beforehand, the same share in each tenant
  (over %s keys in all: %s ÷ n per tenant), with Courier's outbox writer in transactions of at most 1000 (not timed). The fleet runs in a
  child process (the bench binary re-executed with `+"`-role tenants`"+`): `+"`tenant.New(publisher, tenant.Config{Source: tenant.File(…), MaxOpen: %d})`"+`,
  every other setting its default (`+"`Relay.Concurrency`"+` 1, hence one connection per open tenant; `+"`IdleAfter`"+` %s; `+"`Turn`"+` %s;
  `+"`MaxConnecting`"+` %d; the relay's defaults: batches of 1000, PostgreSQL's 1 s `+"`PollInterval`"+`, and the fleet's `+"`IdleDelay`"+` and
  `+"`ReleaseInterval`"+` equal to it, no wake-ups), Courier's JetStream publisher;
  its `+"`Config.Open`"+` is `+"`dburl.Open`"+`, as the default, wrapped to count the turns (opens) and each tenant's `+"`Claim`"+` and `+"`Release`"+`
  calls, and to time a turn's open, schema check (`+"`RelayStore`"+`), first release and first claim. **Drain**: from `+"`Fleet.Run`"+` to the
  last message marked published (the relays' `+"`Observer.Completed`"+`), at most %s; the stream must hold
  every message and the outboxes be empty. A drain that does not finish is listed under the failed measurements with what its turns
  did, and the section goes on with emptied outboxes and a new fleet. **Idle**: %s after the drain, %s with nothing to publish:
  claims, releases and turns a second. **Steady load**: %d writer goroutines (one pool, `+"`set_config('search_path', schema, true)`"+` in
  each transaction, synchronous_commit %s) fed by a pacer at %s msg/s in all, message i to tenant i mod n, one message per transaction,
  for %s of warm-up and %s measured; commit→publish is from `+"`Commit`"+` returning to a core NATS subscriber receiving the message (the
  latency section's method), waiting up to %s after the last commit for the last ones; "tenants served" counts the tenants with a
  message received before the last commit. Then, the fleet stopped, the same pacer and writers for %s: the rate the machine commits
  with no fleet running. **Connections**: the fleet's sessions in pg_stat_activity (by the tenants' application_name) counted every %s,
  the most seen. **CPU**: the child's user+sys time (getrusage) over the phase; the PostgreSQL backends serving the fleet read from
  /proc at each sample (a backend that appears counts from zero; what a backend uses after its last sample is missed, so with tenants
  taking turns the figure is a little low), per 100k messages for the drain, in cores for the idle and steady phases. **Memory**: the
  child's peak RSS (VmHWM) at the end of the drain; its RSS (VmRSS), Go heap in use and goroutines at the end of the steady load. The
  section refuses a `+"`-tenants-max-open`"+` above %d, or one the server's free connections cannot hold beside the writers; it first drops
  the schemas named `+"`%s…`"+` whose comment names a bench process that no longer runs (an interrupted run's).
`, tenantsRuns, joinInts(tenantCounts), tenantsSetupWorkers, tenantsSetupWorkers, tenantsColdTurns, thousands(int64(s.n)),
		thousands(tenantsKeys), thousands(tenantsKeys), s.maxOpen, tenant.DefaultIdleAfter, tenant.DefaultTurn, tenant.DefaultMaxConnecting,
		s.drain, tenantsSettle, s.idle, latencyWriters, latencySyncCommit, thousands(int64(s.rate)), s.warmup, s.window, s.arrive,
		tenantsAloneWindow, tenantsSample, tenantsMaxConnsCap, tenantsSchemaPrefix)
}
