package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// The adversity section measures Courier (only) where a relay's claim used
// to suffer:
//
//   - an empty claim on PostgreSQL with millions of dead rows in the outbox
//     that vacuum cannot remove, because a transaction older than their
//     delete is still open (claims scan from a floor, not from the start of
//     the primary key);
//   - one key's latency while another key holds thousands of rows behind a
//     poison message, on every dialect (claims skip held keys' rows as the
//     scan meets them), with the poison message rejected by the stream, and
//     with it sent to a subject no stream binds.

// Figures of the adversity section. The claim figures are keyed by
// "postgres", the isolation figures by dialect.
var adversityFigures = []Figure{
	{ID: "adv_claim_clean_p50", Section: "adversity", Label: "Empty claim, clean table, p50", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "adv_claim_clean_p99", Section: "adversity", Label: "Empty claim, clean table, p99", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "adv_claim_clean_first", Section: "adversity", Label: "Empty claim, clean table, first claim of a new Store", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "adv_claim_dead_p50", Section: "adversity", Label: "Empty claim, dead rows and a long transaction, p50", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "adv_claim_dead_p99", Section: "adversity", Label: "Empty claim, dead rows and a long transaction, p99", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "adv_claim_dead_first", Section: "adversity", Label: "Empty claim, dead rows and a long transaction, first claim of a new Store", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "adv_scan_clean_p50", Section: "adversity", Label: "SELECT id ORDER BY id LIMIT 1, clean table, p50", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "adv_scan_clean_p99", Section: "adversity", Label: "SELECT id ORDER BY id LIMIT 1, clean table, p99", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "adv_scan_clean_first", Section: "adversity", Label: "SELECT id ORDER BY id LIMIT 1, clean table, first", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "adv_scan_dead_p50", Section: "adversity", Label: "SELECT id ORDER BY id LIMIT 1, dead rows, p50", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "adv_scan_dead_p99", Section: "adversity", Label: "SELECT id ORDER BY id LIMIT 1, dead rows, p99", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "adv_scan_dead_first", Section: "adversity", Label: "SELECT id ORDER BY id LIMIT 1, dead rows, first", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "adv_dead_tup_before", Section: "adversity", Label: "n_dead_tup before the claims", Unit: "rows", Digits: -1},
	{ID: "adv_dead_tup_after", Section: "adversity", Label: "n_dead_tup after the claims", Unit: "rows", Digits: -1},
	{ID: "adv_poison_p50", Section: "adversity", Label: "L p50, K's poison rejected by the stream", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "adv_poison_p99", Section: "adversity", Label: "L p99, K's poison rejected by the stream", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "adv_poison_max", Section: "adversity", Label: "L max, K's poison rejected by the stream", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "adv_poison_retried", Section: "adversity", Label: "K's failed publishes, poison rejected by the stream", Unit: "publishes", Digits: -1},
	{ID: "adv_poison_attempts", Section: "adversity", Label: "K's poison: counted attempts, rejected by the stream", Unit: "attempts", Digits: -1},
	{ID: "adv_unbound_p50", Section: "adversity", Label: "L p50, K's poison on an unbound subject", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "adv_unbound_p99", Section: "adversity", Label: "L p99, K's poison on an unbound subject", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "adv_unbound_max", Section: "adversity", Label: "L max, K's poison on an unbound subject", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "adv_unbound_retried", Section: "adversity", Label: "K's failed publishes, poison on an unbound subject", Unit: "publishes", Digits: -1},
	{ID: "adv_unbound_attempts", Section: "adversity", Label: "K's poison: counted attempts, unbound subject", Unit: "attempts", Digits: -1},
}

