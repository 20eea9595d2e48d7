package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/kafka"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// The audit section measures what the continuous audit (audit.Watcher)
// costs per message. A relay with KeepPublished drains auditCounts
// messages (1,000 keys) from a fresh schema into a fresh stream, so that
// the database holds their published copies and the stream the messages,
// published over the drain's time. The relay stops; then a Watcher,
// alone in the process, replays that time on a clock of its own: a pass
// every Interval of the replayed time, each reading what is new since the
// last one plus Slack, as it would live. Interval is a tenth of the
// drain's time and Slack a third of Interval, the ratio of the defaults
// (15 s and 5 s), so that the overlap each pass reads again is what it
// is in production. The figures are per message judged: the database's
// time and rows, the broker's messages read, the watch's CPU, the
// PostgreSQL backend's and nats-server's, and the heap the watch keeps
// per message it remembers.

// auditCounts are the message counts of the section (auditQuickCounts
// with -quick).
var (
	auditCounts      = []int{10000, 100000}
	auditQuickCounts = []int{2000, 20000}
)

// auditFigures are the section's rows; cells are keyed by auditKey.
var auditFigures = []Figure{
	{ID: "audit_db_us", Section: "audit", Label: "Database time per message (PublishedBetween, wall time)", Unit: "µs", LowerIsBetter: true, Digits: 2},
	{ID: "audit_copies", Section: "audit", Label: "Copies read per message (PublishedBetween rows, with the Slack overlap)", Unit: "rows", LowerIsBetter: true, Digits: 2},
	{ID: "audit_scanned", Section: "audit", Label: "Copies the server reads per copy returned (EXPLAIN ANALYZE of one pass's window), no VACUUM nor ANALYZE since the copies came", Unit: "rows", LowerIsBetter: true, Digits: 2},
	{ID: "audit_scanned_analyzed", Section: "audit", Label: "… the same after ANALYZE (the BRIN index's new ranges not summarized yet)", Unit: "rows", LowerIsBetter: true, Digits: 2},
	{ID: "audit_scanned_summarized", Section: "audit", Label: "… the same after ANALYZE and brin_summarize_new_values (as after autovacuum's VACUUM)", Unit: "rows", LowerIsBetter: true, Digits: 2},
	{ID: "audit_stored", Section: "audit", Label: "Broker messages read per message (with the Slack overlap)", Unit: "msgs", LowerIsBetter: true, Digits: 2},
	{ID: "audit_cpu_us", Section: "audit", Label: "Watch process CPU (user+sys) per message", Unit: "µs", LowerIsBetter: true, Digits: 1},
	{ID: "audit_pg_us", Section: "audit", Label: "PostgreSQL backend CPU per message", Unit: "µs", LowerIsBetter: true, Digits: 1},
	{ID: "audit_broker_us", Section: "audit", Label: "nats-server CPU per message (kfake's is the watch process's)", Unit: "µs", LowerIsBetter: true, Digits: 1},
	{ID: "audit_mem", Section: "audit", Label: "Heap per remembered message", Unit: "bytes", LowerIsBetter: true, Digits: -1},
	{ID: "audit_pass_ms", Section: "audit", Label: "Pass time per 1,000 messages judged (wall)", Unit: "ms", LowerIsBetter: true, Digits: 1},
	{ID: "audit_locate_ms", Section: "audit", Label: "One Locate (a pass that meets one phantom), all copies kept", Unit: "ms", LowerIsBetter: true, Digits: 1},
}

// auditBrokers are the brokers of the section: NATS (-nats) and Kafka
// (kfake, in this process).
var auditBrokers = []string{"nats", "kafka"}

// auditKey is the results key of n messages on br.
func auditKey(br string, n int) string { return br + "_" + strconv.Itoa(n) }

// auditNs returns the section's message counts.
func (b *Bench) auditNs() []int {
	if b.cfg.quick {
		return auditQuickCounts
	}
	return auditCounts
}

// runAudits measures every count on every broker once, the brokers in
// an order that turns with run: those of -brokers.
func (b *Bench) runAudits(ctx context.Context, try func(string, func() error), run int) {
	var brs []string
	for _, br := range auditBrokers {
		if slices.Contains(b.cfg.brokers, br) {
			brs = append(brs, br)
		}
	}
	for _, br := range rotate(brs, run-1) {
		for _, n := range b.auditNs() {
			try(fmt.Sprintf("audit: a watch over %s messages on %s", thousands(int64(n)), br), func() error { return b.runAudit(ctx, br, n) })
		}
	}
}

// auditBroker is where the section's relay publishes and what its watch
// reads.
type auditBroker struct {
	pub    broker.Publisher
	reader broker.Reader
	close  func()
}

