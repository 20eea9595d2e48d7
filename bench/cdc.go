package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay/cdc"
	"github.com/courier-go/courier/store/postgres"
)

// The cdc section compares, in one run, Courier's polling relay (relay.New
// with LISTEN/NOTIFY, as in the drain section) with its CDC relay
// (relay/cdc, reading a logical replication slot), both on the same
// PostgreSQL and NATS: drains of a pre-filled outbox over 10,000 keys and
// one key, commit→publish latency at 1,000 and 5,000 msg/s offered, the
// database's CPU per 100k messages, and the write path of table-less
// messages (postgres.LogOnly, and pipelined with the business insert,
// postgres.QueueLogMessages) next to a plain insert and the table insert
// (each also pipelined).
// Drains run inside the bench process (the relay process's own CPU is not
// reported here; the drain section has it for the polling relay). Every
// CDC measurement makes a slot and a publication of its own and drops
// them afterwards, also when it fails; a run also drops inactive slots
// named bench_cdc_… that an interrupted run left.

// Result keys of the cdc section's two relays.
const (
	cdcPolling = "cdc_polling"
	cdcLog     = "cdc_log"
)

// cdcPartNames are the parts of the cdc section (-cdc-parts), in the order
// they run.
var cdcPartNames = []string{"drain", "latency", "write"}

// cdcSlotPrefix begins the names of the section's slots and publications.
const cdcSlotPrefix = "bench_cdc_"

// cdcFigures are the cdc section's figures, keyed by cdcPolling and
// cdcLog (the write path's by reference).
var cdcFigures = append(cdcDrainFigures(), []Figure{
	{ID: "cdc_lat1000_p50", Section: "cdc", Label: "Commit→publish p50 @ 1,000 msg/s", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "cdc_lat1000_p99", Section: "cdc", Label: "Commit→publish p99 @ 1,000 msg/s", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "cdc_lat1000_p999", Section: "cdc", Label: "Commit→publish p999 @ 1,000 msg/s", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "cdc_lat1000_offered", Section: "cdc", Label: "Load actually offered (committed) @ 1,000 msg/s target", Unit: "msg/s", Digits: -1},
	{ID: "cdc_lat5000_p50", Section: "cdc", Label: "Commit→publish p50 @ 5,000 msg/s", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "cdc_lat5000_p99", Section: "cdc", Label: "Commit→publish p99 @ 5,000 msg/s", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "cdc_lat5000_p999", Section: "cdc", Label: "Commit→publish p999 @ 5,000 msg/s", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "cdc_lat5000_offered", Section: "cdc", Label: "Load actually offered (committed) @ 5,000 msg/s target", Unit: "msg/s", Digits: -1},
	{ID: "cdc_cpu_pg_drain", Section: "cdc", Label: "PostgreSQL CPU per 100k msgs, draining 10,000 keys", Unit: "s", LowerIsBetter: true, Digits: 2},
	{ID: "cdc_cpu_pg_lat1000", Section: "cdc", Label: "PostgreSQL CPU per 100k msgs, steady @ 1,000 msg/s", Unit: "s", LowerIsBetter: true, Digits: 2},
	{ID: "cdc_cpu_pg_lat5000", Section: "cdc", Label: "PostgreSQL CPU per 100k msgs, steady @ 5,000 msg/s", Unit: "s", LowerIsBetter: true, Digits: 2},
	{ID: "cdc_cpu_wal_drain", Section: "cdc", Label: "… of which the walsender, draining 10,000 keys", Unit: "s", LowerIsBetter: true, Digits: 2},
	{ID: "cdc_cpu_wal_lat1000", Section: "cdc", Label: "… of which the walsender, steady @ 1,000 msg/s", Unit: "s", LowerIsBetter: true, Digits: 2},
	{ID: "cdc_cpu_wal_lat5000", Section: "cdc", Label: "… of which the walsender, steady @ 5,000 msg/s", Unit: "s", LowerIsBetter: true, Digits: 2},
	{ID: "cdc_write_plain", Section: "cdc", Label: "Plain insert (one `orders` row per tx), 8 writers", Unit: "tx/s", Digits: -1},
	{ID: "cdc_write_table", Section: "cdc", Label: "Insert + outbox row (`postgres.Pgx`), 8 writers", Unit: "tx/s", Digits: -1},
	{ID: "cdc_write_table_pipelined", Section: "cdc", Label: "Insert + outbox row pipelined (`postgres.QueueMessages`), 8 writers", Unit: "tx/s", Digits: -1},
	{ID: "cdc_write_logonly", Section: "cdc", Label: "Insert + table-less message (`postgres.LogOnly`), 8 writers", Unit: "tx/s", Digits: -1},
	{ID: "cdc_write_logonly_pipelined", Section: "cdc", Label: "Insert + table-less message pipelined (`postgres.QueueLogMessages`), 8 writers", Unit: "tx/s", Digits: -1},
}...)

