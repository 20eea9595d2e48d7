package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// The scheduled section measures Courier's scheduled messages
// (outbox.Writer.Schedule, courier_outbox_scheduled) on PostgreSQL:
//
//   - precision: scheduled messages written at scheduledRate a second, each
//     due 1–3 s after it is written, released and published by one polling
//     relay to JetStream; lateness is the stream's own timestamp of the
//     message minus its due time;
//   - the cost of a big schedule: a relay store's empty claim cycle
//     (Release + Claim on an empty outbox) and the drain section's
//     10,000-key drain, each on two schemas side by side, one whose
//     courier_outbox_scheduled holds a million messages due next week and
//     one whose table is empty, alternately.

// The scheduled section's flags, registered here so that the section keeps
// its settings to itself.
var (
	// scheduledRows is the number of messages due next week in the big
	// schedule (0: scheduledDefaultRows, or scheduledQuickRows with
	// -quick).
	scheduledRows int
	// scheduledWindow is how long the precision run writes scheduled
	// messages (0: 20 s, 5 s with -quick).
	scheduledWindow time.Duration
	// scheduledRelays is how many relays publish the precision run's
	// messages, sharing its outbox.
	scheduledRelays = 1
)

const (
	scheduledDefaultRows = 1_000_000
	scheduledQuickRows   = 100_000
	// scheduledFillChunk is how many rows one INSERT … generate_series adds.
	scheduledFillChunk = 500_000
	// scheduledRate is the precision run's scheduled messages per second,
	// one per transaction.
	scheduledRate = 1000
	// scheduledMinDelay and scheduledMaxDelay bound how long after it is
	// written a message of the precision run falls due (uniformly).
	scheduledMinDelay = time.Second
	scheduledMaxDelay = 3 * time.Second
	// scheduledArrivalTimeout bounds the wait for the precision run's last
	// messages after the last one fell due.
	scheduledArrivalTimeout = 30 * time.Second
	// scheduledClaimBlocks is how many blocks of timed claim cycles a run
	// makes, alternating between the two schemas; scheduledClaimCycles
	// (scheduledQuickCycles with -quick) is the cycles of a block.
	scheduledClaimBlocks = 4
	scheduledClaimCycles = 250
	scheduledQuickCycles = 100
	// scheduledDrains is how many drains a run makes on each schema,
	// alternately.
	scheduledDrains = 2
	// scheduledLatenessTarget is the most a scheduled message's p99
	// lateness may be, in milliseconds.
	scheduledLatenessTarget = 100.0
	// scheduledCostTarget is the most the big schedule may multiply an
	// empty claim cycle's time or a drain's.
	scheduledCostTarget = 1.2
	// scheduledKeys is the key count of the drains and the big schedule.
	scheduledKeys = 10000
)

func init() {
	flag.IntVar(&scheduledRows, "scheduled-rows", 0, "messages due next week in the scheduled section's big schedule (default 1000000, 100000 with -quick)")
	flag.DurationVar(&scheduledWindow, "scheduled-window", 0, "how long the scheduled section's precision run writes scheduled messages (default 20s, 5s with -quick)")
	flag.IntVar(&scheduledRelays, "scheduled-relays", scheduledRelays, "relays sharing the scheduled section's precision run")
}

// Cell keys of the big schedule's figures: the schema with an empty
// schedule and the one with scheduledRows messages due next week.
const (
	schedWithout = "without"
	schedWith    = "with"
)

