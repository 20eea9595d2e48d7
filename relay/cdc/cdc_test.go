package cdc_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/relay/cdc"
	"github.com/courier-go/courier/store/postgres"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.M(m), goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

// env is one test's database schema, slot, publication, writer and broker in
// memory.
type env struct {
	t    *testing.T
	pg   *testenv.PG
	d    postgres.Driver
	w    *outbox.Writer[pgx.Tx]
	pub  *memory.Publisher
	slot string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	var level string
	testenv.Must(t, pg.Pool.QueryRow(context.Background(), "SHOW wal_level").Scan(&level), "wal_level")
	if level != "logical" {
		t.Fatalf("wal_level is %s: CDC needs logical (ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL; .ci/run does)", level)
	}
	d := postgres.NewDriver(pg.Pool)
	e := &env{t: t, pg: pg, d: d, w: outbox.New(d.Inserter(), outbox.Config{}), pub: memory.NewPublisher(), slot: strings.ToLower(testenv.Name("s_"))}
	t.Cleanup(func() { e.dropSlot() })
	return e
}

// config is a relay's configuration on the test's slot and publication,
// retrying after an hour unless the test says otherwise.
func (e *env) config() cdc.Config {
	return cdc.Config{
		Slot: e.slot, Publication: e.slot, BatchSize: 100, StatusInterval: 100 * time.Millisecond,
		Standby: 50 * time.Millisecond,
		Backoff: relay.Backoff{Initial: time.Hour, Max: time.Hour},
		Logger:  slog.New(slog.NewTextHandler(testWriter{e.t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// start runs a relay until the test ends or stop is called.
func (e *env) start(pub broker.Publisher, cfg cdc.Config) (r *cdc.Relay, stop func()) {
	e.t.Helper()
	return e.startOn(e.pg.Pool, pub, cfg)
}

// startOn runs a relay on pool until the test ends or stop is called.
func (e *env) startOn(pool *pgxpool.Pool, pub broker.Publisher, cfg cdc.Config) (r *cdc.Relay, stop func()) {
	e.t.Helper()
	r, err := cdc.New(postgres.NewDriver(pool).CDC(), pub, cfg)
	testenv.Must(e.t, err, "new relay")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			e.t.Fatal("relay did not stop within 15s")
		}
	}
	e.t.Cleanup(stop)
	return r, stop
}

// startMade runs a relay and waits until it reads its slot: made, the
// rows that were in the table published.
func (e *env) startMade(pub broker.Publisher, cfg cdc.Config) (r *cdc.Relay, stop func()) {
	e.t.Helper()
	r, stop = e.start(pub, cfg)
	e.eventually(func() bool { return reads(r) }, "the relay does not read its slot: %+v", testenv.Lazy(func() any { return r.Stats() }))
	return r, stop
}

// reads reports whether r reads its slot (not making it).
func reads(r *cdc.Relay) bool {
	s := r.Stats()
	return s.Reading && !s.Making
}

// dropSlot drops the test's slot once no relay reads it.
func (e *env) dropSlot() {
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := e.pg.Admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, e.slot)
		if err == nil || time.Now().After(deadline) {
			if err != nil {
				e.t.Logf("drop slot %s: %v", e.slot, err)
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, _ = e.pg.Admin.Exec(ctx, "DROP PUBLICATION IF EXISTS "+e.slot)
}

// write commits msgs in one transaction.
func (e *env) write(msgs ...courier.Message) {
	e.t.Helper()
	ctx := context.Background()
	testenv.Must(e.t, e.d.InTx(ctx, func(tx pgx.Tx) error { return e.w.Write(ctx, tx, msgs...) }), "write")
}

func (e *env) count(table string) int {
	e.t.Helper()
	var n int
	testenv.Must(e.t, e.pg.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n), "count "+table)
	return n
}

func (e *env) eventually(cond func() bool, format string, args ...any) {
	e.t.Helper()
	testenv.Eventually(e.t, 30*time.Second, cond, format, args...)
}

func msg(k, name string) courier.Message {
	return courier.NewMessage("events", k, "T", []byte(name))
}

// checkOrder fails unless got holds every message of want, each key's in
// want's order (duplicates allowed after a message's first delivery).
func checkOrder(t *testing.T, want, got []courier.Message) {
	t.Helper()
	byKey := map[string][]courier.Message{}
	for _, m := range want {
		byKey[m.Key] = append(byKey[m.Key], m)
	}
	next := map[string]int{}
	seen := map[[16]byte]bool{}
	for _, m := range got {
		if seen[m.ID] {
			continue
		}
		seen[m.ID] = true
		k := byKey[m.Key]
		i := next[m.Key]
		if i >= len(k) || k[i].ID != m.ID {
			t.Fatalf("key %s: got %s, want %s next", m.Key, m.Payload, k[min(i, len(k)-1)].Payload)
		}
		next[m.Key]++
	}
	for k, ms := range byKey {
		if next[k] != len(ms) {
			t.Fatalf("key %s: %d of %d messages published", k, next[k], len(ms))
		}
	}
}

// Rows written before the relay starts (in the table only) and after (in
// the log) are published once each, every key in commit order, and leave
// the table; the slot's position moves on.
func TestDrainsTableAndLogInOrder(t *testing.T) {
	for _, pipelined := range []bool{false, true} {
		t.Run(fmt.Sprintf("pipelined=%v", pipelined), func(t *testing.T) {
			e := newEnv(t)
			e.pub.KeepOrder(pipelined)
			var want []courier.Message
			add := func(n int) {
				for i := 0; i < n; i += 7 {
					var tx []courier.Message
					for j := i; j < min(i+7, n); j++ {
						tx = append(tx, msg(fmt.Sprintf("k%d", len(want)%23), fmt.Sprint(len(want))))
						want = append(want, tx[len(tx)-1])
					}
					e.write(tx...)
				}
			}
			add(300) // before the relay: the table
			r, _ := e.start(e.pub, e.config())
			add(1200) // while it runs: the log
			e.eventually(func() bool { return len(e.pub.Messages()) >= len(want) && e.count("courier_outbox") == 0 },
				"published %d of %d, %d rows left; stats %+v", len(e.pub.Messages()), len(want), e.count("courier_outbox"), r.Stats())
			checkOrder(t, want, e.pub.Messages())
			if dups := len(e.pub.Messages()) - len(want); dups != 0 {
				t.Fatalf("%d duplicates without any failure", dups)
			}
			e.eventually(func() bool { return r.Stats().Confirmed != "" }, "no position confirmed: %+v", r.Stats())
			s := r.Stats()
			if s.Published != int64(len(want)) || s.Swept < 300 || !s.Reading {
				t.Fatalf("stats %+v: want %d published, at least 300 from the table, reading", s, len(want))
			}
			slot, err := postgres.NewDriver(e.pg.Pool).CDC().Slot(context.Background(), e.slot)
			testenv.Must(t, err, "slot lag")
			lag := slot.LagBytes
			if !slot.Exists {
				t.Fatal("the slot does not exist")
			}
			t.Logf("slot lag %d bytes after the drain; stats %+v", lag, s)
		})
	}
}

// A message the broker rejects for good is a dead letter at once and its
// key moves on; one that keeps failing holds its key back until it becomes
// a dead letter after MaxAttempts; other keys never wait.
func TestPoisonBecomesDeadLetter(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.MaxAttempts = 3
	cfg.Backoff = relay.Backoff{Initial: 20 * time.Millisecond, Max: 20 * time.Millisecond}
	rejected, failing := msg("p", "rejected"), msg("q", "failing")
	e.pub.Reject(rejected.ID, "larger than max_payload")
	e.pub.Fail(failing.ID, -1)
	afterP, afterQ := msg("p", "after"), msg("q", "after")
	var others []courier.Message
	for i := range 40 {
		others = append(others, msg(fmt.Sprintf("o%d", i%4), fmt.Sprint(i)))
	}
	r, _ := e.start(e.pub, cfg)
	e.write(rejected, failing)
	e.write(afterP, afterQ)
	e.write(others...)
	e.eventually(func() bool { return e.count("courier_outbox") == 0 }, "rows left: %d; stats %+v", e.count("courier_outbox"), r.Stats())
	checkOrder(t, append([]courier.Message{afterP, afterQ}, others...), e.pub.Messages())
	if n := e.pub.Attempts(failing.ID); n != 3 {
		t.Fatalf("the failing message was tried %d times, want MaxAttempts (3)", n)
	}
	rows, err := e.pg.Pool.Query(context.Background(), `SELECT message_id::text, attempts, last_error, jsonb_array_length(history) FROM courier_outbox_dead_letters ORDER BY id`)
	testenv.Must(t, err, "dead letters")
	type dl struct {
		id             string
		attempts, hist int
		lastError      string
	}
	got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (dl, error) {
		var d dl
		return d, row.Scan(&d.id, &d.attempts, &d.lastError, &d.hist)
	})
	testenv.Must(t, err, "read dead letters")
	if len(got) != 2 || got[0].id != rejected.ID.String() || got[0].attempts != 1 || !strings.Contains(got[0].lastError, "max_payload") ||
		got[1].id != failing.ID.String() || got[1].attempts != 3 || got[1].hist != 3 {
		t.Fatalf("dead letters %+v: want the rejected one after 1 attempt, the failing one after 3 with its history", got)
	}
	if s := r.Stats(); s.DeadLettered != 2 {
		t.Fatalf("stats %+v: want 2 dead letters", s)
	}
}

// An outage builds a backlog: nothing is published, nothing becomes a dead
// letter, the rows stay; when the broker is back it drains in order.
func TestOutageBuildsBacklog(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.MaxAttempts = 1
	cfg.Backoff = relay.Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond}
	e.pub.Down(true)
	r, _ := e.start(e.pub, cfg)
	var want []courier.Message
	for i := range 200 {
		want = append(want, msg(fmt.Sprintf("k%d", i%10), fmt.Sprint(i)))
	}
	for i := 0; i < len(want); i += 20 {
		e.write(want[i : i+20]...)
	}
	e.eventually(func() bool { return r.Stats().Retried >= 50 }, "stats %+v", r.Stats())
	if n := e.count("courier_outbox_dead_letters"); n != 0 {
		t.Fatalf("%d dead letters during an outage", n)
	}
	if n := e.count("courier_outbox"); n != 200 {
		t.Fatalf("%d rows in the outbox during the outage, want 200", n)
	}
	e.pub.Down(false)
	e.eventually(func() bool { return e.count("courier_outbox") == 0 }, "rows left after the outage: %d", e.count("courier_outbox"))
	checkOrder(t, want, e.pub.Messages())
}

// One relay reads the slot; a second waits as a standby and takes over
// when the first stops. Nothing is lost across the handover.
func TestStandbyTakesOver(t *testing.T) {
	e := newEnv(t)
	_, stopFirst := e.startMade(e.pub, e.config())
	second, _ := e.start(e.pub, e.config())
	var want []courier.Message
	for i := range 100 {
		want = append(want, msg(fmt.Sprintf("k%d", i%5), fmt.Sprint(i)))
		e.write(want[i])
	}
	e.eventually(func() bool { return e.count("courier_outbox") == 0 }, "rows left: %d %v", e.count("courier_outbox"), testenv.Lazy(func() any {
		var ids []int64
		rows, _ := e.pg.Pool.Query(context.Background(), "SELECT id FROM courier_outbox")
		for rows.Next() {
			var id int64
			_ = rows.Scan(&id)
			ids = append(ids, id)
		}
		return ids
	}))
	if second.Stats().Reading || second.Stats().Published != 0 {
		t.Fatalf("the standby reads (%+v) while the first relay holds the slot", second.Stats())
	}
	stopFirst()
	e.eventually(func() bool { return reads(second) }, "the standby did not take over: %+v", second.Stats())
	for i := 100; i < 200; i++ {
		want = append(want, msg(fmt.Sprintf("k%d", i%5), fmt.Sprint(i)))
		e.write(want[i])
	}
	e.eventually(func() bool { return e.count("courier_outbox") == 0 && second.Stats().Published > 0 }, "rows left: %d", e.count("courier_outbox"))
	checkOrder(t, want, e.pub.Messages())
}

// Terminating the relay's walsender mid-drain loses nothing: the relay
// connects again and reads from its confirmed position.
func TestWalsenderTerminated(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.Backoff = relay.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	r, _ := e.startMade(e.pub, cfg)
	var want []courier.Message
	kills := 0
	for i := range 3000 {
		want = append(want, msg(fmt.Sprintf("k%d", i%50), fmt.Sprint(i)))
		if i%30 == 29 {
			e.write(want[i-29 : i+1]...)
		}
		if i%500 == 499 {
			var n int
			testenv.Must(t, e.pg.Admin.QueryRow(context.Background(),
				`SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, e.slot).Scan(&n), "terminate walsender")
			kills += n
		}
	}
	e.eventually(func() bool { return e.count("courier_outbox") == 0 }, "rows left: %d; stats %+v", e.count("courier_outbox"), r.Stats())
	checkOrder(t, want, e.pub.Messages())
	if kills == 0 {
		t.Fatal("no walsender was terminated")
	}
	t.Logf("%d walsenders terminated; %d deliveries for %d messages", kills, len(e.pub.Messages()), len(want))
}

// Bad configuration is refused with the field named.
func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  cdc.Config
		want string
	}{
		{cdc.Config{Slot: "Bad-Slot"}, "Config.Slot"},
		{cdc.Config{Publication: "x y"}, "Config.Publication"},
		{cdc.Config{BatchSize: 20000}, "Config.BatchSize"},
		{cdc.Config{HoldKeys: []string{"orders", "orders"}}, `cdc: Config.HoldKeys names "orders" twice`},
		{cdc.Config{HoldKeys: []string{"*", "orders"}}, "cdc: Config.HoldKeys has \"*\" among other topics"},
	} {
		_, err := cdc.New(nil, nil, c.cfg)
		if err == nil {
			t.Fatalf("%+v accepted", c.cfg)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%+v: %v; want it to name %s", c.cfg, err, c.want)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	if os.Getenv("COURIER_TEST_LOG") != "" {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

// A PostgreSQL restart (fast shutdown, start again) while the relay reads
// and publishes loses nothing: the relay reconnects and reads from its
// confirmed position; the rows still in the table are published again at
// worst. The server is one of the test's own (COURIER_TEST_POSTGRES_BIN).
func TestDatabaseRestart(t *testing.T) {
	srv := testenv.StartPostgres(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, srv.URL)
	testenv.Must(t, err, "pool")
	t.Cleanup(pool.Close)
	d := postgres.NewDriver(pool)
	_, err = d.Migrate(ctx)
	testenv.Must(t, err, "migrate")
	w := outbox.New(d.Inserter(), outbox.Config{})
	pub := memory.NewPublisher()
	cfg := cdc.Config{BatchSize: 100, StatusInterval: 100 * time.Millisecond,
		Backoff: relay.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		Logger:  slog.New(slog.NewTextHandler(testWriter{t}, nil))}
	r, err := cdc.New(postgres.NewDriver(pool).CDC(), pub, cfg)
	testenv.Must(t, err, "relay")
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// A writer commits transactions of 10 messages through the restarts; a
	// transaction that fails is written again (the same messages: should
	// its commit have gone through, the copy is a duplicate, dropped by
	// message id like any other).
	var want []courier.Message
	written := make(chan struct{})
	go func() {
		defer close(written)
		for len(want) < 3000 {
			var tx []courier.Message
			for j := 0; j < 10; j++ {
				tx = append(tx, msg(fmt.Sprintf("k%d", len(want)%17), fmt.Sprint(len(want))))
				want = append(want, tx[j])
			}
			for d.InTx(ctx, func(tx2 pgx.Tx) error { return w.Write(ctx, tx2, tx...) }) != nil {
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	restarts := 0
	for range 3 {
		time.Sleep(300 * time.Millisecond)
		srv.Stop()
		srv.Start()
		restarts++
	}
	<-written
	count := func() int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM courier_outbox").Scan(&n); err != nil {
			return -1
		}
		return n
	}
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { n := count(); return n == 0, n }, "rows left; stats %+v",
		testenv.Lazy(func() any { return r.Stats() }))
	checkOrder(t, want, pub.Messages())
	t.Logf("%d restarts; %d deliveries for %d messages; stats %+v", restarts, len(pub.Messages()), len(want), r.Stats())
}

// A slot PostgreSQL gave up (max_slot_wal_keep_size) while the relay was
// down loses nothing: the relay makes a new slot and publishes the rows
// still in the table.
func TestLostSlot(t *testing.T) {
	srv := testenv.StartPostgres(t, "max_slot_wal_keep_size=1MB")
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, srv.URL)
	testenv.Must(t, err, "pool")
	t.Cleanup(pool.Close)
	d := postgres.NewDriver(pool)
	_, err = d.Migrate(ctx)
	testenv.Must(t, err, "migrate")
	w := outbox.New(d.Inserter(), outbox.Config{})
	pub := memory.NewPublisher()
	run := func() (*cdc.Relay, func()) {
		r, err := cdc.New(postgres.NewDriver(pool).CDC(), pub, cdc.Config{StatusInterval: 100 * time.Millisecond,
			Backoff: relay.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond},
			Logger:  slog.New(slog.NewTextHandler(testWriter{t}, nil))})
		testenv.Must(t, err, "relay")
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		return r, func() { cancel(); <-done }
	}
	var want []courier.Message
	write := func(n int) {
		for range n {
			m := msg(fmt.Sprintf("k%d", len(want)%5), fmt.Sprint(len(want)))
			want = append(want, m)
			testenv.Must(t, d.InTx(ctx, func(tx pgx.Tx) error { return w.Write(ctx, tx, m) }), "write")
		}
	}
	count := func() int {
		var n int
		testenv.Must(t, pool.QueryRow(ctx, "SELECT count(*) FROM courier_outbox").Scan(&n), "count")
		return n
	}
	first, stop := run()
	testenv.Eventually(t, 30*time.Second, func() bool { return reads(first) }, "the relay does not read its slot")
	write(50)
	testenv.Eventually(t, 30*time.Second, func() bool { return count() == 0 }, "first drain")
	stop()
	write(50) // while the relay is down: in the table and the log
	// Push the slot past max_slot_wal_keep_size.
	for range 5 {
		_, err := pool.Exec(ctx, "CREATE TEMP TABLE IF NOT EXISTS filler (b bytea); INSERT INTO filler SELECT decode(repeat('ab', 1000), 'hex') FROM generate_series(1, 2000); SELECT pg_switch_wal()")
		testenv.Must(t, err, "fill the log")
	}
	_, err = pool.Exec(ctx, "CHECKPOINT")
	testenv.Must(t, err, "checkpoint")
	var status string
	testenv.Must(t, pool.QueryRow(ctx, "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'courier_outbox'").Scan(&status), "slot status")
	if status != "lost" {
		t.Fatalf("slot status %q after filling the log, want lost", status)
	}
	r, stop := run()
	defer stop()
	testenv.Eventually(t, 30*time.Second, func() bool { return count() == 0 }, "rows left after the slot was lost: %v", testenv.Lazy(func() any { return count() }))
	write(50) // and the new slot reads the log
	testenv.Eventually(t, 30*time.Second, func() bool { return count() == 0 }, "rows left on the new slot")
	checkOrder(t, want, pub.Messages())
	t.Logf("stats after the slot was lost: %+v", r.Stats())
}

// Run returns nil once its context ends, also while it is starting (a
// SIGTERM as the daemon starts is no failure).
func TestStoppedWhileStarting(t *testing.T) {
	e := newEnv(t)
	r, err := cdc.New(postgres.NewDriver(e.pg.Pool).CDC(), e.pub, e.config())
	testenv.Must(t, err, "new relay")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Fatalf("Run with its context ended as it started: %v, want nil", err)
	}
}