// openAuditBroker opens br for env: env's stream on NATS, a fresh kfake
// cluster with a topic of 4 partitions for Kafka.
func openAuditBroker(ctx context.Context, env *Env, br string) (*auditBroker, error) {
	if br == "kafka" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, Topic))
		if err != nil {
			return nil, fmt.Errorf("start kfake: %w", err)
		}
		cfg := kafka.Config{Brokers: c.ListenAddrs()}
		pub, err := kafka.NewPublisher(kafka.PublisherConfig{Config: cfg})
		if err != nil {
			c.Close()
			return nil, err
		}
		r, err := kafka.NewReader(ctx, kafka.ReaderConfig{Config: cfg, Topics: []string{Topic}})
		if err != nil {
			pub.Close()
			c.Close()
			return nil, err
		}
		return &auditBroker{pub: pub, reader: r, close: func() { r.Close(); pub.Close(); c.Close() }}, nil
	}
	nc, err := natsgo.Connect(env.NATSURL)
	if err != nil {
		return nil, err
	}
	mapping := couriernats.Config{SubjectPrefix: env.Prefix}
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
	if err != nil {
		nc.Close()
		return nil, err
	}
	r, err := couriernats.NewReader(nc, couriernats.ReaderConfig{Config: mapping, Stream: env.Stream})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &auditBroker{pub: pub, reader: r, close: nc.Close}, nil
}

// timedDB counts what a watch reads of its database and how long it
// takes.
type timedDB struct {
	audit.Database
	took     time.Duration
	rows     int
	locates  int
	locateIn time.Duration
}

func (d *timedDB) PublishedBetween(ctx context.Context, from, to time.Time, fn func(store.PublishedCopy) error) error {
	start := time.Now()
	err := d.Database.PublishedBetween(ctx, from, to, func(c store.PublishedCopy) error { d.rows++; return fn(c) })
	d.took += time.Since(start)
	return err
}

func (d *timedDB) Locate(ctx context.Context, ids []string) (map[string]store.Place, error) {
	start := time.Now()
	places, err := d.Database.Locate(ctx, ids)
	d.locates++
	d.locateIn += time.Since(start)
	return places, err
}

// countedReader counts the broker messages a watch reads.
type countedReader struct {
	broker.Reader
	read int
}

func (r *countedReader) ReadBack(ctx context.Context, from, to time.Time, fn func(broker.Stored) error) (time.Time, error) {
	return r.Reader.ReadBack(ctx, from, to, func(s broker.Stored) error { r.read++; return fn(s) })
}

// replayClock is a watch's clock over a replayed time.
type replayClock struct{ now time.Time }

func (c *replayClock) Now() time.Time { return c.now }

