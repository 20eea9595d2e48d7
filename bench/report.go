package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
)

// MachineInfo describes where and with what the benchmark ran.
type MachineInfo struct {
	// Start and End bound the measurements.
	Start, End time.Time
	// NProc is the number of CPUs Go sees.
	NProc int
	// CPUModel is /proc/cpuinfo's model name.
	CPUModel string
	// Memory is /proc/meminfo's MemTotal.
	Memory string
	// Kernel is the kernel release.
	Kernel string
	// Go is the Go version the bench was built with.
	Go string
	// PostgreSQL is the server's version() string.
	PostgreSQL string
	// PGSettings are the server settings that matter most here.
	PGSettings string
	// NATS is the server's version.
	NATS string
	// SQLite and MySQL describe the dialects section's databases (empty
	// when it did not run).
	SQLite, MySQL string
	// RabbitMQ describes the brokers section's RabbitMQ server (empty when
	// it did not run).
	RabbitMQ string
	// NATSCurrent describes the brokers section's -nats-server binary
	// (empty when it did not run).
	NATSCurrent string
	// Libraries lists module paths and versions of the systems under test.
	Libraries [][2]string
	// CourierRev is the git revision of the Courier checkout measured.
	CourierRev string
	// Command is the command line.
	Command string
}

// collectMachineInfo gathers MachineInfo.
func collectMachineInfo(ctx context.Context, b *Bench) (*MachineInfo, error) {
	info := &MachineInfo{NProc: runtime.NumCPU(), Go: runtime.Version(), Command: "go run . " + strings.Join(os.Args[1:], " ")}
	if c, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(c), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				info.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if m, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(m), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && k == "MemTotal" {
				var kb int64
				if _, err := fmt.Sscan(strings.TrimSpace(v), &kb); err == nil {
					info.Memory = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
				}
			}
		}
	}
	if k, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		info.Kernel = strings.TrimSpace(string(k))
	}
	if err := b.admin.QueryRow(ctx, "SELECT version()").Scan(&info.PostgreSQL); err != nil {
		return nil, err
	}
	var settings []string
	for _, name := range []string{"synchronous_commit", "fsync", "shared_buffers", "max_connections", "autovacuum", "jit", "jit_above_cost"} {
		var v string
		if err := b.admin.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err == nil {
			settings = append(settings, name+"="+v)
		}
	}
	info.PGSettings = strings.Join(settings, ", ")
	nc, err := natsgo.Connect(b.cfg.natsURL)
	if err != nil {
		return nil, fmt.Errorf("connect to nats: %w", err)
	}
	info.NATS = nc.ConnectedServerVersion()
	nc.Close()
	if bi, ok := debug.ReadBuildInfo(); ok {
		want := []string{
			"github.com/courier-go/courier",
			"github.com/ThreeDotsLabs/watermill",
			"github.com/ThreeDotsLabs/watermill-sql/v4",
			"github.com/ThreeDotsLabs/watermill-nats/v2",
			"github.com/riverqueue/river",
			"github.com/riverqueue/river/riverdriver/riverpgxv5",
			"github.com/jackc/pgx/v5",
			"modernc.org/sqlite",
			"github.com/go-sql-driver/mysql",
			"github.com/nats-io/nats.go",
			"github.com/twmb/franz-go",
			"github.com/twmb/franz-go/pkg/kfake",
			"github.com/rabbitmq/amqp091-go",
			"gonum.org/v1/plot",
		}
		for _, path := range want {
			for _, d := range bi.Deps {
				if d.Path != path {
					continue
				}
				v := d.Version
				if d.Replace != nil {
					v += " => " + d.Replace.Path
				}
				info.Libraries = append(info.Libraries, [2]string{path, v})
			}
		}
	}
	if slices.Contains(b.cfg.only, "dialects") || slices.Contains(b.cfg.only, "adversity") {
		info.SQLite = sqliteVersion(ctx)
		info.MySQL = mysqlServerInfo(ctx, b.cfg.mysqlDSN)
	}
	if slices.Contains(b.cfg.only, "brokers") || slices.Contains(b.cfg.only, "consumers") {
		info.RabbitMQ = rabbitMQVersion(b.cfg.amqpURL)
		info.NATSCurrent = natsServerVersion(b.cfg.natsServer)
	}
	info.CourierRev = courierRevision()
	return info, nil
}