// Settings of the adversity section that do not change with -quick.
const (
	// advClaimWarmup is how long a new Store claims before its claims are
	// timed: its first claims are full passes until its floor has claims
	// enough to rise from (store/postgres, floor.go).
	advClaimWarmup = 3 * time.Second
	// advKRows is how many rows of key K wait behind its poison message.
	advKRows = 5000
	// advLRate is key L's offered load, messages per second.
	advLRate = 10
	// advPoisonBytes is the poison message's payload size, over
	// advMaxMsgSize.
	advPoisonBytes = 2048
	// advMaxMsgSize is the poison stream's MaxMsgSize.
	advMaxMsgSize = 1024
	// advBackoff is the relay's retry delay (Initial = Max): K stays held
	// throughout the measurement.
	advBackoff = 2 * time.Second
	// advMaxAttempts is the relay's MaxAttempts: K's poison is never parked
	// during the measurement.
	advMaxAttempts = 1000
	// advSettle is how long the relay runs before L's messages start.
	advSettle = time.Second
	// advArrivalTimeout bounds the wait for L's last messages.
	advArrivalTimeout = 30 * time.Second
	// unboundTopic is the topic of the poison message whose subject no
	// stream binds.
	unboundTopic = "unbound"
)

// adversityPoisons are the isolation rows' kinds of poison message, in
// table order: the figure prefix and how the row is described.
var adversityPoisons = []struct{ fig, label string }{
	{"adv_poison", fmt.Sprintf("rejected by the stream (%s-byte payload, stream MaxMsgSize %s)", thousands(advPoisonBytes), thousands(advMaxMsgSize))},
	{"adv_unbound", "sent to a subject no stream binds"},
}

// runAdversityClaim times empty claims of PostgreSQL's relay store on a clean outbox,
// then on one whose deadRows rows were deleted while a transaction that
// holds vacuum back stays open, and a scan from the start of the primary key
// in both states for reference.
func (b *Bench) runAdversityClaim(ctx context.Context) error {
	env, err := newEnv(ctx, b.admin, b.cfg.pgURL, b.cfg.natsURL, "courier")
	if err != nil {
		return err
	}
	defer env.Close()
	if _, err := postgres.NewDriver(env.Pool).Migrate(ctx); err != nil {
		return err
	}
	if err := b.timeClaims(ctx, env, "clean"); err != nil {
		return err
	}
	if err := b.timeScans(ctx, env, "clean"); err != nil {
		return err
	}

	n := b.cfg.advDeadRows
	start := time.Now()
	const chunk = 500000
	for done := 0; done < n; done += chunk {
		// The columns of migration 0001, shaped like the benchmark's other
		// messages (10,000 keys, a 200-byte JSON payload).
		_, err := env.Pool.Exec(ctx, `INSERT INTO courier_outbox (message_id, topic, ordering_key, type, version, content_type, payload, occurred_at)
SELECT gen_random_uuid(), $3, 'key-' || (g % 10000), $4, 1, $5,
       convert_to(rpad('{"seq":' || g || ',"pad":"', 198, 'x') || '"}', 'UTF8'), now()
FROM generate_series($1::bigint, $2::bigint) g`, done+1, min(done+chunk, n), Topic, messageType, contentType)
		if err != nil {
			return fmt.Errorf("fill: %w", err)
		}
	}
	logf("  inserted %s rows (%s)", thousands(int64(n)), time.Since(start).Round(100*time.Millisecond))

	// A long report: a read-only transaction whose snapshot, taken before
	// the delete, lasts to the end of the measurement, on its own
	// connection. The deleted rows stay visible to it, so neither vacuum
	// nor index scans may remove them. (It has no xid, so it does not hold
	// the claims' floor; a transaction that writes would, for up to 30 s.)
	hold, err := pgx.Connect(ctx, env.URL)
	if err != nil {
		return err
	}
	defer hold.Close(context.Background())
	tx, err := hold.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	var seen int64
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM courier_outbox").Scan(&seen); err != nil {
		return err
	}
	start = time.Now()
	tag, err := env.Pool.Exec(ctx, "DELETE FROM courier_outbox")
	if err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	logf("  deleted %s rows while a report that saw %d of them is open (%s)", thousands(tag.RowsAffected()), seen, time.Since(start).Round(100*time.Millisecond))

	// Statistics reach pg_stat_user_tables within seconds of the delete.
	deadTuples := func() (int64, error) {
		var dead int64
		err := b.admin.QueryRow(ctx, "SELECT coalesce(n_dead_tup, 0) FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'courier_outbox'",
			env.Schema).Scan(&dead)
		return dead, err
	}
	var dead int64
	_ = waitFor(ctx, 15*time.Second, 200*time.Millisecond, func() (bool, error) {
		var err error
		dead, err = deadTuples()
		return dead >= int64(n), err
	})
	b.results.Add("adv_dead_tup_before", "postgres", float64(dead))
	if err := b.timeClaims(ctx, env, "dead"); err != nil {
		return err
	}
	if err := b.timeScans(ctx, env, "dead"); err != nil {
		return err
	}
	if dead, err = deadTuples(); err != nil {
		return err
	}
	b.results.Add("adv_dead_tup_after", "postgres", float64(dead))
	return tx.Rollback(ctx)
}