// scheduledFigures are the scheduled section's figures: the precision
// run's, keyed by reference; the big schedule's, keyed by schedWithout and
// schedWith; and the per-run ratios with ÷ without, keyed by reference.
var scheduledFigures = []Figure{
	{ID: "sched_late_p50", Section: "scheduled", Label: "Lateness p50 (stored − due)", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "sched_late_p99", Section: "scheduled", Label: "Lateness p99 (stored − due)", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "sched_late_p999", Section: "scheduled", Label: "Lateness p999 (stored − due)", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "sched_late_max", Section: "scheduled", Label: "Lateness max (stored − due)", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "sched_early", Section: "scheduled", Label: "Early (stored before due)", Unit: "messages", LowerIsBetter: true, Digits: -1},
	{ID: "sched_lost", Section: "scheduled", Label: "Lost (scheduled, never stored)", Unit: "messages", LowerIsBetter: true, Digits: -1},
	{ID: "sched_messages", Section: "scheduled", Label: "Scheduled messages written", Unit: "messages", Digits: -1},
	{ID: "sched_offered", Section: "scheduled", Label: "Scheduling rate actually offered (committed)", Unit: "msg/s", Digits: -1},
	{ID: "sched_cycle_p50", Section: "scheduled", Label: "Empty claim cycle (Release + Claim), p50", Unit: "ms", LowerIsBetter: true, Digits: 3},
	{ID: "sched_cycle_p99", Section: "scheduled", Label: "Empty claim cycle (Release + Claim), p99", Unit: "ms", LowerIsBetter: true, Digits: 3},
	{ID: "sched_release_p50", Section: "scheduled", Label: "… of which Release, p50", Unit: "ms", LowerIsBetter: true, Digits: 3},
	{ID: "sched_claim_p50", Section: "scheduled", Label: "… of which Claim, p50", Unit: "ms", LowerIsBetter: true, Digits: 3},
	{ID: "sched_drain", Section: "scheduled", Label: "Drain, 10,000 keys", Unit: "msg/s", Digits: -1},
	{ID: "sched_cycle_ratio", Section: "scheduled", Label: "Empty claim cycle p50, with ÷ without", Unit: "×", LowerIsBetter: true, Digits: 2},
	{ID: "sched_drain_ratio", Section: "scheduled", Label: "Drain time, with ÷ without", Unit: "×", LowerIsBetter: true, Digits: 2},
}

// scheduledSizes returns the big schedule's rows, the precision run's
// window and the claim cycles of a block, from the flags and -quick.
func scheduledSizes(cfg config) (rows int, window time.Duration, cycles int) {
	rows, window, cycles = scheduledRows, scheduledWindow, scheduledClaimCycles
	if rows <= 0 {
		rows = scheduledDefaultRows
		if cfg.quick {
			rows = scheduledQuickRows
		}
	}
	if window <= 0 {
		window = 20 * time.Second
		if cfg.quick {
			window = 5 * time.Second
		}
	}
	if cfg.quick {
		cycles = scheduledQuickCycles
	}
	return rows, window, cycles
}

// runScheduled runs the scheduled section once; run is the run's number,
// which decides which schema goes first.
func (b *Bench) runScheduled(ctx context.Context, try func(string, func() error), run int) {
	_, window, _ := scheduledSizes(b.cfg)
	try(fmt.Sprintf("scheduled: precision, %d msg/s for %s, due 1–3 s later", scheduledRate, window), func() error {
		return b.scheduledPrecision(ctx)
	})
	try("scheduled: empty claims and drains, with and without the big schedule", func() error {
		return b.scheduledCost(ctx, run)
	})
}

// scheduledRecord is one scheduled message of the precision run: its id
// (the Nats-Msg-Id it arrives with) and due time.
type scheduledRecord struct {
	id  string
	due time.Time
}