// courierRevision describes the parent checkout with read-only git
// commands (no optional locks, so the index is never rewritten).
func courierRevision() string {
	out, err := exec.Command("git", "--no-optional-locks", "-C", "..", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(out))
	st, err := exec.Command("git", "--no-optional-locks", "-C", "..", "status", "--porcelain", "--untracked-files=no").Output()
	if err == nil && len(strings.TrimSpace(string(st))) > 0 {
		rev += " with uncommitted changes"
	}
	return rev
}

// footnotes numbers the distinct remarks attached to cells.
type footnotes struct {
	list   []string
	spread bool // some cell is marked for its spread
}

func (f *footnotes) ref(remark string) int {
	for i, r := range f.list {
		if r == remark {
			return i + 1
		}
	}
	f.list = append(f.list, remark)
	return len(f.list)
}

// cell formats one cell: median (min–max), with ⚠ and footnote numbers for
// its remarks and for a spread above maxSpread.
func cell(res *Results, fn *footnotes, f Figure, system string, runs int) (string, Stat, bool) {
	st, ok := res.Stat(f.ID, system)
	if !ok {
		return "—", st, false
	}
	s := formatValue(f, st.Median)
	if st.N > 1 {
		s += " (" + formatValue(f, st.Min) + "–" + formatValue(f, st.Max) + ")"
	}
	var refs []string
	remarks := res.FlagsOf(f.ID, system)
	if st.N > 1 && st.Spread() > maxSpread {
		s += fmt.Sprintf(" ⚠spread %.0f%%", 100*st.Spread())
		fn.spread = true
	}
	if skipped := res.SkippedOf(f.ID, system); len(skipped) > 0 && st.N < runs {
		remarks = append(remarks, fmt.Sprintf("not measured in %d of %d runs: %s", runs-st.N, runs, strings.Join(skipped, "; ")))
	} else if st.N < runs {
		remarks = append(remarks, fmt.Sprintf("only %d of %d runs succeeded (see Failed measurements)", st.N, runs))
	}
	for _, r := range remarks {
		refs = append(refs, fmt.Sprint(fn.ref(r)))
	}
	if len(refs) > 0 {
		s += " ⚠" + strings.Join(refs, ",")
	}
	return s, st, true
}