// cdcDrainFigures are the cdc section's drains, one per key count.
func cdcDrainFigures() []Figure {
	var figs []Figure
	for _, k := range sweepKeys {
		figs = append(figs, Figure{ID: fmt.Sprintf("cdc_drain_keys%d", k), Section: "cdc", Label: "Drain, " + keysText(k), Unit: "msg/s", Digits: -1})
	}
	return figs
}

// runCDC runs the cdc section once.
func (b *Bench) runCDC(ctx context.Context, try func(string, func() error)) {
	b.dropCDCLeftovers(ctx)
	defer b.dropCDCLeftovers(context.WithoutCancel(ctx))
	modes := []string{cdcPolling, cdcLog}
	for _, keys := range drainKeys {
		for _, m := range modes {
			if slices.Contains(b.cfg.cdcParts, "drain") {
				try(fmt.Sprintf("cdc: drain %s, %d keys", m, keys), func() error { return b.cdcDrain(ctx, m, keys) })
			}
		}
	}
	for _, rate := range b.cfg.rates {
		if !slices.Contains(b.cfg.cdcParts, "latency") {
			break
		}
		for _, m := range modes {
			try(fmt.Sprintf("cdc: latency %s @ %d msg/s", m, rate), func() error {
				sys := &cdcSystem{b: b, mode: m}
				defer sys.cleanup()
				err := b.latencyOf(ctx, sys, m, rate)
				for _, p := range []string{"p50", "p99", "p999", "offered"} {
					b.results.move(fmt.Sprintf("lat%d_%s", rate, p), fmt.Sprintf("cdc_lat%d_%s", rate, p), m)
				}
				if err != nil {
					return err
				}
				if sys.cpuOK && sys.published > 0 {
					b.results.Add(fmt.Sprintf("cdc_cpu_pg_lat%d", rate), m, sys.cpu.Seconds()*100000/float64(sys.published))
					if sys.walPID != 0 {
						b.results.Add(fmt.Sprintf("cdc_cpu_wal_lat%d", rate), m, sys.walsender.Seconds()*100000/float64(sys.published))
					}
				}
				return nil
			})
		}
	}
	if slices.Contains(b.cfg.cdcParts, "write") {
		try("cdc: write path, plain insert, table insert, table-less, each also pipelined", func() error { return b.cdcWrite(ctx) })
	}
}

// cdcSystem is Courier with the polling relay (mode cdcPolling) or the CDC
// relay (cdcLog) in the latency section's machinery; it records the
// database's CPU while its relay runs.
type cdcSystem struct {
	courierSystem
	b    *Bench
	mode string
	slot string // cdcLog: the slot and publication, once prepared

	mu        sync.Mutex
	cpu       time.Duration // the database's CPU while the relay ran
	walsender time.Duration // of which the walsender's (CDC)
	cpuOK     bool
	published int64
	walPID    int // the walsender's pid, once seen
}

// Prepare implements System: Courier's tables and, for the CDC relay, its
// publication (which must exist before the changes it decodes are
// written).
func (s *cdcSystem) Prepare(ctx context.Context, env *Env) error {
	if err := s.courierSystem.Prepare(ctx, env); err != nil {
		return err
	}
	if s.mode != cdcLog {
		return nil
	}
	s.slot = cdcSlotPrefix + strings.ToLower(env.token)
	return postgres.NewDriver(env.Pool).CDC().Setup(ctx, s.slot)
}

// createSlot makes the slot before the outbox is filled, so that the fill is
// in the log the relay reads.
func (s *cdcSystem) createSlot(ctx context.Context) error {
	_, err := s.b.admin.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", s.slot)
	return err
}

// cleanup drops the slot and the publication.
func (s *cdcSystem) cleanup() {
	if s.slot != "" {
		s.b.dropCDC(context.Background(), s.slot)
	}
}