// timeClaims times the first claim of a new PostgreSQL relay store on env's (empty)
// outbox, claims for advClaimWarmup, then advClaims timed claims, and
// records them under adv_claim_<state>_*.
func (b *Bench) timeClaims(ctx context.Context, env *Env, state string) error {
	pool, err := newPool(ctx, env.RelayURL, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := postgres.NewDriver(pool).RelayStore(ctx, store.RelayConfig{})
	if err != nil {
		return err
	}
	claim := func() (float64, error) {
		start := time.Now()
		batch, err := st.Claim(ctx, "bench-adversity", 1000, 30*time.Second)
		took := time.Since(start)
		if err == nil && len(batch.Records) > 0 {
			err = fmt.Errorf("a claim on an empty outbox returned %d rows", len(batch.Records))
		}
		return took.Seconds() * 1000, err
	}
	first, err := claim()
	if err != nil {
		return err
	}
	warm := 1
	for start := time.Now(); time.Since(start) < advClaimWarmup; warm++ {
		if _, err := claim(); err != nil {
			return err
		}
	}
	times := make([]float64, b.cfg.advClaims)
	for i := range times {
		if times[i], err = claim(); err != nil {
			return err
		}
	}
	slices.Sort(times)
	logf("  %s: %d warm-up claims", state, warm)
	b.results.Add("adv_claim_"+state+"_first", "postgres", first)
	b.results.Add("adv_claim_"+state+"_p50", "postgres", quantile(times, 0.50))
	b.results.Add("adv_claim_"+state+"_p99", "postgres", quantile(times, 0.99))
	return nil
}

// timeScans times advScans runs of the scan a claim from the start of the
// primary key makes, the first one separately, and records them under
// adv_scan_<state>_*.
func (b *Bench) timeScans(ctx context.Context, env *Env, state string) error {
	scan := func() (float64, error) {
		start := time.Now()
		var id int64
		err := env.Pool.QueryRow(ctx, "SELECT id FROM courier_outbox ORDER BY id LIMIT 1").Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		} else if err == nil {
			err = fmt.Errorf("the outbox is not empty (id %d)", id)
		}
		return time.Since(start).Seconds() * 1000, err
	}
	first, err := scan()
	if err != nil {
		return err
	}
	times := make([]float64, b.cfg.advScans)
	for i := range times {
		if times[i], err = scan(); err != nil {
			return err
		}
	}
	slices.Sort(times)
	b.results.Add("adv_scan_"+state+"_first", "postgres", first)
	b.results.Add("adv_scan_"+state+"_p50", "postgres", quantile(times, 0.50))
	b.results.Add("adv_scan_"+state+"_p99", "postgres", quantile(times, 0.99))
	return nil
}

// isolationTarget is one dialect's outbox and stream for an isolation run.
type isolationTarget struct {
	env *Env
	// write commits msgs in one transaction with Courier's outbox writer.
	write func(ctx context.Context, msgs ...courier.Message) error
	// queryRow runs a query on the outbox's database.
	queryRow func(ctx context.Context, query string, dest ...any) error
	// startRelay starts a relay with cfg, its Notifier set for the dialect.
	startRelay func(ctx context.Context, cfg relay.Config) (Relay, error)
	close      func()
}