// renderTables renders the comparison table, the reference table, the
// table of Courier's relay per store dialect, the adversity section's
// tables and the table of Courier's relay per broker, leaving out a table
// none of whose figures was measured.
func renderTables(res *Results, cfg config) string {
	systems, runs, n := cfg.systems, cfg.runs, cfg.drainN
	var sb strings.Builder
	fn := &footnotes{}
	if measured(res, figures) {
		renderComparison(&sb, fn, res, systems, runs)
	}
	if measured(res, referenceFigures) {
		if sb.Len() > 0 {
			sb.WriteString("\n")
		}
		sb.WriteString("Physical limits and baseline (one figure each, no system):\n\n| Figure | Value |\n|---|---:|\n")
		for _, f := range referenceFigures {
			if _, ok := res.Samples[f.ID]; !ok {
				continue
			}
			c, _, _ := cell(res, fn, f, reference, runs)
			fmt.Fprintf(&sb, "| %s (%s) | %s |\n", f.Label, f.Unit, c)
		}
	}
	if measured(res, dialectFigures) || skippedAny(res, dialectFigures) {
		if sb.Len() > 0 {
			sb.WriteString("\n")
		}
		renderDialects(&sb, fn, res, runs, n)
	}
	if measured(res, adversityFigures) || skippedAny(res, adversityFigures) {
		if sb.Len() > 0 {
			sb.WriteString("\n")
		}
		renderAdversity(&sb, fn, res, cfg)
	}
	if measured(res, brokerFigures) || skippedAny(res, brokerFigures) {
		if sb.Len() > 0 {
			sb.WriteString("\n")
		}
		renderBrokers(&sb, fn, res, cfg)
	}
	if measured(res, cdcFigures) {
		if sb.Len() > 0 {
			sb.WriteString("\n")
		}
		renderCDC(&sb, fn, res, runs, n)
	}
	if measured(res, cleanupFigures) {
		if sb.Len() > 0 {
			sb.WriteString("\n")
		}
		renderCleanup(&sb, fn, res, cfg)
	}
	if measured(res, scheduledFigures) {
		if sb.Len() > 0 {
			sb.WriteString("\n")
		}
		renderScheduled(&sb, fn, res, cfg)
	}
	if measured(res, consumerFigures) || skippedAny(res, consumerFigures) {
		if sb.Len() > 0 {
			sb.WriteString("\n")
		}
		renderConsumers(&sb, fn, res, cfg)
	}
	if measured(res, handoverFigures) || skippedAny(res, handoverFigures) {
		if sb.Len() > 0 {
			sb.WriteString("\n")
		}
		renderHandover(&sb, fn, res, cfg)
	}
	if measured(res, tenantFigures) {
		if sb.Len() > 0 {
			sb.WriteString("\n")
		}
		renderTenants(&sb, fn, res, cfg)
	}
	if measured(res, producerFigures) || skippedAny(res, producerFigures) {
		if sb.Len() > 0 {
			sb.WriteString("\n")
		}
		renderProducers(&sb, fn, res, cfg)
	}
	if measured(res, auditFigures) {
		if sb.Len() > 0 {
			sb.WriteString("\n")
		}
		renderAudit(&sb, fn, res, cfg)
	}
	if fn.spread || len(fn.list) > 0 {
		sb.WriteString("\n")
	}
	if fn.spread {
		fmt.Fprintf(&sb, "⚠spread N%%: the runs' spread (max−min)/median is N%%, above %.0f%%: a noisy figure.  \n", 100*maxSpread)
	}
	if len(fn.list) > 0 {
		for i, r := range fn.list {
			fmt.Fprintf(&sb, "⚠%d: %s  \n", i+1, r)
		}
	}
	return sb.String()
}

// inProcess reports whether the dialect named name runs inside the relay
// process (see benchDialect).
func inProcess(name string) bool {
	d, err := dialectByName(name)
	return err == nil && d.inProcess
}

// measured reports whether any of figs has samples.
func measured(res *Results, figs []Figure) bool {
	for _, f := range figs {
		if _, ok := res.Samples[f.ID]; ok {
			return true
		}
	}
	return false
}

// renderDialects renders the table of Courier's relay drain per store
// dialect: one row per dialect, one column per dialect figure.
func renderDialects(sb *strings.Builder, fn *footnotes, res *Results, runs, n int) {
	fmt.Fprintf(sb, "Courier relay drain per store dialect (%s messages, %s keys):\n\n| Store dialect |", thousands(int64(n)), thousands(dialectKeys))
	for _, f := range dialectFigures {
		dir := "↑"
		if f.LowerIsBetter {
			dir = "↓"
		}
		fmt.Fprintf(sb, " %s (%s, %s better) |", f.Label, f.Unit, dir)
	}
	sb.WriteString("\n|---|")
	for range dialectFigures {
		sb.WriteString("---:|")
	}
	sb.WriteString("\n")
	for _, d := range dialects {
		fmt.Fprintf(sb, "| %s |", dialectName(d))
		for i, f := range dialectFigures {
			c, _, ok := cell(res, fn, f, d, runs)
			switch {
			case ok:
			case i == 0 && len(res.SkippedOf(f.ID, d)) > 0:
				c = "not measured (" + strings.Join(res.SkippedOf(f.ID, d), "; ") + ")"
			case f.ID == "dialect_cpu_db" && inProcess(d) && measured(res, dialectFigures[:1]):
				c = "in the relay process"
			}
			sb.WriteString(" " + c + " |")
		}
		sb.WriteString("\n")
	}
	sb.WriteString("\nDatabase server CPU: PostgreSQL, the backends serving the relay's connections; MySQL/MariaDB, the whole server process (all its threads and any other client's load); SQLite runs inside the relay process, so its relay CPU includes the database's work.\n")
}

