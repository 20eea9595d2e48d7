package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/cleanup"
	"github.com/courier-go/courier/store/postgres"
)

// The cleanup section's flags, registered here so that the section keeps
// its settings to itself.
var (
	// cleanupRows is the number of old published rows a cleanup deletes
	// (0: cleanupDefaultRows, or cleanupQuickRows with -quick).
	cleanupRows int
	// cleanupWindow is how long the writers run alone before and after the
	// cleanup (0: 15 s, 3 s with -quick).
	cleanupWindow time.Duration
	// cleanupPauses are the Cleaner's pauses between batches measured, one
	// cleanup each; 0 means none (Cleaner.Pause negative).
	cleanupPauses = []time.Duration{cleanup.DefaultPause}
)

const (
	cleanupDefaultRows = 5_000_000
	cleanupQuickRows   = 200_000
	// cleanupFillChunk is how many rows one INSERT … generate_series adds.
	cleanupFillChunk = 500_000
	// cleanupTarget is the most writers may lose during a cleanup at the
	// default pause, in percent.
	cleanupTarget = 10.0
)

func init() {
	flag.IntVar(&cleanupRows, "cleanup-rows", 0, "old published rows the cleanup section deletes (default 5000000, 200000 with -quick)")
	flag.DurationVar(&cleanupWindow, "cleanup-window", 0, "how long the cleanup section's writers run alone before and after the cleanup (default 15s, 3s with -quick)")
	flag.Func("cleanup-pause", "comma-separated pauses between the cleanup's batches, one cleanup each; 0 for none (default "+cleanup.DefaultPause.String()+", cleanup.DefaultPause)",
		func(s string) error {
			var ps []time.Duration
			for _, f := range splitList(s) {
				d, err := time.ParseDuration(f)
				if err != nil || d < 0 {
					return fmt.Errorf("%q is not a pause: use durations such as 10ms or 0", f)
				}
				if !slices.Contains(ps, d) {
					ps = append(ps, d)
				}
			}
			if len(ps) == 0 {
				return fmt.Errorf("no pause given: use durations such as 10ms,0")
			}
			cleanupPauses = ps
			return nil
		})
}

// cleanupPhases are the writers' phases, in the order they run.
var cleanupPhases = []string{"before", "during", "after"}

// cleanupPhaseLabels name the phases in the report.
var cleanupPhaseLabels = map[string]string{
	"before": "alone, before the cleanup",
	"during": "while the cleanup deletes",
	"after":  "alone, after the cleanup",
}

// cleanupFigures are the rows of the cleanup table; their cells are keyed
// by pause (pauseKey) instead of system.
var cleanupFigures = func() []Figure {
	var figs []Figure
	for _, p := range cleanupPhases {
		figs = append(figs, Figure{ID: "cleanup_tx_" + p, Section: "cleanup", Label: "Writers, " + cleanupPhaseLabels[p], Unit: "tx/s", Digits: -1})
	}
	figs = append(figs,
		Figure{ID: "cleanup_drop", Section: "cleanup", Label: "Writers' drop during the cleanup (vs. alone before)", Unit: "%", LowerIsBetter: true, Digits: 1},
		Figure{ID: "cleanup_drop_mean", Section: "cleanup", Label: "Writers' drop during the cleanup (vs. the mean of alone before and after)", Unit: "%", LowerIsBetter: true, Digits: 1})
	for _, q := range []string{"p50", "p99"} {
		for _, p := range cleanupPhases {
			figs = append(figs, Figure{ID: "cleanup_" + q + "_" + p, Section: "cleanup", Label: "Writer transaction " + q + ", " + cleanupPhaseLabels[p], Unit: "ms", LowerIsBetter: true, Digits: 2})
		}
	}
	return append(figs,
		Figure{ID: "cleanup_rows_s", Section: "cleanup", Label: "Cleanup speed", Unit: "rows/s", Digits: -1},
		Figure{ID: "cleanup_took", Section: "cleanup", Label: "Cleanup duration", Unit: "s", LowerIsBetter: true, Digits: 1},
		Figure{ID: "cleanup_cpu_pg", Section: "cleanup", Label: "Cleanup's PostgreSQL backends' CPU per 1,000,000 rows", Unit: "s", LowerIsBetter: true, Digits: 2},
	)
}()