// runAudit measures a watch over n messages on br.
func (b *Bench) runAudit(ctx context.Context, br string, n int) error {
	newEnvOf := newEnv
	if br != "nats" {
		newEnvOf = func(ctx context.Context, admin *pgxpool.Pool, pgURL, natsURL, system string, _ ...func(*jetstream.StreamConfig)) (*Env, error) {
			return newSchemaEnv(ctx, admin, pgURL, natsURL, system)
		}
	}
	env, err := newEnvOf(ctx, b.admin, b.cfg.pgURL, b.cfg.natsURL, "audit")
	if err != nil {
		return err
	}
	defer env.Close()
	bk, err := openAuditBroker(ctx, env, br)
	if err != nil {
		return err
	}
	defer bk.close()
	sys := &courierSystem{}
	if err := sys.Prepare(ctx, env); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	if err := sys.Fill(ctx, env, n, 1000); err != nil {
		return err
	}
	pool, err := newPool(ctx, env.RelayURL, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	d := postgres.NewDriver(pool)
	began, ended, err := auditDrain(ctx, d, bk.pub, n)
	if err != nil {
		return err
	}
	db := &timedDB{Database: d.Operations()}
	reader := &countedReader{Reader: bk.reader}
	// A Slack of at least 100ms: the relay records a batch's copies once
	// the whole batch is acknowledged, milliseconds after the broker
	// stored its first message, tens of them on a busy machine (a shorter
	// Slack judges such messages before their copies, and looks them up).
	interval := max(ended.Sub(began)/10, 300*time.Millisecond)
	slack := interval / 3
	clock := &replayClock{now: began}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	w, err := audit.NewWatcher(db, reader, audit.WatchConfig{Interval: interval, Slack: slack, Since: slack, Remember: time.Hour,
		Clock: clock.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	pgBefore, err := backendsCPU(ctx, b.admin, env.AppName)
	if err != nil {
		return err
	}
	nats := br == "nats" && b.natsPID != 0
	natsBefore, _ := procCPU(b.natsPID)
	cpuBefore := processCPU()
	start := time.Now()
	var judged, passes int
	for !clock.now.After(ended.Add(2*interval + slack)) {
		clock.now = clock.now.Add(interval)
		p, err := w.Pass(ctx)
		if err != nil {
			return err
		}
		passes++
		judged += p.Judged
		if len(p.Findings) > 0 || p.Pending+p.Elsewhen > 0 {
			return fmt.Errorf("pass %d found %d, %d pending, %d elsewhen: the replay is not clean", passes, len(p.Findings), p.Pending, p.Elsewhen)
		}
	}
	took := time.Since(start)
	cpu := processCPU() - cpuBefore
	natsAfter, _ := procCPU(b.natsPID)
	pgAfter, err := backendsCPU(ctx, b.admin, env.AppName)
	if err != nil {
		return err
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(w)
	if judged != n {
		return fmt.Errorf("the watch judged %d of %d messages", judged, n)
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	k := auditKey(br, n)
	b.results.Add("audit_db_us", k, per(db.took))
	b.results.Add("audit_copies", k, float64(db.rows)/float64(n))
	b.results.Add("audit_stored", k, float64(reader.read)/float64(n))
	b.results.Add("audit_cpu_us", k, per(cpu))
	b.results.Add("audit_pg_us", k, per(cpuDelta(pgBefore, pgAfter)))
	if nats {
		b.results.Add("audit_broker_us", k, per(natsAfter-natsBefore))
	}
	b.results.Add("audit_mem", k, float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(n))
	b.results.Add("audit_pass_ms", k, float64(took.Milliseconds())/float64(n)*1000)
	logf("  %d passes (interval %s, slack %s) over %s of publishing; %d copies read, %d broker messages read",
		passes, interval.Round(time.Millisecond), slack.Round(time.Millisecond), ended.Sub(began).Round(time.Millisecond), db.rows, reader.read)

	// PostgreSQL's BRIN index on published_at leaves the block ranges
	// filled since the last VACUUM unsummarized, and a range scan reads
	// every such range, and without statistics (no ANALYZE since the
	// copies came) the planner may scan the table: here the machine runs
	// without autovacuum. Then as autovacuum leaves it.
	mid := began.Add(ended.Sub(began) / 2)
	scanned, err := auditScanned(ctx, env, mid, interval+slack)
	if err != nil {
		return err
	}
	b.results.Add("audit_scanned", k, scanned)
	if _, err := env.Pool.Exec(ctx, "ANALYZE courier_outbox_published"); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	if scanned, err = auditScanned(ctx, env, mid, interval+slack); err != nil {
		return err
	}
	b.results.Add("audit_scanned_analyzed", k, scanned)
	if _, err := env.Pool.Exec(ctx, "SELECT brin_summarize_new_values('courier_outbox_published_at')"); err != nil {
		return fmt.Errorf("summarize the BRIN index: %w", err)
	}
	if scanned, err = auditScanned(ctx, env, mid, interval+slack); err != nil {
		return err
	}
	b.results.Add("audit_scanned_summarized", k, scanned)

	// A phantom, stored after the replayed time: the next pass looks it up
	// among every copy kept.
	time.Sleep(time.Until(clock.now))
	if err := bk.pub.Publish(ctx, []courier.Message{courier.NewMessage(Topic, "phantom", messageType, nil)})[0]; err != nil {
		return err
	}
	clock.now = time.Now().Add(2 * slack)
	p, err := w.Pass(ctx)
	if err != nil {
		return err
	}
	if p.Count(audit.KindPhantom) != 1 || db.locates != 1 {
		return fmt.Errorf("the pass after a phantom found %d phantoms with %d lookups: %+v", p.Count(audit.KindPhantom), db.locates, p)
	}
	b.results.Add("audit_locate_ms", k, float64(db.locateIn.Microseconds())/1000)
	return nil
}

// auditDrain drains the outbox's n messages with a relay that keeps their
// published copies, and returns when it began and ended.
func auditDrain(ctx context.Context, d postgres.Driver, pub broker.Publisher, n int) (began, ended time.Time, err error) {
	st, err := d.RelayStore(ctx, store.RelayConfig{KeepPublished: true})
	if err != nil {
		return began, ended, err
	}
	// Batches of 100: their copies are recorded a few milliseconds
	// after the broker stored their first message.
	r, err := relay.New(st, pub, relay.Config{BatchSize: 100, PollInterval: 10 * time.Millisecond})
	if err != nil {
		return began, ended, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	began = time.Now()
	go func() { done <- r.Run(rctx) }()
	for r.Metrics().Published < int64(n) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	ended = time.Now()
	cancel()
	if err := <-done; err != nil && ctx.Err() == nil && err != context.Canceled {
		return began, ended, err
	}
	return began, ended, ctx.Err()
}

// auditScanned runs EXPLAIN ANALYZE of PublishedBetween's query over the
// window of one pass's read (length long from at) and returns the rows
// the server read (returned, and removed by the BRIN index's recheck) per
// row returned.
func auditScanned(ctx context.Context, env *Env, at time.Time, long time.Duration) (float64, error) {
	var plan []byte
	err := env.Pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) SELECT id, CAST(message_id AS CHAR(36)), topic, ordering_key, type, published_at
FROM courier_outbox_published WHERE published_at >= $1 AND published_at < $2 ORDER BY id`, at, at.Add(long)).Scan(&plan)
	if err != nil {
		return 0, fmt.Errorf("explain: %w", err)
	}
	var returned, removed float64
	var nodes []string
	var walk func(node map[string]any)
	walk = func(node map[string]any) {
		if rel, _ := node["Relation Name"].(string); rel == "courier_outbox_published" {
			nodes = append(nodes, fmt.Sprint(node["Node Type"]))
			r, _ := node["Actual Rows"].(float64)
			x, _ := node["Rows Removed by Index Recheck"].(float64)
			f, _ := node["Rows Removed by Filter"].(float64)
			returned, removed = returned+r, removed+x+f
		}
		for _, c := range asList(node["Plans"]) {
			walk(c)
		}
	}
	var top []map[string]any
	if err := json.Unmarshal(plan, &top); err != nil || len(top) == 0 {
		return 0, fmt.Errorf("explain: %v: %s", err, plan)
	}
	walk(asMap(top[0]["Plan"]))
	if returned == 0 {
		return 0, fmt.Errorf("explain: the window returned no copy: %s", plan)
	}
	logf("  a window of %s: %s, %.0f rows returned, %.0f removed", long.Round(time.Millisecond), strings.Join(nodes, ", "), returned, removed)
	return (returned + removed) / returned, nil
}

func asMap(v any) map[string]any { m, _ := v.(map[string]any); return m }

func asList(v any) []map[string]any {
	var out []map[string]any
	l, _ := v.([]any)
	for _, x := range l {
		out = append(out, asMap(x))
	}
	return out
}

// processCPU returns this process's user+sys CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// renderAudit renders the audit section's table: one row per figure, one
// column per broker and message count.
func renderAudit(sb *strings.Builder, fn *footnotes, res *Results, cfg config) {
	counts := auditCounts
	if cfg.quick {
		counts = auditQuickCounts
	}
	sb.WriteString("Continuous audit (audit.Watcher) on PostgreSQL, per message judged (↓ better; Kafka is kfake, in the watch's process):\n\n| Figure |")
	for _, br := range auditBrokers {
		for _, n := range counts {
			fmt.Fprintf(sb, " %s, %s messages |", br, thousands(int64(n)))
		}
	}
	sb.WriteString("\n|---|" + strings.Repeat("---:|", len(counts)*len(auditBrokers)) + "\n")
	for _, f := range auditFigures {
		fmt.Fprintf(sb, "| %s (%s) |", f.Label, f.Unit)
		for _, br := range auditBrokers {
			for _, n := range counts {
				c, _, _ := cell(res, fn, f, auditKey(br, n), cfg.runs)
				sb.WriteString(" " + c + " |")
			}
		}
		sb.WriteString("\n")
	}
}

// auditSettingsText documents how the audit section is measured.
func auditSettingsText(cfg config) string {
	return `- **Continuous audit**: a fresh schema and stream; the outbox is filled with the count's messages (1,000 keys, transactions of
  1,000), then one relay (` + "`KeepPublished`" + `, batches of 100) drains them to a fresh stream on the machine's NATS, or to a
  kfake cluster in this process (a topic of 4 partitions; not a Kafka server). The relay stops; an ` + "`audit.Watcher`" + ` alone in this
  process replays the drain's time on a clock of its own, a pass every tenth of it (at least 300 ms) with a Slack of a third of
  that (the defaults' ratio, 15 s and 5 s), until every message is judged (the run fails unless each is judged once and nothing is found). Database
  time is the wall time of ` + "`PublishedBetween`" + ` (its rows streamed to the watch, handled as they come); the rows the server reads per copy
  returned come from ` + "`EXPLAIN ANALYZE`" + ` of one pass's window in the middle of the drain (the BRIN index returns block ranges, rechecked),
  as the copies were left (this machine's PostgreSQL runs without autovacuum: no statistics, and the planner scans the table), after
  ` + "`ANALYZE`" + ` (the BRIN index's ranges filled since the last VACUUM are unsummarized, and every scan reads them), and after
  ` + "`brin_summarize_new_values`" + ` too (as after a VACUUM); the passes ran on the table as left;
  CPU is this process's (` + "`getrusage`" + `: the watch, its pgx and nats.go clients), the PostgreSQL backends' serving the watch's pool
  and nats-server's over the passes; the heap is ` + "`HeapAlloc`" + ` after a GC, with the watch remembering every message, less before it
  was made. Then one phantom is published and the next pass's ` + "`Locate`" + ` (one statement scanning every copy kept) is timed.
`
}