// renderComparison renders the comparison table: one row per figure, one
// column per system, then Courier's ratio to each peer.
func renderComparison(sb *strings.Builder, fn *footnotes, res *Results, systems []string, runs int) {
	peers := []string{}
	for _, s := range systems {
		if s != "courier" {
			peers = append(peers, s)
		}
	}
	hasCourier := len(peers) < len(systems)
	sb.WriteString("| Figure | ")
	for i, s := range systems {
		if i > 0 {
			sb.WriteString(" | ")
		}
		sb.WriteString(displayName(s))
	}
	for _, p := range peers {
		if hasCourier {
			sb.WriteString(" | Courier/" + displayName(p))
		}
	}
	sb.WriteString(" |\n|---|")
	for range systems {
		sb.WriteString("---:|")
	}
	if hasCourier {
		for range peers {
			sb.WriteString("---:|")
		}
	}
	sb.WriteString("\n")
	for _, f := range figures {
		if _, ok := res.Samples[f.ID]; !ok {
			continue
		}
		dir := "↑"
		if f.LowerIsBetter {
			dir = "↓"
		}
		fmt.Fprintf(sb, "| %s (%s, %s better) |", f.Label, f.Unit, dir)
		medians := map[string]float64{}
		for _, s := range systems {
			c, st, ok := cell(res, fn, f, s, runs)
			if ok {
				medians[s] = st.Median
			}
			sb.WriteString(" " + c + " |")
		}
		if hasCourier {
			for _, p := range peers {
				c, okC := medians["courier"]
				v, okP := medians[p]
				if !okC || !okP || v == 0 {
					sb.WriteString(" — |")
					continue
				}
				fmt.Fprintf(sb, " %.2f× |", c/v)
			}
		}
		sb.WriteString("\n")
	}
}

// renderReport renders RESULTS.md.
func renderReport(info *MachineInfo, cfg config, res *Results, failed []string) string {
	var sb strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	w("# Courier vs. Watermill vs. River\n\n")
	w("Generated by `bench/` (`%s`). ", info.Command)
	mode := fmt.Sprintf("%d run(s) per figure; each cell is the median with the range (min–max) in brackets", cfg.runs)
	if cfg.quick {
		mode += "; **-quick mode: small counts, not for publication**"
	}
	w("%s.\n\n", mode)
	w("- Run: %s to %s (%s)\n", info.Start.Format("2006-01-02 15:04:05 MST"), info.End.Format("15:04:05 MST"), info.End.Sub(info.Start).Round(time.Second))
	w("- Machine: %d CPUs (%s), %s RAM, Linux %s\n", info.NProc, info.CPUModel, info.Memory, info.Kernel)
	w("- Go: %s\n", info.Go)
	w("- PostgreSQL: %s (%s)\n", info.PostgreSQL, info.PGSettings)
	w("- NATS server: %s, JetStream file storage, default sync_interval (same stream settings for every system: file storage, 2-minute duplicate window)\n", info.NATS)
	if info.SQLite != "" {
		w("- SQLite (dialects table): %s\n", info.SQLite)
	}
	if info.MySQL != "" {
		w("- MySQL/MariaDB (dialects table): %s\n", info.MySQL)
	}
	if info.RabbitMQ != "" {
		w("- RabbitMQ (brokers and consumers tables): %s\n", info.RabbitMQ)
	}
	if info.NATSCurrent != "" {
		w("- Current NATS server (brokers and consumers tables, started by the bench: one node, and a 3-node cluster): %s, JetStream file storage, default sync_interval\n", info.NATSCurrent)
	}
	w("- Courier: local checkout, git %s\n", info.CourierRev)
	w("- Libraries:\n")
	for _, l := range info.Libraries {
		w("  - `%s` %s\n", l[0], l[1])
	}
	w("\nThe machine has two cores shared by PostgreSQL, NATS, the relay and the load generator, and other work (tests) may have run at the same time: treat single figures with caution, ratios with less.\n\n")
	w("## Results\n\n")
	w("%s\n", renderTables(res, cfg))
	if cfg.chart != "" {
		w("![results](%s)\n\n", cfg.chart)
	}
	if len(failed) > 0 {
		w("### Failed measurements\n\n")
		for _, f := range failed {
			w("- %s\n", f)
		}
		w("\n")
	}
	w("%s", targetsText(res))
	w("%s", profileText())
	w("%s", notesText(res, cfg))
	w("%s", settingsText(cfg))
	return sb.String()
}