// pauseKey is the key of a pause's cells in Results.
func pauseKey(p time.Duration) string {
	if p == 0 {
		return "pause 0"
	}
	return "pause " + p.String()
}

// cleanupSizes returns the rows to delete and the alone window, from the
// flags and -quick.
func cleanupSizes(cfg config) (int, time.Duration) {
	rows, window := cleanupRows, cleanupWindow
	if rows <= 0 {
		rows = cleanupDefaultRows
		if cfg.quick {
			rows = cleanupQuickRows
		}
	}
	if window <= 0 {
		window = 15 * time.Second
		if cfg.quick {
			window = 3 * time.Second
		}
	}
	return rows, window
}

// runCleanup measures what a retention cleanup costs the application's
// writers on PostgreSQL: it fills courier_outbox_published of a fresh schema
// with old rows (INSERT … SELECT … generate_series, then VACUUM ANALYZE),
// runs writeWriters writers committing one outbox message per transaction
// for the window alone, then while a cleanup.Cleaner with pause deletes
// every old row, then alone again, and records each phase's transactions
// per second and latencies, the drop during the cleanup, and the cleanup's
// speed and the CPU of the PostgreSQL backends serving it.
func (b *Bench) runCleanup(ctx context.Context, pause time.Duration) error {
	rows, window := cleanupSizes(b.cfg)
	env, err := newSchemaEnv(ctx, b.admin, b.cfg.pgURL, b.cfg.natsURL, "cleanup")
	if err != nil {
		return err
	}
	defer env.Close()
	if _, err := postgres.NewDriver(env.Pool).Migrate(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	start := time.Now()
	if err := fillPublished(ctx, env.Pool, rows); err != nil {
		return err
	}
	var size string
	if err := env.Pool.QueryRow(ctx, `SELECT pg_size_pretty(pg_total_relation_size('courier_outbox_published'))`).Scan(&size); err != nil {
		return err
	}
	logf("  filled courier_outbox_published with %s rows (%s) in %s", thousands(int64(rows)), size, time.Since(start).Round(100*time.Millisecond))

	// The cleanup's own pool, whose application_name finds its backends.
	cpool, err := newPool(ctx, env.RelayURL, 4)
	if err != nil {
		return err
	}
	defer cpool.Close()
	c := &cleanup.Cleaner{Ops: postgres.NewDriver(cpool).Operations(), Keep: map[store.Table]time.Duration{store.TablePublished: 24 * time.Hour},
		Pause: pause, Log: slog.New(slog.DiscardHandler)}
	if pause == 0 {
		c.Pause = -1 // none
	}

	key := pauseKey(pause)
	if _, err := cleanupWriters(ctx, env.Pool, time.Second, nil); err != nil { // warm-up, not recorded
		return err
	}
	loads := map[string]writerLoad{}
	if loads["before"], err = cleanupWriters(ctx, env.Pool, window, nil); err != nil {
		return err
	}
	var (
		rep        cleanup.Report
		runErr     error
		took, cpu  time.Duration
		cpu0, cpu1 cpuSnapshot
		cpuErr     error
	)
	loads["during"], err = cleanupWriters(ctx, env.Pool, 0, func() {
		cpu0, _ = backendsCPU(ctx, b.admin, env.AppName)
		t0 := time.Now()
		rep, runErr = c.RunOnce(ctx)
		took = time.Since(t0)
		if cpu1, cpuErr = backendsCPU(ctx, b.admin, env.AppName); cpuErr == nil {
			cpu = cpuDelta(cpu0, cpu1)
		}
	})
	if err != nil {
		return err
	}
	if runErr != nil {
		return fmt.Errorf("cleanup: %w", runErr)
	}
	if deleted := rep.Deleted[store.TablePublished]; deleted != int64(rows) {
		return fmt.Errorf("the cleanup deleted %d rows, want %d", deleted, rows)
	}
	var left int64
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM courier_outbox_published`).Scan(&left); err != nil {
		return err
	}
	if left != 0 {
		return fmt.Errorf("%d published rows left after the cleanup, want 0", left)
	}
	if loads["after"], err = cleanupWriters(ctx, env.Pool, window, nil); err != nil {
		return err
	}

	for _, p := range cleanupPhases {
		l := loads[p]
		b.results.Add("cleanup_tx_"+p, key, l.rate())
		b.results.Add("cleanup_p50_"+p, key, ms(l.p50))
		b.results.Add("cleanup_p99_"+p, key, ms(l.p99))
	}
	if before := loads["before"].rate(); before > 0 {
		b.results.Add("cleanup_drop", key, 100*(1-loads["during"].rate()/before))
	}
	if alone := (loads["before"].rate() + loads["after"].rate()) / 2; alone > 0 {
		b.results.Add("cleanup_drop_mean", key, 100*(1-loads["during"].rate()/alone))
	}
	b.results.Add("cleanup_rows_s", key, float64(rows)/took.Seconds())
	b.results.Add("cleanup_took", key, took.Seconds())
	if cpuErr != nil {
		logf("  warning: the cleanup's backends' CPU: %v", cpuErr)
	} else if cpu > 0 {
		b.results.Add("cleanup_cpu_pg", key, cpu.Seconds()*1e6/float64(rows))
	}
	return nil
}

// ms converts d to milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fillPublished inserts n rows published ten days ago into
// courier_outbox_published, a chunk at a time, then vacuums and analyses
// the table, so that the cleanup starts from a settled table.
func fillPublished(ctx context.Context, pool *pgxpool.Pool, n int) error {
	for done := 0; done < n; done += cleanupFillChunk {
		_, err := pool.Exec(ctx, `INSERT INTO courier_outbox_published
    (id, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, attempts, published_at)
SELECT g, gen_random_uuid(), 'events', 'key-' || (g % 10000), 'Numbered', 1, 'application/json',
       convert_to('{"seq":' || g || ',"pad":"' || repeat('x', 180) || '"}', 'UTF8'),
       '{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}',
       now() - interval '10 days', now() - interval '10 days', 0, now() - interval '10 days' + g * interval '1 ms'
FROM generate_series($1::bigint, $2::bigint) AS g`, done+1, min(done+cleanupFillChunk, n))
		if err != nil {
			return fmt.Errorf("fill the published table: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE courier_outbox_published`); err != nil {
		return fmt.Errorf("vacuum the published table: %w", err)
	}
	return nil
}