// openIsolation prepares a fresh outbox of dialect and a fresh stream whose
// settings tune changes. The writer and the relay share the process: on
// PostgreSQL the relay listens (postgres.Notifier), on SQLite and MySQL the
// writer signals a store.LocalNotifier, as those dialects' docs show.
func (b *Bench) openIsolation(ctx context.Context, dialect string, tune func(*jetstream.StreamConfig)) (*isolationTarget, error) {
	d, err := dialectByName(dialect)
	if err != nil {
		return nil, err
	}
	if d.fresh == nil {
		return b.openIsolationPostgres(ctx, tune)
	}
	db, err := d.fresh(b, ctx)
	if err != nil {
		return nil, err
	}
	env, err := newStreamEnv(ctx, b.cfg.natsURL, "courier_"+dialect, tune)
	if err != nil {
		db.cleanup()
		return nil, err
	}
	n := store.NewLocalNotifier()
	w := outbox.New(db.Inserter(), outbox.Config{Notify: n.Signal})
	return &isolationTarget{
		env: env,
		write: func(ctx context.Context, msgs ...courier.Message) error {
			return db.InTx(ctx, func(tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) })
		},
		queryRow: func(ctx context.Context, query string, dest ...any) error {
			return db.SQL().QueryRowContext(ctx, query).Scan(dest...)
		},
		startRelay: func(ctx context.Context, cfg relay.Config) (Relay, error) {
			st, err := db.RelayStore(ctx, store.RelayConfig{})
			if err != nil {
				return nil, err
			}
			cfg.Notifier = n
			return startCourierRelay(env, st, cfg, func() {})
		},
		close: func() {
			env.Close()
			db.cleanup()
		},
	}, nil
}

// openIsolationPostgres is openIsolation on the drain section's
// PostgreSQL environment.
func (b *Bench) openIsolationPostgres(ctx context.Context, tune func(*jetstream.StreamConfig)) (*isolationTarget, error) {
	env, err := newEnv(ctx, b.admin, b.cfg.pgURL, b.cfg.natsURL, "courier", tune)
	if err != nil {
		return nil, err
	}
	db := postgres.NewDriver(env.Pool)
	if _, err := db.Migrate(ctx); err != nil {
		env.Close()
		return nil, err
	}
	w := outbox.New(db.Inserter(), outbox.Config{})
	return &isolationTarget{
		env: env,
		write: func(ctx context.Context, msgs ...courier.Message) error {
			return db.InTx(ctx, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) })
		},
		queryRow: func(ctx context.Context, query string, dest ...any) error {
			return env.Pool.QueryRow(ctx, query).Scan(dest...)
		},
		startRelay: func(ctx context.Context, cfg relay.Config) (Relay, error) {
			pool, err := newPool(ctx, env.RelayURL, 10)
			if err != nil {
				return nil, err
			}
			rdb := postgres.NewDriver(pool)
			st, err := rdb.RelayStore(ctx, store.RelayConfig{})
			if err != nil {
				pool.Close()
				return nil, err
			}
			if cfg.Notifier, err = rdb.Notifier(nil); err != nil {
				pool.Close()
				return nil, err
			}
			return startCourierRelay(env, st, cfg, pool.Close)
		},
		close: env.Close,
	}, nil
}