// notesText explains what the figures do and do not say, partly from the
// results themselves.
func notesText(res *Results, cfg config) string {
	var sb strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	w("## Notes\n\n")
	w("- Ratios are Courier's median divided by the peer's: above 1 means more for Courier, which is better for rows marked ↑ and worse for rows marked ↓.\n")
	w("- Only Courier keeps per-key order. For Watermill and River the key is just data in the payload/metadata, so their \"1 key\" drain does the same work as the 10,000-key one; Courier's one-key drain publishes one message of the key at a time (the next waits for the previous ack), which is the price of its order guarantee. Watermill's forwarder publishes everything in one global order, River in none.\n")
	offered := []string{}
	low := false
	for _, s := range cfg.systems {
		if st, ok := res.Stat("lat5000_offered", s); ok {
			offered = append(offered, fmt.Sprintf("%s %s", displayName(s), formatValue(figureByID("lat5000_offered"), st.Median)))
			low = low || st.Median < 0.95*5000
		}
	}
	if low {
		base := ""
		if st, ok := res.Stat("ref_plain_insert", reference); ok {
			base = fmt.Sprintf(" (the plain one-row insert reached %s tx/s with 8 writers and no relay running)", formatValue(figureByID("ref_plain_insert"), st.Median))
		}
		w("- **The 5,000 msg/s load could not be offered on this machine.** One message per transaction means 5,000 commits/s, each flushed to the WAL (synchronous_commit=on), and the same two cores also run the relay, NATS and the subscriber%s. Writers committed (median) %s msg/s instead, so the 5,000 rows show each system at the highest load this machine could offer while running it, not at 5,000 msg/s; they are marked. More writer goroutines (32, 64) or `-latency-sync-commit off` did not get near 5,000 during development either: the machine is CPU-bound.\n",
			base, strings.Join(offered, ", "))
	}
	w("- River's FetchCooldown also spaces its insert notifications (at most one NOTIFY per queue per cooldown and inserting client); with the riverbench value of 2 ms the inserting transactions may notify up to 500 times a second and the working client fetches as often. In some development runs this kept River's writers below 1,000 msg/s, while River's default of 100 ms on the inserting client held 1,000 msg/s with a similar p50. The settings are the riverbench ones for every River figure.\n")
	w("- Watermill's default PostgreSQL schema only reads rows whose transaction id is below the oldest transaction still running on the server (`pg_snapshot_xmin`), so a long transaction anywhere on the server holds its delivery back; other work may have used the server during this run.\n")
	w("- In the latency test the relay runs in the same process as the writers and the subscriber (the drains run it alone in a child process).\n")
	w("- PostgreSQL's background processes (WAL writer, checkpointer, autovacuum) are not in the PostgreSQL CPU row; nats-server's CPU includes whatever else used that server during the drain.\n\n")
	return sb.String()
}