// writerLoad is what the writers did in one phase.
type writerLoad struct {
	txs      int64
	took     time.Duration
	p50, p99 time.Duration
}

// rate is the phase's transactions per second.
func (l writerLoad) rate() float64 {
	if l.took <= 0 {
		return 0
	}
	return float64(l.txs) / l.took.Seconds()
}

// cleanupWriters runs writeWriters writers, each committing one outbox
// message per transaction (outbox.Writer on postgres.Pgx, the bench's
// message), for d, or while during runs when it is not nil; then it
// empties the outbox so that every phase starts from the same table.
func cleanupWriters(ctx context.Context, pool *pgxpool.Pool, d time.Duration, during func()) (writerLoad, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := outbox.New(postgres.Pgx(), outbox.Config{})
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		lats     []time.Duration
		txs, seq atomic.Int64
		firstErr error
		start    = time.Now()
	)
	for range writeWriters {
		wg.Go(func() {
			var mine []time.Duration
			for wctx.Err() == nil {
				i := int(seq.Add(1))
				t0 := time.Now()
				err := pgx.BeginFunc(wctx, pool, func(tx pgx.Tx) error {
					return w.Write(wctx, tx, courierMessage(keyFor(i, 10000), payloadFor(i)))
				})
				if err != nil {
					if wctx.Err() == nil {
						mu.Lock()
						firstErr = cmpErr(firstErr, err)
						mu.Unlock()
						cancel()
					}
					break
				}
				mine = append(mine, time.Since(t0))
				txs.Add(1)
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		})
	}
	if during != nil {
		during()
	} else {
		select {
		case <-wctx.Done():
		case <-time.After(d):
		}
	}
	cancel()
	took := time.Since(start)
	wg.Wait()
	if firstErr != nil {
		return writerLoad{}, fmt.Errorf("writer: %w", firstErr)
	}
	if err := ctx.Err(); err != nil {
		return writerLoad{}, err
	}
	slices.Sort(lats)
	l := writerLoad{txs: txs.Load(), took: took}
	if len(lats) > 0 {
		l.p50, l.p99 = lats[len(lats)/2], lats[len(lats)*99/100]
	}
	if _, err := pool.Exec(ctx, `TRUNCATE courier_outbox`); err != nil {
		return writerLoad{}, fmt.Errorf("empty the outbox: %w", err)
	}
	return l, nil
}