// runIsolation measures key L's commit→publish latency on dialect while key
// K holds advKRows rows behind a poison message: rejected by the stream
// (unbound false) or sent to a subject no stream binds (unbound true).
func (b *Bench) runIsolation(ctx context.Context, dialect string, unbound bool) error {
	fig := adversityPoisons[0].fig
	tune := func(c *jetstream.StreamConfig) { c.MaxMsgSize = advMaxMsgSize }
	poisonTopic, poisonPayload := Topic, []byte(`{"pad":"`+strings.Repeat("x", advPoisonBytes-10)+`"}`)
	if unbound {
		fig = adversityPoisons[1].fig
		// The stream binds <prefix>events only; <prefix>unbound has no
		// stream, and no subscriber either.
		tune = func(c *jetstream.StreamConfig) {
			c.Subjects = []string{strings.TrimSuffix(c.Subjects[0], ">") + Topic}
		}
		poisonTopic, poisonPayload = unboundTopic, payloadFor(0)
	}
	t, err := b.openIsolation(ctx, dialect, tune)
	var nm errNotMeasured
	if errors.As(err, &nm) {
		logf("  %s not measured: %s", dialectName(dialect), nm.why)
		for _, f := range adversityFigures {
			if strings.HasPrefix(f.ID, fig+"_") {
				b.results.Skip(f.ID, dialect, nm.why)
			}
		}
		return nil
	}
	if err != nil {
		return err
	}
	defer t.close()

	nc, err := natsgo.Connect(b.cfg.natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	total := int(advLRate * b.cfg.advWindow.Seconds())
	arr, err := subscribeArrivals(nc, t.env.Subject(), total+advKRows)
	if err != nil {
		return err
	}
	defer arr.Close()

	poison := courier.NewMessage(poisonTopic, "K", messageType, poisonPayload, courier.WithContentType(contentType))
	if err := t.write(ctx, poison); err != nil {
		return fmt.Errorf("write K's poison message: %w", err)
	}
	var kRecs []commitRecord
	for done := 0; done < advKRows; {
		msgs := make([]courier.Message, min(1000, advKRows-done))
		for i := range msgs {
			msgs[i] = courierMessage("K", payloadFor(done+i))
			kRecs = append(kRecs, commitRecord{id: msgs[i].ID.String()})
		}
		if err := t.write(ctx, msgs...); err != nil {
			return fmt.Errorf("write K's rows: %w", err)
		}
		done += len(msgs)
	}

	r, err := t.startRelay(ctx, relay.Config{BatchSize: 1000, Concurrency: 2, MaxAttempts: advMaxAttempts,
		Backoff: relay.Backoff{Initial: advBackoff, Max: advBackoff}})
	if err != nil {
		return err
	}
	defer func() { _ = r.Stop() }()
	time.Sleep(advSettle)

	// One writer, one message of key L per transaction, paced at advLRate.
	commits := make([]commitRecord, 0, total)
	start := time.Now()
	for i := range total {
		if d := time.Until(start.Add(time.Duration(i) * time.Second / advLRate)); d > 0 {
			time.Sleep(d)
		}
		m := courierMessage("L", payloadFor(i))
		if err := t.write(ctx, m); err != nil {
			return fmt.Errorf("write L: %w", err)
		}
		commits = append(commits, commitRecord{id: m.ID.String(), at: time.Now()})
	}
	_ = waitFor(ctx, advArrivalTimeout, 10*time.Millisecond, func() (bool, error) {
		_, missing := arr.latencies(commits)
		return missing == 0, nil
	})
	m := r.(*courierRelay).r.Metrics()
	var attempts int64
	var lastErr sql.NullString
	// A permanent rejection (a message over the stream's limit) makes the
	// poison message a dead letter at once; K's later rows then follow it.
	parked := false
	if err := t.queryRow(ctx, "SELECT attempts, last_error FROM courier_outbox WHERE ordering_key = 'K' ORDER BY id LIMIT 1", &attempts, &lastErr); err != nil {
		if err := t.queryRow(ctx, "SELECT attempts, last_error FROM courier_outbox_dead_letters WHERE ordering_key = 'K' ORDER BY id LIMIT 1", &attempts, &lastErr); err != nil {
			return fmt.Errorf("read K's poison row (pending or dead letter): %w", err)
		}
		parked = true
	}
	logf("  K's poison: %d counted attempts, %d failed publishes, %d dead-lettered, last error %q", attempts, m.Retried, m.DeadLettered, lastErr.String)

	lat, missing := arr.latencies(commits)
	if len(lat) == 0 {
		return fmt.Errorf("no message of key L arrived")
	}
	if missing > 0 {
		for _, p := range []string{"p50", "p99", "max"} {
			b.results.Flag(fig+"_"+p, dialect, fmt.Sprintf("%d of %d messages of L had not arrived %s after the last commit; percentiles of the others (understated)",
				missing, total, advArrivalTimeout))
		}
	}
	if parked {
		b.results.Flag(fig+"_p50", dialect, "K's poison message was rejected for good and became a dead letter at its first attempt; K's later rows followed it, so K held nothing back for long")
	} else if _, notYet := arr.latencies(kRecs); notYet < len(kRecs) {
		b.results.Flag(fig+"_p50", dialect, fmt.Sprintf("%d of K's later rows were published while its poison message was pending", len(kRecs)-notYet))
	}
	if m.DeadLettered > 0 && !parked {
		b.results.Flag(fig+"_retried", dialect, fmt.Sprintf("%d messages dead-lettered", m.DeadLettered))
	}
	b.results.Add(fig+"_p50", dialect, quantile(lat, 0.50))
	b.results.Add(fig+"_p99", dialect, quantile(lat, 0.99))
	b.results.Add(fig+"_max", dialect, lat[len(lat)-1])
	b.results.Add(fig+"_retried", dialect, float64(m.Retried))
	b.results.Add(fig+"_attempts", dialect, float64(attempts))
	return nil
}

// renderAdversity renders the adversity section's two tables and their
// targets.
func renderAdversity(sb *strings.Builder, fn *footnotes, res *Results, cfg config) {
	w := func(format string, args ...any) { fmt.Fprintf(sb, format, args...) }
	runs := cfg.runs
	c := func(id, key string) string {
		s, _, ok := cell(res, fn, figureByID(id), key, runs)
		if !ok && len(res.SkippedOf(id, key)) > 0 {
			return "not measured (" + strings.Join(res.SkippedOf(id, key), "; ") + ")"
		}
		return s
	}
	if measured(res, adversityFigures[:14]) {
		w("Empty claim on PostgreSQL (`Store.Claim(ctx, owner, 1000, 30s)` on an empty outbox; p50 and p99 of %d claims after %s of claims of the same Store; the first claim of a new Store separately), ms (↓ better):\n\n",
			cfg.advClaims, advClaimWarmup)
		w("| Outbox | p50 | p99 | first claim |\n|---|---:|---:|---:|\n")
		w("| Claim, clean table | %s | %s | %s |\n", c("adv_claim_clean_p50", "postgres"), c("adv_claim_clean_p99", "postgres"), c("adv_claim_clean_first", "postgres"))
		w("| Claim with %s dead rows and a long transaction open | %s | %s | %s |\n", thousands(int64(cfg.advDeadRows)),
			c("adv_claim_dead_p50", "postgres"), c("adv_claim_dead_p99", "postgres"), c("adv_claim_dead_first", "postgres"))
		w("| Reference: `SELECT id FROM courier_outbox ORDER BY id LIMIT 1` (a scan from the start, as claims made before), clean table | %s | %s | %s |\n",
			c("adv_scan_clean_p50", "postgres"), c("adv_scan_clean_p99", "postgres"), c("adv_scan_clean_first", "postgres"))
		w("| Reference: the same, %s dead rows and a long transaction open | %s | %s | %s |\n", thousands(int64(cfg.advDeadRows)),
			c("adv_scan_dead_p50", "postgres"), c("adv_scan_dead_p99", "postgres"), c("adv_scan_dead_first", "postgres"))
		w("\nReference rows: p50 and p99 of %d queries after the first. `n_dead_tup` of the outbox (pg_stat_user_tables) before the dead-row claims: %s; after them and the reference queries: %s.\n",
			cfg.advScans, c("adv_dead_tup_before", "postgres"), c("adv_dead_tup_after", "postgres"))
		clean, ok1 := res.Stat("adv_claim_clean_p50", "postgres")
		dead, ok2 := res.Stat("adv_claim_dead_p50", "postgres")
		clean99, ok3 := res.Stat("adv_claim_clean_p99", "postgres")
		dead99, ok4 := res.Stat("adv_claim_dead_p99", "postgres")
		if ok1 && ok2 && ok3 && ok4 && clean.Median > 0 && clean99.Median > 0 {
			r50, r99 := dead.Median/clean.Median, dead99.Median/clean99.Median
			w("\nTarget: the two claim rows within 2× of each other: p50 %.2f×, p99 %.2f× (medians): %s.\n", r50, r99, verdict(r50 <= 2 && r99 <= 2 && r50 >= 0.5 && r99 >= 0.5))
		}
	}
	if !measured(res, adversityFigures[14:]) && !skippedAny(res, adversityFigures[14:]) {
		return
	}
	if measured(res, adversityFigures[:14]) {
		w("\n")
	}
	w("Key L's commit→publish latency while key K holds %s rows behind a poison message (relay: BatchSize 1000, Concurrency 2, MaxAttempts %d, backoff %s; L: %d messages/s, one per transaction, for %s), ms (↓ better):\n\n",
		thousands(advKRows), advMaxAttempts, advBackoff, advLRate, cfg.advWindow)
	w("| K's poison message | Store dialect | L p50 | L p99 | L max | K's failed publishes | K's counted attempts |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, p := range adversityPoisons {
		for _, d := range dialects {
			w("| %s | %s | %s | %s | %s | %s | %s |\n", p.label, dialectName(d), c(p.fig+"_p50", d), c(p.fig+"_p99", d), c(p.fig+"_max", d),
				c(p.fig+"_retried", d), c(p.fig+"_attempts", d))
		}
	}
	w("\nK's failed publishes: the relay's Retried count at the end of the run (every failure of K's poison message); counted attempts: the poison row's attempts column (failures the relay counts towards MaxAttempts; a broker it considers unavailable is not counted).\n")
	for _, p := range adversityPoisons {
		var worst []string
		met, seen := true, false
		for _, d := range dialects {
			st, ok := res.Stat(p.fig+"_p99", d)
			if !ok {
				continue
			}
			seen = true
			if st.Median >= 50 {
				met = false
				worst = append(worst, fmt.Sprintf("%s %s ms", dialectName(d), formatValue(figureByID(p.fig+"_p99"), st.Median)))
			}
		}
		if seen {
			w("\nTarget: L's p99 under 50 ms on every dialect, poison %s: %s", p.label, verdict(met))
			if len(worst) > 0 {
				w(" (%s)", strings.Join(worst, ", "))
			}
			w(".\n")
		}
	}
}

// skippedAny reports whether any cell of figs was skipped.
func skippedAny(res *Results, figs []Figure) bool {
	for _, f := range figs {
		if len(res.Skipped[f.ID]) > 0 {
			return true
		}
	}
	return false
}

// verdict words a target's outcome.
func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// adversitySettingsText documents how the adversity section is measured.
func adversitySettingsText(cfg config) string {
	return fmt.Sprintf(`- **Empty claim with dead rows** (Courier alone, PostgreSQL): a fresh schema, migrated; a new relay store (`+"`postgres.Driver`"+`'s `+"`RelayStore`"+`, pool of 4)
  claims on the empty outbox: the first claim is timed alone (a new Store's first claims are full passes), then the Store claims
  back to back for %s (its floor rises once it has a few claims to go by), then %d claims are timed. Then %s rows are inserted with one
  `+"`INSERT … SELECT … FROM generate_series`"+` per 500,000 (the real columns, 10,000 keys, a 200-byte payload), a long report on a
  connection of its own (a read-only REPEATABLE READ transaction that counts the rows) stays open, every row is deleted (as
  publishing does), and a new Store is timed the same way while that transaction is still open; it is rolled back afterwards.
  The report holds vacuum back but has no xid, so it does not hold the claims' floor (a transaction that writes would, for up
  to 30 s: store/postgres, floor.go). The reference
  rows time `+"`SELECT id FROM courier_outbox ORDER BY id LIMIT 1`"+` (%d times after a first one) in both states. n_dead_tup is
  read from pg_stat_user_tables after the delete and again at the end.
- **Isolation** (Courier alone, every dialect): a fresh outbox (the dialects table's PostgreSQL schema, SQLite file, MySQL database)
  and a fresh stream; one message of key K that can never be published, then %s more rows of K (transactions of 1000); then a
  relay in this process (`+"`relay.Config{BatchSize: 1000, Concurrency: 2, MaxAttempts: %d, Backoff: {Initial: %s, Max: %s}}`"+`,
  Courier's JetStream publisher with its defaults, PostgreSQL's LISTEN/NOTIFY notifier or, for SQLite and MySQL, a
  `+"`store.LocalNotifier`"+` signalled by the writer); %s later one writer commits %d messages of key L per second, one per
  transaction, for %s; latency is from Commit returning to a core NATS subscriber of the stream's subject receiving the message
  (as in the latency section). Poison kinds: a %s-byte payload on a stream with MaxMsgSize %s (the stream rejects it, a failure
  the relay counts), and a message whose topic maps to a subject no stream binds (the stream binds `+"`<prefix>events`"+` only;
  nothing subscribes to `+"`<prefix>unbound`"+`). The run is flagged if any of K's later rows was published.
`, advClaimWarmup, cfg.advClaims, thousands(int64(cfg.advDeadRows)), cfg.advScans,
		thousands(advKRows), advMaxAttempts, advBackoff, advBackoff, advSettle, advLRate, cfg.advWindow,
		thousands(advPoisonBytes), thousands(advMaxMsgSize))
}