// settingsText documents each system's settings and how each figure is
// measured.
func settingsText(cfg config) string {
	return fmt.Sprintf(`## Settings

Every message looks the same in every system: topic/subject `+"`<prefix>.events`"+`, a %d-byte JSON payload, a key, a type, a version,
an occurrence time and a content type (Courier: columns and headers; Watermill: metadata, which watermill-nats turns into
headers; River: job arguments, which the worker turns into headers), and a Nats-Msg-Id (JetStream deduplication) in all three.

**Courier** (this repository): `+"`outbox.New(postgres.Pgx(), outbox.Config{})`"+` writes in the business transaction; one relay,
`+"`relay.New(store, publisher, relay.Config{Notifier: postgres.NewNotifier(...)})`"+` with every other setting at its default
(batches of 1000, 2 batches in flight, 30 s lease, LISTEN/NOTIFY wake-ups, 1 s fallback poll), Courier's JetStream publisher
(asynchronous publishes, all acks awaited, 16384 pending at most), `+"`store.RelayConfig{}`"+` (published rows deleted).

**Watermill** (`+"`components/forwarder`"+`): the business transaction publishes through a watermill-sql `+"`Publisher`"+` created on
the transaction (`+"`TxFromPgx`"+`), decorated by `+"`forwarder.NewPublisher`"+` (JSON envelope), as Watermill documents. The
forwarder reads with watermill-sql's `+"`Subscriber`"+` through pgx (`+"`BeginnerFromPgx`"+`) with the documented PostgreSQL pair
`+"`DefaultPostgreSQLSchema`"+` + `+"`DefaultPostgreSQLOffsetsAdapter`"+`, `+"`SubscribeBatchSize: %d`"+` (the documented
performance knob, default 100), `+"`PollInterval: %s`"+` (default 1 s; Watermill has no wake-up, so this bounds its latency),
other settings default; it publishes with watermill-nats's `+"`pkg/nats`"+` Publisher with JetStream on (the one watermill-nats
recommends for production; its `+"`pkg/jetstream`"+` is experimental), `+"`TrackMsgId: true`"+` and the `+"`NATSMarshaler`"+`
(metadata as headers). The forwarder handles one message at a time and each publish waits for its ack.

**River** (used as the relay): one `+"`PublishArgs`"+` job per message, inserted with `+"`client.InsertTx`"+` in the business
transaction (an insert-only client); the working client uses River's own benchmark settings (riverbench: `+"`FetchCooldown: %s`"+`,
`+"`FetchPollInterval: %s`"+`, `+"`MaxWorkers: %d`"+`; defaults are 100 ms, 1 s and none), LISTEN/NOTIFY on, other settings
default (completed jobs are kept, as River does by default). The worker publishes with nats.go's `+"`jetstream.PublishMsg`"+`,
waiting for the ack; an error fails the job (River retries it).

All relays use their own pgx pool (at most 10 connections) and their own NATS connection.

### How each figure is measured

- **Drain**: %s messages are written beforehand (transactions of 1000, keys spread over 10,000 keys or all on one key), then a
  child process (the bench binary re-executed with `+"`-role drain`"+`) starts the relay and stops the clock when every message
  was acknowledged by JetStream *and* the relay's bookkeeping is committed (Courier: marked, which its counter waits for;
  Watermill: the consumer group's acked offset reaches the last message; River: a completion event for every job). Only Courier
  orders by key; for Watermill and River the key only changes the payload/metadata, so their one-key figure is the same work
  as the 10,000-key one. The stream is checked to hold exactly the messages written. Every system's stream allows atomic
  batches where the server takes them (nats-server 2.12 and later), as Courier's `+"`EnsureStream`"+` creates it; only Courier's
  publisher uses them (a one-key run as an atomic batch).
- **Commit→publish latency**: a pacer offers the rate steadily to %d writer goroutines, one message per transaction (no other
  row), for %s after a %s warm-up whose messages are discarded; latency is from `+"`Commit`"+` returning to a core NATS
  subscriber (own connection) receiving the message. A cell is marked when the offered load was not held (less than 95%%) or
  when messages had not arrived %s after the last commit.
- **Write path**: %d writers for %s (after %s warm-up), each transaction inserting one `+"`orders`"+` row plus, for each system,
  one message; no relay runs. The plain insert alone is in the baseline table.
- **Database side alone**: %s messages; Courier: its store's `+"`Claim`"+`(1000)+`+"`Complete`"+` loop; Watermill: the same
  forwarder with a publisher that discards; River: the same client with a worker that does nothing. The minimal queue in the
  baseline table is one claimer doing `+"`SELECT id, payload … ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED`"+` and `+"`DELETE … WHERE id = ANY(…)`"+` in one transaction.
- **Broker side alone**: %s messages (Watermill: %s, as they go one after another); Courier: `+"`Publisher.Publish`"+` with batches of 1000; Watermill: watermill-nats's publisher
  called once per message, as the forwarder calls it; River: the worker's publish (synchronous `+"`PublishMsg`"+`) run from
  %d goroutines, as River's workers would run it (River itself is not involved). The raw ceiling is nats.go's
  `+"`PublishMsgAsync`"+` of all messages (16384 pending at most) and waiting for every ack.
- **CPU and memory** (from the 10,000-key drain): the relay child's user+sys time during the drain (`+"`getrusage`"+`), its peak RSS
  (VmHWM from /proc/self/status at the end of the drain, whole process life: `+"`ru_maxrss`"+` cannot be used because Go starts
  children with vfork, so the kernel records the parent's peak as the child's maxrss at exec), the CPU of the PostgreSQL backends serving the relay's connections (found by
  application_name in pg_stat_activity, read from /proc/<pid>/stat; PostgreSQL's background processes — WAL writer,
  checkpointer, autovacuum — are not included), and nats-server's CPU over the drain (/proc/<pid>/stat; it includes any other
  client's load on that server at the time). Per 100,000 messages.
- Systems run one after another, never concurrently; their order rotates from run to run.
`,
		payloadSize, watermillBatch, watermillPoll, riverFetchCooldown, riverFetchPollInterval, riverMaxWorkers,
		thousands(int64(cfg.drainN)), latencyWriters, cfg.latencyWindow, cfg.latencyWarmup, cfg.latencyDrainTimeout,
		writeWriters, cfg.writeDuration, cfg.writeWarmup, thousands(int64(cfg.limitsN)), thousands(int64(cfg.limitsN)), thousands(int64(cfg.syncN)), riverMaxWorkers) +
		dialectSettingsText(cfg) + adversitySettingsText(cfg) + brokerSettingsText(cfg) + cleanupSettingsText(cfg) + scheduledSettingsText(cfg) + consumersSettingsText(cfg) + tenantsSettingsText(cfg) + producersSettingsText(cfg) + auditSettingsText(cfg)
}