// cmpErr returns first unless it is nil, else err.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// renderCleanup renders the cleanup table: one row per figure, one column
// per pause measured, then the target.
func renderCleanup(sb *strings.Builder, fn *footnotes, res *Results, cfg config) {
	rows, _ := cleanupSizes(cfg)
	fmt.Fprintf(sb, "Writers during a retention cleanup (`cleanup.Cleaner` deleting %s old published rows on PostgreSQL, batches of %s; %d writers, one outbox message per transaction):\n\n| Figure |",
		thousands(int64(rows)), thousands(cleanup.DefaultBatch), writeWriters)
	for _, p := range cleanupPauses {
		fmt.Fprintf(sb, " %s |", pauseKey(p))
	}
	sb.WriteString("\n|---|")
	for range cleanupPauses {
		sb.WriteString("---:|")
	}
	sb.WriteString("\n")
	for _, f := range cleanupFigures {
		if _, ok := res.Samples[f.ID]; !ok {
			continue
		}
		dir := "↑"
		if f.LowerIsBetter {
			dir = "↓"
		}
		fmt.Fprintf(sb, "| %s (%s, %s better) |", f.Label, f.Unit, dir)
		for _, p := range cleanupPauses {
			c, _, _ := cell(res, fn, f, pauseKey(p), cfg.runs)
			sb.WriteString(" " + c + " |")
		}
		sb.WriteString("\n")
	}
	if st, ok := res.Stat("cleanup_drop", pauseKey(cleanup.DefaultPause)); ok {
		verdict := "met"
		if st.Median > cleanupTarget {
			verdict = "**not met**"
		}
		fmt.Fprintf(sb, "\nTarget: the writers lose at most %.0f%% of their transactions per second while a cleanup at the default pause (%s) deletes the rows: %.1f%%, %s.\n",
			cleanupTarget, cleanup.DefaultPause, st.Median, verdict)
	}
}

// cleanupSettingsText documents how the cleanup table is measured.
func cleanupSettingsText(cfg config) string {
	rows, window := cleanupSizes(cfg)
	return fmt.Sprintf(`- **Writers during a retention cleanup** (Courier alone, PostgreSQL): a fresh schema (`+"`postgres.Driver`"+`'s `+"`Migrate`"+`) whose
  `+"`courier_outbox_published`"+` is filled with %s rows published ten days ago (`+"`INSERT … SELECT … generate_series`"+`, %s rows a
  statement, about 400 bytes a row, then `+"`VACUUM ANALYZE`"+`); %d writers commit one outbox message per transaction
  (`+"`outbox.Writer`"+` on `+"`postgres.Pgx()`"+`, the bench's message, no relay) for 1 s of warm-up, then %s alone, then while
  `+"`cleanup.Cleaner{Keep: {published: 24h}, Pause: p}.RunOnce`"+` deletes every old row in batches of %s (on a pool of its own), then
  %s alone again; the outbox is emptied between phases. Per phase: transactions per second and each transaction's p50 and p99
  (from `+"`Begin`"+` to `+"`Commit`"+` returning); the drop is 1 − during ÷ before, and
  also 1 − during ÷ the mean of before and after, which a drift of the machine over the run moves less. The cleanup's speed is the rows deleted over its
  duration (it must delete all %s and leave the table empty); its CPU is that of the PostgreSQL backends serving its pool
  (/proc), per 1,000,000 rows. Pauses measured (`+"`-cleanup-pause`"+`): %s; the target is for the default pause, %s.
`, thousands(int64(rows)), thousands(cleanupFillChunk), writeWriters, window, thousands(cleanup.DefaultBatch), window, thousands(int64(rows)),
		strings.Join(pauseKeys(), ", "), cleanup.DefaultPause)
}

// pauseKeys returns the keys of the pauses measured.
func pauseKeys() []string {
	var ks []string
	for _, p := range cleanupPauses {
		ks = append(ks, pauseKey(p))
	}
	return ks
}