// probe reads the CPU of the database processes serving env's relay: its
// backends (by application name) and, for the CDC relay, the walsender
// reading its slot.
func (s *cdcSystem) probe(ctx context.Context, env *Env) (cpuSnapshot, error) {
	snap, err := backendsCPU(ctx, s.b.admin, env.AppName)
	if err != nil || s.slot == "" {
		return snap, err
	}
	var pid *int
	err = s.b.admin.QueryRow(ctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", s.slot).Scan(&pid)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	if pid != nil {
		if d, err := procCPU(*pid); err == nil {
			snap[*pid] = d
			s.mu.Lock()
			s.walPID = *pid
			s.mu.Unlock()
		}
	}
	return snap, nil
}

// StartRelay implements System.
func (s *cdcSystem) StartRelay(ctx context.Context, env *Env) (Relay, error) {
	var r Relay
	var err error
	if s.mode == cdcLog {
		r, err = startCDCRelay(ctx, env, s.slot)
	} else {
		r, err = s.courierSystem.StartRelay(ctx, env)
	}
	if err != nil {
		return nil, err
	}
	start, _ := s.probe(ctx, env)
	return &probedRelay{Relay: r, stop: func() {
		end, err := s.probe(context.Background(), env)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.published = r.Published()
		if err == nil && len(end) > 0 {
			s.cpu, s.cpuOK = cpuDelta(start, end), true
			if s.walPID != 0 {
				s.walsender = end[s.walPID] - start[s.walPID]
			}
		}
	}}, nil
}

// probedRelay reads the database's CPU when it is stopped.
type probedRelay struct {
	Relay
	stop func()
	once sync.Once
}

// Stop implements Relay.
func (p *probedRelay) Stop() error {
	p.once.Do(p.stop)
	return p.Relay.Stop()
}

// cdcRelay is a running cdc.Relay with its resources.
type cdcRelay struct {
	r      *cdc.Relay
	pool   *pgxpool.Pool
	cancel context.CancelFunc
	done   chan error
	close  func()
	once   sync.Once
	err    error
}

// startCDCRelay runs a CDC relay on env's schema with its own pool on
// env.RelayURL, reading slot (publication slot), publishing with Courier's
// JetStream publisher.
func startCDCRelay(ctx context.Context, env *Env, slot string) (Relay, error) {
	pool, err := newPool(ctx, env.RelayURL, 10)
	if err != nil {
		return nil, err
	}
	nc, err := couriernats.Connect(env.NATSURL)
	if err != nil {
		pool.Close()
		return nil, err
	}
	release := func() { nc.Close(); pool.Close() }
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: couriernats.Config{SubjectPrefix: env.Prefix}})
	if err != nil {
		release()
		return nil, err
	}
	r, err := cdc.New(postgres.NewDriver(pool).CDC(), pub, cdc.Config{Slot: slot, Publication: slot, Observer: slowCallObserver("cdc")})
	if err != nil {
		release()
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	cr := &cdcRelay{r: r, pool: pool, cancel: cancel, done: make(chan error, 1), close: release}
	go func() { cr.done <- r.Run(rctx) }()
	return cr, nil
}

// Published implements Relay.
func (c *cdcRelay) Published() int64 { return c.r.Stats().Published }

// Settle waits until the outbox table is empty: the CDC relay counts a
// message when the broker acknowledged it, and deletes its row after.
func (c *cdcRelay) Settle(ctx context.Context, _ int64) error {
	return waitFor(ctx, time.Minute, time.Millisecond, func() (bool, error) {
		var left bool
		err := c.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM courier_outbox)").Scan(&left)
		return !left, err
	})
}

// Stop implements Relay.
func (c *cdcRelay) Stop() error {
	c.once.Do(func() {
		c.cancel()
		if err := <-c.done; err != nil && !errors.Is(err, context.Canceled) {
			c.err = err
		}
		c.close()
	})
	return c.err
}