// dialectSettingsText documents how the table of Courier's relay per store
// dialect is measured.
func dialectSettingsText(cfg config) string {
	return fmt.Sprintf(`- **Courier relay drain per store dialect**: the drain above (%s messages over %d keys, written beforehand with Courier's
  outbox writer in transactions of 1000, then drained by a child process, the clock stopped when every message is acknowledged by
  JetStream and marked) for each of Courier's store dialects, into a fresh stream with the same settings as every other drain.
  PostgreSQL: the comparison table's Courier drain (same schema, writer, store and LISTEN/NOTIFY notifier), measured again in this
  section, so it differs from the comparison table's 10,000-key cell by the machine's noise only. SQLite: a file in a temporary
  directory opened with `+"`sqlite.Open`"+` (WAL, synchronous=FULL, 10 s busy timeout), its `+"`sqlite.Driver`"+` (through `+"`dburl.Open`"+`): `+"`Migrate`"+`, the writer on
  `+"`Inserter()`"+`, the relay on `+"`RelayStore(ctx, store.RelayConfig{})`"+`. MySQL/MariaDB: a fresh database
  on the `+"`-mysql`"+` server, its `+"`mysql.Driver`"+`: `+"`Migrate`"+`, the writer on `+"`Inserter()`"+`, the relay on
  `+"`RelayStore(ctx, store.RelayConfig{})`"+`. SQLite and MySQL relays poll (no notifier: neither dialect can wake a relay in
  another process), which changes nothing while the outbox is full; every relay uses default settings and at most 10 connections.
  The stream is checked to hold exactly the messages written and the outbox to be empty afterwards. The relay's CPU is the child's
  user+sys time (for SQLite it includes the database's work); the database server's CPU is that of the PostgreSQL backends serving
  the relay, or of the whole MariaDB/MySQL server process (when it runs on this machine). Per 100,000 messages. The database, file or
  schema is removed afterwards; a MySQL server that cannot be reached is reported as not measured.
`, thousands(int64(cfg.drainN)), dialectKeys)
}