// scheduledPrecision writes scheduled messages at scheduledRate a second,
// one per transaction, each due a uniformly random 1–3 s after it is
// written (outbox.At, to the microsecond the database keeps), for the
// window, while one Courier relay (the drain section's: default settings,
// LISTEN/NOTIFY) runs in this process; then it waits for every message
// and reads the stream, and records each message's lateness: the stream's
// stored timestamp minus the due time.
func (b *Bench) scheduledPrecision(ctx context.Context) error {
	_, window, _ := scheduledSizes(b.cfg)
	env, err := newEnv(ctx, b.admin, b.cfg.pgURL, b.cfg.natsURL, "courier")
	if err != nil {
		return err
	}
	defer env.Close()
	sys := &courierSystem{}
	if err := sys.Prepare(ctx, env); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	wpool, err := newPool(ctx, env.URL, int32(latencyWriters+2))
	if err != nil {
		return err
	}
	defer wpool.Close()
	for range max(scheduledRelays, 1) {
		r, err := sys.StartRelay(ctx, env)
		if err != nil {
			return err
		}
		defer func() { _ = r.Stop() }()
	}
	time.Sleep(500 * time.Millisecond) // let the relays go idle

	w := outbox.New(postgres.Pgx(), outbox.Config{})
	total := int(float64(scheduledRate) * window.Seconds())
	records := make([]scheduledRecord, total)
	turns := make(chan int, total)
	start := time.Now()
	go func() { // the pacer, as the latency section's
		defer close(turns)
		for i := range total {
			at := start.Add(time.Duration(i) * time.Second / scheduledRate)
			if d := time.Until(at); d > 20*time.Microsecond {
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
				m := courierMessage(keyFor(i, scheduledKeys), payloadFor(i))
				due := time.Now().Add(scheduledMinDelay + rand.N(scheduledMaxDelay-scheduledMinDelay)).Truncate(time.Microsecond)
				err := pgx.BeginFunc(ctx, wpool, func(tx pgx.Tx) error { return w.Schedule(ctx, tx, outbox.At(due), m) })
				if err != nil {
					errOnce.Do(func() { writeErr = err })
					for range turns { // stop the pacer
					}
					return
				}
				records[i] = scheduledRecord{id: m.ID.String(), due: due}
			}
		})
	}
	writers.Wait()
	if writeErr != nil {
		return fmt.Errorf("writer: %w", writeErr)
	}
	offered := float64(total) / time.Since(start).Seconds()
	lastDue := slices.MaxFunc(records, func(a, b scheduledRecord) int { return a.due.Compare(b.due) }).due

	nc, err := natsgo.Connect(b.cfg.natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	_ = waitFor(ctx, time.Until(lastDue)+scheduledArrivalTimeout, 10*time.Millisecond, func() (bool, error) {
		n, err := streamCount(ctx, nc, env.Stream)
		return n >= uint64(total), err
	})
	stamps, err := streamStamps(ctx, nc, env.Stream)
	if err != nil {
		return err
	}
	late := make([]float64, 0, total)
	early, lost := 0, 0
	for _, rec := range records {
		at, ok := stamps[rec.id]
		if !ok {
			lost++
			continue
		}
		d := at.Sub(rec.due)
		if d < 0 {
			early++
		}
		late = append(late, ms(d))
	}
	if len(late) == 0 {
		return fmt.Errorf("none of %d scheduled messages reached the stream", total)
	}
	slices.Sort(late)
	if offered < 0.95*scheduledRate {
		for _, p := range []string{"p50", "p99", "p999", "max"} {
			b.results.Flag("sched_late_"+p, reference, fmt.Sprintf("scheduling rate not held: the writers committed less than 95%% of %s msg/s", thousands(scheduledRate)))
		}
	}
	if lost > 0 {
		for _, p := range []string{"p50", "p99", "p999", "max"} {
			b.results.Flag("sched_late_"+p, reference, fmt.Sprintf("%d of %d messages were not in the stream %s after the last due time; percentiles of the others", lost, total, scheduledArrivalTimeout))
		}
	}
	b.results.Add("sched_late_p50", reference, quantile(late, 0.50))
	b.results.Add("sched_late_p99", reference, quantile(late, 0.99))
	b.results.Add("sched_late_p999", reference, quantile(late, 0.999))
	b.results.Add("sched_late_max", reference, late[len(late)-1])
	b.results.Add("sched_early", reference, float64(early))
	b.results.Add("sched_lost", reference, float64(lost))
	b.results.Add("sched_messages", reference, float64(total))
	b.results.Add("sched_offered", reference, offered)
	return nil
}