// cdcDrain drains a pre-filled outbox of b.cfg.drainN messages over keys
// keys with mode's relay, in this process. For the CDC relay the slot is
// made before the fill, so that the relay reads the messages from the log
// (after peeking at them once at its start) rather than from the table.
func (b *Bench) cdcDrain(ctx context.Context, mode string, keys int) error {
	sys := &cdcSystem{b: b, mode: mode}
	defer sys.cleanup()
	env, err := newEnv(ctx, b.admin, b.cfg.pgURL, b.cfg.natsURL, mode)
	if err != nil {
		return err
	}
	defer env.Close()
	if err := sys.Prepare(ctx, env); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	if mode == cdcLog {
		if err := sys.createSlot(ctx); err != nil {
			return fmt.Errorf("create slot: %w", err)
		}
	}
	n := b.cfg.drainN
	if err := sys.Fill(ctx, env, n, keys); err != nil {
		return err
	}
	spec := &drainSpec{Env: *env, N: n}
	res, r := drainWith(func(ctx context.Context) (Relay, error) { return sys.StartRelay(ctx, env) }, spec)
	if r != nil {
		if err := r.Stop(); err != nil && res.Error == "" {
			res.Error = err.Error()
		}
	}
	if res.Error != "" {
		return errors.New(res.Error)
	}
	if err := b.checkStream(ctx, env, n); err != nil {
		b.results.Flag(fmt.Sprintf("cdc_drain_keys%d", keys), mode, err.Error())
	}
	b.results.Add(fmt.Sprintf("cdc_drain_keys%d", keys), mode, float64(n)/res.Elapsed.Seconds())
	if keys == 10000 && sys.cpuOK {
		b.results.Add("cdc_cpu_pg_drain", mode, sys.cpu.Seconds()*100000/float64(n))
		if sys.walPID != 0 {
			b.results.Add("cdc_cpu_wal_drain", mode, sys.walsender.Seconds()*100000/float64(n))
		}
	}
	return nil
}

// cdcWrite measures the write path: a plain insert, the insert with an
// outbox row, and the insert with a table-less message, the last two once
// through outbox.Writer (a round trip of their own) and once pipelined
// with the insert (postgres.QueueMessages, postgres.QueueLogMessages), one
// after the other on one schema with a slot in place (table-less writes
// refuse to write without one; no relay reads it).
func (b *Bench) cdcWrite(ctx context.Context) error {
	sys := &cdcSystem{b: b, mode: cdcLog}
	defer sys.cleanup()
	env, err := newEnv(ctx, b.admin, b.cfg.pgURL, b.cfg.natsURL, "cdc_write")
	if err != nil {
		return err
	}
	defer env.Close()
	if _, err := env.Pool.Exec(ctx, ordersTable); err != nil {
		return err
	}
	if err := sys.Prepare(ctx, env); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	if err := sys.createSlot(ctx); err != nil {
		return fmt.Errorf("create slot: %w", err)
	}
	for _, c := range []struct {
		id    string
		w     Writer
		queue queueFunc
	}{
		{"cdc_write_plain", nil, nil},
		{"cdc_write_table", courierWriter{w: outbox.New(postgres.Pgx(), outbox.Config{})}, nil},
		{"cdc_write_table_pipelined", nil, postgres.QueueMessages},
		{"cdc_write_logonly", courierWriter{w: outbox.New(postgres.LogOnly(), outbox.Config{})}, nil},
		{"cdc_write_logonly_pipelined", nil, postgres.QueueLogMessages},
	} {
		v, err := b.measureWrite(ctx, env, c.w, c.queue)
		if err != nil {
			return fmt.Errorf("%s: %w", c.id, err)
		}
		b.results.Add(c.id, reference, v)
	}
	return nil
}

// dropCDC drops slot, waiting up to 30 s for its reader to let it go, and
// the publication of the same name.
func (b *Bench) dropCDC(ctx context.Context, slot string) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := b.admin.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			logf("warning: drop replication slot %s: %v (drop it by hand: it retains WAL)", slot, err)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := b.admin.Exec(ctx, "DROP PUBLICATION IF EXISTS "+slot); err != nil {
		logf("warning: drop publication %s: %v", slot, err)
	}
}

// dropCDCLeftovers drops the section's inactive slots and its publications
// left by a run that was interrupted.
func (b *Bench) dropCDCLeftovers(ctx context.Context) {
	rows, err := b.admin.Query(ctx, `SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE $1 AND NOT active
UNION SELECT pubname FROM pg_publication WHERE pubname LIKE $1`, cdcSlotPrefix+"%")
	if err != nil {
		logf("warning: look for leftover slots: %v", err)
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		logf("warning: look for leftover slots: %v", err)
		return
	}
	for _, n := range names {
		b.dropCDC(ctx, n)
	}
}