// targetsText sets Courier's medians against its targets: drain throughput
// at least 60,000 msg/s and at least half of the machine's combined limit
// (claim + mark with no broker, and publish with no database, each taking
// its share of the same CPUs: 1/(1/db + 1/broker)); commit→publish p99 under
// 10 ms at 1,000 msg/s; the outbox's write-path overhead within 10% of the
// plain insert.
func targetsText(res *Results) string {
	var sb strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	drain, okDrain := res.Stat("drain_keys10000", "courier")
	db, okDB := res.Stat("limit_db", "courier")
	broker, okBroker := res.Stat("ref_js_async", reference)
	p99, okP99 := res.Stat("lat1000_p99", "courier")
	write, okWrite := res.Stat("write_tx", "courier")
	plain, okPlain := res.Stat("ref_plain_insert", reference)
	if !okDrain && !okP99 && !okWrite {
		return ""
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	w("## Targets\n\n| Target | Courier (median) | |\n|---|---:|---|\n")
	if okDrain {
		msgs := func(v float64) string { return formatValue(figureByID("drain_keys10000"), v) }
		w("| Drain ≥ 60,000 msg/s (10,000 keys) | %s msg/s | %s |\n", msgs(drain.Median), verdict(drain.Median >= 60000))
		if okDB && okBroker && db.Median > 0 && broker.Median > 0 {
			limit := 1 / (1/db.Median + 1/broker.Median)
			w("| Drain ≥ half the combined limit 1/(1/claim+mark + 1/publish) = %s msg/s | %.0f%% of it | %s |\n",
				msgs(limit), 100*drain.Median/limit, verdict(drain.Median >= limit/2))
		}
	}
	if okP99 {
		w("| Commit→publish p99 < 10 ms @ 1,000 msg/s | %.2f ms | %s |\n", p99.Median, verdict(p99.Median < 10))
	}
	if okWrite && okPlain && plain.Median > 0 {
		overhead := 100 * (1 - write.Median/plain.Median)
		txs := func(v float64) string { return formatValue(figureByID("write_tx"), v) }
		w("| Outbox write-path overhead ≤ 10%% of the plain insert | %.0f%% (%s vs %s tx/s) | %s |\n",
			overhead, txs(write.Median), txs(plain.Median), verdict(overhead <= 10))
		if piped, ok := res.Stat("ref_write_pipelined", reference); ok {
			overhead := 100 * (1 - piped.Median/plain.Median)
			w("| … with the message pipelined (`postgres.QueueMessages`) | %.0f%% (%s vs %s tx/s) | %s |\n",
				overhead, txs(piped.Median), txs(plain.Median), verdict(overhead <= 10))
		}
	}
	w("\n")
	return sb.String()
}

// profileText is PROFILE.md, the record of what profiling found and what
// changed, so that every regenerated report carries it.
func profileText() string {
	b, err := os.ReadFile("PROFILE.md")
	if err != nil {
		return ""
	}
	return string(b) + "\n"
}