// streamStamps reads every message of stream with an ordered consumer and
// returns the stream's stored timestamp of each, by Nats-Msg-Id (the first
// one when an id appears twice).
func streamStamps(ctx context.Context, nc *natsgo.Conn, stream string) (map[string]time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	total := int(info.State.Msgs)
	out := make(map[string]time.Time, total)
	if total == 0 {
		return out, nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	for read := 0; read < total; {
		batch, err := c.Fetch(min(1000, total-read), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read the stream: %w", err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			id := m.Headers().Get(jetstream.MsgIDHeader)
			if _, seen := out[id]; !seen {
				out[id] = meta.Timestamp
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("read the stream: %w", err)
		}
		if got == 0 {
			return nil, fmt.Errorf("read the stream: %d of %d messages, then nothing", read, total)
		}
		read += got
	}
	return out, nil
}

// scheduledCost measures what a big schedule costs a relay: it makes two
// schemas (and streams), fills the courier_outbox_scheduled of one with
// rows messages due next week, then alternates between them
// scheduledClaimBlocks blocks of timed empty claim cycles and
// scheduledDrains drains of each (the drain section's 10,000-key drain,
// by a child process), the schema without the schedule first in odd runs.
// It records each schema's figures and, per run, the ratios with ÷
// without.
func (b *Bench) scheduledCost(ctx context.Context, run int) error {
	rows, _, cycles := scheduledSizes(b.cfg)
	envs := map[string]*Env{}
	for _, state := range []string{schedWithout, schedWith} {
		env, err := newEnv(ctx, b.admin, b.cfg.pgURL, b.cfg.natsURL, "courier")
		if err != nil {
			return err
		}
		defer env.Close()
		if err := (&courierSystem{}).Prepare(ctx, env); err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
		envs[state] = env
	}
	start := time.Now()
	if err := fillScheduled(ctx, envs[schedWith].Pool, rows); err != nil {
		return err
	}
	var size string
	if err := envs[schedWith].Pool.QueryRow(ctx, `SELECT pg_size_pretty(pg_total_relation_size('courier_outbox_scheduled'))`).Scan(&size); err != nil {
		return err
	}
	logf("  filled courier_outbox_scheduled with %s messages due next week (%s) in %s", thousands(int64(rows)), size, time.Since(start).Round(100*time.Millisecond))

	order := []string{schedWithout, schedWith}
	if run%2 == 0 {
		order = []string{schedWith, schedWithout}
	}

	// Empty claim cycles: one warmed-up store per schema, then blocks of
	// timed cycles, alternately.
	claimers := map[string]*cycleTimer{}
	for _, state := range order {
		ct, err := newCycleTimer(ctx, envs[state])
		if err != nil {
			return err
		}
		defer ct.close()
		claimers[state] = ct
	}
	for i := range scheduledClaimBlocks {
		if err := claimers[order[i%2]].time(ctx, cycles); err != nil {
			return err
		}
	}
	cycleP50 := map[string]float64{}
	for _, state := range order {
		ct := claimers[state]
		slices.Sort(ct.cycle)
		slices.Sort(ct.release)
		slices.Sort(ct.claim)
		cycleP50[state] = quantile(ct.cycle, 0.50)
		b.results.Add("sched_cycle_p50", state, cycleP50[state])
		b.results.Add("sched_cycle_p99", state, quantile(ct.cycle, 0.99))
		b.results.Add("sched_release_p50", state, quantile(ct.release, 0.50))
		b.results.Add("sched_claim_p50", state, quantile(ct.claim, 0.50))
	}
	if cycleP50[schedWithout] > 0 {
		b.results.Add("sched_cycle_ratio", reference, cycleP50[schedWith]/cycleP50[schedWithout])
	}

	// Drains, alternately; each schema's drain time is the sum of its
	// drains' (the same n each).
	n := b.cfg.drainN
	took := map[string]time.Duration{}
	for i := range 2 * scheduledDrains {
		state := order[i%2]
		d, err := b.scheduledDrain(ctx, envs[state], n)
		if err != nil {
			return fmt.Errorf("drain %s the schedule: %w", state, err)
		}
		took[state] += d
		b.results.Add("sched_drain", state, float64(n)/d.Seconds())
	}
	if took[schedWithout] > 0 {
		b.results.Add("sched_drain_ratio", reference, took[schedWith].Seconds()/took[schedWithout].Seconds())
	}
	var waiting int64
	if err := envs[schedWith].Pool.QueryRow(ctx, `SELECT count(*) FROM courier_outbox_scheduled WHERE released_at IS NULL`).Scan(&waiting); err != nil {
		return err
	}
	if waiting != int64(rows) {
		return fmt.Errorf("%d scheduled messages wait at the end, want %d", waiting, rows)
	}
	return nil
}

// fillScheduled inserts n messages into courier_outbox_scheduled, due at
// random times over the week that begins seven days from now, shaped like
// the benchmark's other messages (10,000 keys, a 200-byte JSON payload, no
// headers), a chunk at a time, then vacuums and analyses the table.
func fillScheduled(ctx context.Context, pool *pgxpool.Pool, n int) error {
	for done := 0; done < n; done += scheduledFillChunk {
		// The columns of migration 0011 (id is an identity, created_at and
		// released_at take their defaults: a waiting message).
		_, err := pool.Exec(ctx, `INSERT INTO courier_outbox_scheduled
    (message_id, due_at, topic, ordering_key, type, version, content_type, payload, headers, occurred_at)
SELECT gen_random_uuid(), now() + interval '7 days' + random() * interval '7 days', $3, 'key-' || (g % $6), $4, 1, $5,
       convert_to(rpad('{"seq":' || g || ',"pad":"', 198, 'x') || '"}', 'UTF8'), NULL, now()
FROM generate_series($1::bigint, $2::bigint) AS g`, done+1, min(done+scheduledFillChunk, n), Topic, messageType, contentType, scheduledKeys)
		if err != nil {
			return fmt.Errorf("fill the scheduled table: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE courier_outbox_scheduled`); err != nil {
		return fmt.Errorf("vacuum the scheduled table: %w", err)
	}
	return nil
}

// cycleTimer times a relay store's empty claim cycles on one schema.
type cycleTimer struct {
	pool *pgxpool.Pool
	st   store.RelayStore
	// cycle, release and claim are the timed cycles' durations and their
	// parts, in milliseconds.
	cycle, release, claim []float64
}

// newCycleTimer opens a relay store on env's schema (the drains' settings,
// a pool of 4) and runs cycles for advClaimWarmup, untimed: a new store's
// first claims are full passes until its floor has history.
func newCycleTimer(ctx context.Context, env *Env) (*cycleTimer, error) {
	pool, err := newPool(ctx, env.RelayURL, 4)
	if err != nil {
		return nil, err
	}
	st, err := postgres.NewDriver(pool).RelayStore(ctx, store.RelayConfig{})
	if err != nil {
		pool.Close()
		return nil, err
	}
	ct := &cycleTimer{pool: pool, st: st}
	for start := time.Now(); time.Since(start) < advClaimWarmup; {
		if _, _, err := ct.once(ctx); err != nil {
			ct.close()
			return nil, err
		}
	}
	return ct, nil
}

// once runs one cycle, as the relay's loop does before it finds nothing to
// claim: a Release of up to a batch, then a Claim of a batch.
func (ct *cycleTimer) once(ctx context.Context) (release, claim time.Duration, err error) {
	t0 := time.Now()
	rel, err := ct.st.Release(ctx, 1000)
	if err != nil {
		return 0, 0, err
	}
	if rel.Count > 0 || rel.Busy {
		return 0, 0, fmt.Errorf("a release with nothing due moved %d messages (busy %v)", rel.Count, rel.Busy)
	}
	t1 := time.Now()
	batch, err := ct.st.Claim(ctx, "bench-scheduled", 1000, 30*time.Second)
	if err != nil {
		return 0, 0, err
	}
	if len(batch.Records) > 0 {
		return 0, 0, fmt.Errorf("a claim on an empty outbox returned %d rows", len(batch.Records))
	}
	return t1.Sub(t0), time.Since(t1), nil
}

// time runs n timed cycles.
func (ct *cycleTimer) time(ctx context.Context, n int) error {
	for range n {
		rel, claim, err := ct.once(ctx)
		if err != nil {
			return err
		}
		ct.release = append(ct.release, ms(rel))
		ct.claim = append(ct.claim, ms(claim))
		ct.cycle = append(ct.cycle, ms(rel+claim))
	}
	return nil
}

func (ct *cycleTimer) close() { ct.pool.Close() }

// scheduledDrain runs one drain of the drain section on env: it vacuums
// the outbox (the previous drain's deleted rows), empties the stream,
// writes n messages over 10,000 keys as the drain section does and drains
// them with a child process; it returns the drain's time.
func (b *Bench) scheduledDrain(ctx context.Context, env *Env, n int) (time.Duration, error) {
	if _, err := env.Pool.Exec(ctx, `VACUUM courier_outbox`); err != nil {
		return 0, err
	}
	if err := purgeStream(ctx, env.NATSURL, env.Stream); err != nil {
		return 0, err
	}
	if err := (&courierSystem{}).Fill(ctx, env, n, scheduledKeys); err != nil {
		return 0, err
	}
	rd, err := b.drainInChild(ctx, drainSpec{Env: *env, N: n}, nil, nil)
	if err != nil {
		return 0, err
	}
	if err := b.checkStream(ctx, env, n); err != nil {
		return 0, err
	}
	return rd.Elapsed, nil
}

// purgeStream removes every message of stream.
func purgeStream(ctx context.Context, natsURL, stream string) error {
	nc, err := natsgo.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	return s.Purge(ctx)
}

// renderScheduled renders the scheduled section's two tables and their
// targets.
func renderScheduled(sb *strings.Builder, fn *footnotes, res *Results, cfg config) {
	w := func(format string, args ...any) { fmt.Fprintf(sb, format, args...) }
	rows, window, _ := scheduledSizes(cfg)
	dir := func(f Figure) string {
		if f.LowerIsBetter {
			return "↓"
		}
		return "↑"
	}
	if measured(res, scheduledFigures[:8]) {
		w("Scheduled messages' precision on PostgreSQL (%s scheduled messages a second, one per transaction, each due 1–3 s after it is written, for %s; one polling relay to JetStream; lateness is the stream's stored timestamp minus the due time):\n\n",
			thousands(scheduledRate), window)
		w("| Figure | Value | Target |\n|---|---:|---|\n")
		for _, f := range scheduledFigures[:8] {
			c, st, ok := cell(res, fn, f, reference, cfg.runs)
			target := ""
			switch f.ID {
			case "sched_late_p99":
				target = fmt.Sprintf("≤ %.0f ms", scheduledLatenessTarget)
				if ok {
					target += " (" + verdict(st.Median <= scheduledLatenessTarget) + ")"
				}
			case "sched_early", "sched_lost":
				target = "0"
				if ok {
					target += " (" + verdict(st.Max == 0) + ")"
				}
			}
			w("| %s (%s, %s better) | %s | %s |\n", f.Label, f.Unit, dir(f), c, target)
		}
	}
	if !measured(res, scheduledFigures[8:]) {
		return
	}
	if measured(res, scheduledFigures[:8]) {
		w("\n")
	}
	w("What a big schedule costs the relay (two schemas side by side, one with %s messages due next week in `courier_outbox_scheduled`, one with none, measured alternately; %s-message drains over 10,000 keys):\n\n",
		thousands(int64(rows)), thousands(int64(cfg.drainN)))
	w("| Figure | Without | With %s scheduled | With ÷ without | Target |\n|---|---:|---:|---:|---|\n", thousands(int64(rows)))
	ratios := map[string]string{"sched_cycle_p50": "sched_cycle_ratio", "sched_drain": "sched_drain_ratio"}
	for _, f := range scheduledFigures[8:13] {
		if _, ok := res.Samples[f.ID]; !ok {
			continue
		}
		a, sa, okA := cell(res, fn, f, schedWithout, cfg.runs*ratioRuns(f.ID))
		c, sc, okC := cell(res, fn, f, schedWith, cfg.runs*ratioRuns(f.ID))
		ratio, target := "—", ""
		if id, ok := ratios[f.ID]; ok {
			if r, st, ok := cell(res, fn, figureByID(id), reference, cfg.runs); ok {
				ratio = r + " per run"
				target = fmt.Sprintf("≤ %.1f× (%s)", scheduledCostTarget, verdict(st.Median <= scheduledCostTarget))
			}
		} else if okA && okC && sa.Median > 0 {
			q := sc.Median / sa.Median
			if !f.LowerIsBetter {
				q = sa.Median / sc.Median
			}
			ratio = fmt.Sprintf("%.2f×", q)
		}
		w("| %s (%s, %s better) | %s | %s | %s | %s |\n", f.Label, f.Unit, dir(f), a, c, ratio, target)
	}
	w("\nThe ratios are of cost (time), per run: the claim cycle's p50 with the schedule over without; the drains' total time with over without. Per run: %d blocks of timed cycles, and %d drains of each schema, alternating.\n",
		scheduledClaimBlocks, scheduledDrains)
}

// ratioRuns is how many samples a run records of the big schedule's
// figure id per schema.
func ratioRuns(id string) int {
	if id == "sched_drain" {
		return scheduledDrains
	}
	return 1
}

// scheduledSettingsText documents how the scheduled section is measured.
func scheduledSettingsText(cfg config) string {
	rows, window, cycles := scheduledSizes(cfg)
	return fmt.Sprintf(`- **Scheduled messages, precision** (Courier alone, PostgreSQL): a fresh schema (`+"`postgres.Driver`"+`'s `+"`Migrate`"+`) and
  stream; %d relay(s) in this process sharing the outbox (-scheduled-relays; the drain section's: `+"`relay.New`"+` with default settings and the LISTEN/NOTIFY notifier, Courier's
  JetStream publisher); after 500 ms a pacer offers %s messages a second for %s to %d writer goroutines, each transaction one
  `+"`outbox.Writer.Schedule(ctx, tx, outbox.At(due), msg)`"+` with due a uniformly random %s–%s after the write begins (to the
  microsecond, as the database stores it). After the last due time the bench waits up to %s for every message, then reads the
  stream with an ordered consumer: a message's lateness is the stream's stored timestamp (JetStream's, when it stored the
  message) minus its due time; early ones (stored before due) and lost ones (committed, never stored) are counted. The relay,
  PostgreSQL and nats-server share this machine's clock.
- **Scheduled messages, the cost of a big schedule** (Courier alone, PostgreSQL): two fresh schemas, migrated; in one,
  `+"`courier_outbox_scheduled`"+` gets %s waiting messages (`+"`INSERT … SELECT … generate_series`"+`, %s rows a statement, random v4 ids,
  due at random over the week that begins seven days later, 10,000 keys, a 200-byte payload, then `+"`VACUUM ANALYZE`"+`); the other's
  stays empty. The empty claim cycle is a relay store's (`+"`RelayStore(ctx, store.RelayConfig{})`"+`, pool of 4) `+"`Release(ctx, 1000)`"+`
  then `+"`Claim(ctx, owner, 1000, 30s)`"+` on the empty outbox: what an idle relay does every `+"`due.DefaultRecheck`"+` (100 ms) when
  nothing is due soon (its timer wakes it to release, then it claims); each schema's store first cycles for %s, untimed,
  then %d blocks of %d timed cycles alternate between the two schemas. Then %d drains of each schema alternate: the outbox is vacuumed,
  the stream purged, %s messages over 10,000 keys written as in the drain section and drained by a child process (the drain
  section's relay); the stream must hold all of them, and the schedule must still hold all its messages at the end. The schema
  without the schedule goes first in odd runs. The target: with ÷ without at most %.1f× for the claim cycle's p50 and for the drains'
  total time, per run.
`, max(scheduledRelays, 1), thousands(scheduledRate), window, latencyWriters, scheduledMinDelay, scheduledMaxDelay, scheduledArrivalTimeout,
		thousands(int64(rows)), thousands(scheduledFillChunk), advClaimWarmup, scheduledClaimBlocks, cycles, scheduledDrains,
		thousands(int64(cfg.drainN)), scheduledCostTarget)
}