// move moves system's samples and remarks of figure from to figure to.
func (r *Results) move(from, to, system string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range []map[string]map[string][]float64{r.Samples} {
		if v, ok := m[from][system]; ok {
			if m[to] == nil {
				m[to] = map[string][]float64{}
			}
			m[to][system] = append(m[to][system], v...)
			delete(m[from], system)
			if len(m[from]) == 0 {
				delete(m, from)
			}
		}
	}
	for _, m := range []map[string]map[string][]string{r.Flags, r.Skipped} {
		if v, ok := m[from][system]; ok {
			if m[to] == nil {
				m[to] = map[string][]string{}
			}
			m[to][system] = append(m[to][system], v...)
			delete(m[from], system)
			if len(m[from]) == 0 {
				delete(m, from)
			}
		}
	}
}

// renderCDC renders the cdc section's table: polling and CDC side by
// side, their ratio and the targets, then the write path.
func renderCDC(sb *strings.Builder, fn *footnotes, res *Results, runs int, n int) {
	w := func(format string, args ...any) { fmt.Fprintf(sb, format, args...) }
	type row struct {
		f      Figure
		target string
	}
	var rows []row
	for _, k := range drainKeys {
		rows = append(rows, row{figureByID(fmt.Sprintf("cdc_drain_keys%d", k)), ""})
	}
	for _, rate := range []int{1000, 5000} {
		for _, p := range []string{"p50", "p99", "p999"} {
			t := ""
			if rate == 1000 && p == "p99" {
				t = "≤ 0.5×"
			}
			rows = append(rows, row{figureByID(fmt.Sprintf("cdc_lat%d_%s", rate, p)), t})
		}
		rows = append(rows, row{figureByID(fmt.Sprintf("cdc_lat%d_offered", rate)), ""})
	}
	for _, load := range []string{"drain", "lat1000", "lat5000"} {
		rows = append(rows, row{figureByID("cdc_cpu_pg_" + load), "≤ 0.5×"}, row{figureByID("cdc_cpu_wal_" + load), ""})
	}
	header := false
	for _, r := range rows {
		if _, ok := res.Samples[r.f.ID]; !ok {
			continue
		}
		if !header { // not with -cdc-parts write alone
			header = true
			w("Polling relay vs. CDC relay (relay/cdc), same PostgreSQL and NATS, %s-message drains:\n\n", thousands(int64(n)))
			w("| Figure | Polling | CDC | CDC ÷ polling | Target |\n|---|---:|---:|---:|---|\n")
		}
		dir := "↑"
		if r.f.LowerIsBetter {
			dir = "↓"
		}
		p, ps, okP := cell(res, fn, r.f, cdcPolling, runs)
		c, cs, okC := cell(res, fn, r.f, cdcLog, runs)
		ratio, verdict := "—", ""
		if okP && okC && ps.Median > 0 {
			q := cs.Median / ps.Median
			ratio = fmt.Sprintf("%.2f×", q)
			if r.target != "" {
				verdict = map[bool]string{true: " (met)", false: " (not met)"}[q <= 0.5]
			}
		}
		w("| %s (%s, %s better) | %s | %s | %s | %s%s |\n", r.f.Label, r.f.Unit, dir, p, c, ratio, r.target, verdict)
	}
	if _, ok := res.Samples["cdc_write_plain"]; ok {
		if header {
			w("\n")
		}
		w("Write path (no relay running; a slot exists):\n\n| Figure | Value | ÷ plain insert | Target |\n|---|---:|---:|---|\n")
		plain, okPlain := res.Stat("cdc_write_plain", reference)
		for _, id := range []string{"cdc_write_plain", "cdc_write_table", "cdc_write_table_pipelined", "cdc_write_logonly", "cdc_write_logonly_pipelined"} {
			f := figureByID(id)
			c, st, ok := cell(res, fn, f, reference, runs)
			ratio, target := "", ""
			if ok && okPlain && plain.Median > 0 && id != "cdc_write_plain" {
				ratio = fmt.Sprintf("%.2f×", st.Median/plain.Median)
			}
			if id == "cdc_write_logonly_pipelined" && ok && okPlain && plain.Median > 0 {
				target = "≥ 0.90×" + map[bool]string{true: " (met)", false: " (not met)"}[st.Median >= 0.9*plain.Median]
			}
			w("| %s (%s) | %s | %s | %s |\n", f.Label, f.Unit, c, ratio, target)
		}
	}
	w("\nPostgreSQL CPU: the backends serving the relay's connections (by application name) and, for CDC, the walsender decoding its slot (its share on the \"of which\" rows); writers' backends are not counted. Drains run inside the bench process; the CDC drain's slot exists before the fill, so its relay reads the log (peeking at the backlog once at start, then streaming it), not the table.\n")
}
