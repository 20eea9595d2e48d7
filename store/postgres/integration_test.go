package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/memstore"
	"github.com/courier-go/courier/store/postgres"
)

// Claims scan from a floor that has moved past published rows; a row whose
// transaction commits long after it was inserted is claimed (the floor
// waited for it), and a dead letter replayed under its old id, below the
// floor, is claimed by the next full pass. The store's clock, which the
// full passes follow, moves only when the test moves it.
func TestRowsBelowTheFloorAreClaimed(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	clock := memstore.NewClock()
	clock.Set(time.Now())
	d := postgres.NewDriver(pg.Pool).WithClock(clock.Now)
	st, err := d.RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "store")
	w := outbox.New(postgres.Pgx(), outbox.Config{})
	write := func(msgs ...courier.Message) {
		tx, err := pg.Pool.Begin(ctx)
		testenv.Must(t, err, "begin")
		testenv.Must(t, w.Write(ctx, tx, msgs...), "write")
		testenv.Must(t, tx.Commit(ctx), "commit")
	}
	msg := func(key string) courier.Message { return courier.NewMessage("events", key, "T", []byte(key)) }
	// drain claims and publishes, moving the clock on by step between
	// claims, until want is claimed or the clock has moved on by within,
	// reporting whether it was.
	drain := func(want courier.Message, within, step time.Duration) bool {
		deadline := clock.Now().Add(within)
		for clock.Now().Before(deadline) {
			b, err := st.Claim(ctx, "r", 100, time.Minute)
			testenv.Must(t, err, "claim")
			found := false
			for _, r := range b.Records {
				found = found || r.Message.ID == want.ID
			}
			if len(b.Records) > 0 {
				testenv.Must(t, st.Complete(ctx, "r", b.Lease, store.Outcome{Published: seqsOf(b.Records)}), "complete")
			}
			if found {
				return true
			}
			clock.Advance(step)
		}
		return false
	}

	// A transaction inserts a row and stays open while other rows are
	// written and published past its id.
	late := msg("late")
	tx, err := pg.Pool.Begin(ctx)
	testenv.Must(t, err, "begin the long transaction")
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
	testenv.Must(t, w.Write(ctx, tx, late), "write in the long transaction")
	for i := range 8 {
		last := msg("steady")
		write(last)
		if !drain(last, 5*time.Second, 20*time.Millisecond) {
			t.Fatalf("round %d: a committed row was not claimed", i)
		}
		clock.Advance(400 * time.Millisecond)
	}
	testenv.Must(t, tx.Commit(ctx), "commit the long transaction")
	if !drain(late, 10*time.Second, 20*time.Millisecond) {
		t.Fatal("a row committed 3 s after its insert was never claimed")
	}

	// A dead letter replayed under its old id, below the floor.
	dead := msg("dead")
	write(dead)
	b, err := st.Claim(ctx, "r", 100, time.Minute)
	testenv.Must(t, err, "claim")
	if len(b.Records) != 1 || b.Records[0].Message.ID != dead.ID {
		t.Fatalf("claimed %d rows, want the one to park", len(b.Records))
	}
	testenv.Must(t, st.Complete(ctx, "r", b.Lease, store.Outcome{Dead: []store.Failure{{Seq: b.Records[0].Seq, Error: "parked", Counted: true}}}), "park")
	for range 6 {
		last := msg("steady")
		write(last)
		if !drain(last, 5*time.Second, 20*time.Millisecond) {
			t.Fatal("a committed row was not claimed")
		}
		clock.Advance(400 * time.Millisecond)
	}
	testenv.Must(t, d.Admin().ReplayDeadLetter(ctx, b.Records[0].Seq), "replay")
	// Full passes come at least every 5 minutes, more often while cheap.
	if !drain(dead, 6*time.Minute, time.Second) {
		t.Fatal("a dead letter replayed under its old id was never claimed")
	}
}

// A relay that finds itself on another server (a standby promoted in a
// failover, reached through a multi-host URL or a proxy that follows the
// primary) drops the floor it learned on the old one: the new server's ids
// may lie below it (its sequence resumes from what replication brought,
// behind ids the old primary gave to transactions it lost). A key's row
// below the old floor is claimed before the key's row above it.
func TestFloorStartsAfreshOnAnotherServer(t *testing.T) {
	ctx := context.Background()
	a, b := testenv.StartPostgres(t), testenv.StartPostgres(t)
	for _, srv := range []*testenv.PGServer{a, b} {
		pool, err := pgxpool.New(ctx, srv.URL)
		testenv.Must(t, err, "pool")
		_, err = postgres.NewDriver(pool).Migrate(ctx)
		testenv.Must(t, err, "migrate")
		pool.Close()
	}
	proxy := testenv.StartProxy(t, fmt.Sprintf("127.0.0.1:%d", a.Port()))
	pool, err := pgxpool.New(ctx, proxy.URL(t, a.URL))
	testenv.Must(t, err, "pool through the proxy")
	t.Cleanup(pool.Close)
	clock := memstore.NewClock()
	clock.Set(time.Now())
	st, err := postgres.NewDriver(pool).WithClock(clock.Now).RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "store")
	w := outbox.New(postgres.Pgx(), outbox.Config{})
	write := func(key string, n int) []courier.Message {
		msgs := make([]courier.Message, n)
		for i := range msgs {
			msgs[i] = courier.NewMessage("events", key, "T", nil)
		}
		testenv.Must(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) }), "write")
		return msgs
	}
	claim := func() store.Batch {
		batch, err := st.Claim(ctx, "r", 1000, time.Minute)
		testenv.Must(t, err, "claim")
		if len(batch.Records) > 0 {
			testenv.Must(t, st.Complete(ctx, "r", batch.Lease, store.Outcome{Published: seqsOf(batch.Records)}), "complete")
		}
		return batch
	}

	// On the first server, 300 rows published and the floor past them.
	write("a", 300)
	for i := 0; postgres.FloorOf(st) < 300; i++ {
		if i == 50 {
			t.Fatalf("floor %d after 50 claims of an outbox published up to id 300", postgres.FloorOf(st))
		}
		claim()
		clock.Advance(100 * time.Millisecond)
	}
	floor := postgres.FloorOf(st)

	// The other server takes its place; its ids start at 1. Key k's first
	// row lands below the old floor, its second above it.
	proxy.Retarget(fmt.Sprintf("127.0.0.1:%d", b.Port()))
	pool.Reset() // its connections to the old server are gone
	first := write("k", 1)[0]
	write("b", int(floor)+50)
	second := write("k", 1)[0]
	for seen := map[[16]byte]bool{}; !seen[second.ID]; {
		for _, r := range claim().Records {
			if r.Message.ID == second.ID && !seen[first.ID] {
				t.Fatalf("key k's second row (above the old floor %d) claimed before its first (below it)", floor)
			}
			seen[r.Message.ID] = true
		}
	}
}

// A key's message whose transaction commits long after its insert is
// still claimed before the key's next message, written after that commit:
// the floor waits for the transaction instead of passing its row. The
// store's clock moves 4 s while it is open (the full passes' schedule and
// the floor's hold follow that clock).
func TestLateCommitKeepsKeyOrder(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	clock := memstore.NewClock()
	clock.Set(time.Now())
	d := postgres.NewDriver(pg.Pool).WithClock(clock.Now)
	st, err := d.RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "store")
	w := outbox.New(postgres.Pgx(), outbox.Config{})
	first, second := courier.NewMessage("events", "k", "T", []byte("1")), courier.NewMessage("events", "k", "T", []byte("2"))

	tx, err := pg.Pool.Begin(ctx)
	testenv.Must(t, err, "begin the long transaction")
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
	testenv.Must(t, w.Write(ctx, tx, first), "write the key's first message")
	for range 40 {
		b, err := st.Claim(ctx, "r", 100, time.Minute)
		testenv.Must(t, err, "claim")
		if len(b.Records) != 0 {
			t.Fatalf("claimed %d rows from an outbox with nothing committed", len(b.Records))
		}
		clock.Advance(100 * time.Millisecond)
	}
	testenv.Must(t, tx.Commit(ctx), "commit the long transaction")
	testenv.Must(t, pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, second) }), "write the key's second message")
	for range 100 {
		b, err := st.Claim(ctx, "r", 100, time.Minute)
		testenv.Must(t, err, "claim")
		if len(b.Records) > 0 {
			if got := b.Records[0].Message.ID; got != first.ID {
				t.Fatalf("claimed %s first, want the key's first message %s", b.Records[0].Message.Payload, first.Payload)
			}
			return
		}
		clock.Advance(100 * time.Millisecond)
	}
	t.Fatal("neither message was claimed")
}

func seqsOf(recs []store.Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Seq
	}
	return out
}

// A relay's role that may not read the outbox's id sequence still claims:
// the floor just stays put while the outbox is empty.
func TestClaimWithoutSequencePrivilege(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	role := testenv.Name("relay_")
	for _, q := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA " + pg.Schema + " TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + pg.Schema + " TO " + role,
	} {
		_, err := pg.Admin.Exec(ctx, q)
		testenv.Must(t, err, q)
	}
	t.Cleanup(func() {
		_, _ = pg.Admin.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = pg.Admin.Exec(context.Background(), "DROP ROLE "+role)
	})
	cfg, err := pgxpool.ParseConfig(pg.URL)
	testenv.Must(t, err, "parse url")
	cfg.ConnConfig.User = role
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	testenv.Must(t, err, "connect as the relay's role")
	defer pool.Close()
	st, err := postgres.NewDriver(pool).RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "store")
	for range 3 {
		b, err := st.Claim(ctx, "r", 10, time.Minute)
		testenv.Must(t, err, "claim on an empty outbox without the sequence's privileges")
		if len(b.Records) != 0 {
			t.Fatalf("claimed %d rows of an empty outbox", len(b.Records))
		}
	}
}

// The outbox's trigger notifies only while a relay is armed: a commit then
// wakes it within milliseconds; with no relay waiting, writers send nothing.
func TestNotifierWakesOnlyWhenArmed(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	n, err := postgres.NewNotifier(pg.URL, nil)
	testenv.Must(t, err, "notifier")
	nctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(nctx) }()
	defer func() { stop(); <-done }()

	w := outbox.New(postgres.Pgx(), outbox.Config{})
	write := func() {
		tx, err := pg.Pool.Begin(ctx)
		testenv.Must(t, err, "begin")
		defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
		testenv.Must(t, w.Write(ctx, tx, courier.NewMessage("orders", "o-1", "OrderPlaced", nil)), "write")
		testenv.Must(t, tx.Commit(ctx), "commit")
	}
	drain := func() {
		for {
			select {
			case <-n.Wake():
			default:
				return
			}
		}
	}

	// Not armed: commits notify nobody.
	select { // the listener signals once it listens: rows may have committed before
	case <-n.Wake():
	case <-time.After(10 * time.Second):
		t.Fatal("the listener did not start listening within 10s")
	}
	write()
	select {
	case <-n.Wake():
		t.Fatal("woken by a commit while no relay was armed")
	case <-time.After(300 * time.Millisecond):
	}

	// Armed: the next commit wakes it.
	testenv.Eventually(t, 5*time.Second, func() bool { ok, err := n.Arm(ctx); return ok && err == nil }, "could not arm")
	drain()
	start := time.Now()
	write()
	select {
	case <-n.Wake():
		t.Logf("woken %s after the commit began", time.Since(start).Round(time.Microsecond))
	case <-time.After(5 * time.Second):
		t.Fatal("an armed notifier was not woken by a commit")
	}
	testenv.Must(t, n.Disarm(ctx), "disarm")
}

// The shorthands make what the Driver makes: NewStore's relay store reads
// the clock of its config, Admin the server's.
func TestShorthands(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	at := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	st, err := postgres.NewStore(ctx, pg.Pool, postgres.StoreConfig{Clock: func() time.Time { return at }})
	testenv.Must(t, err, "store")
	s, err := st.Stats(ctx)
	testenv.Must(t, err, "stats")
	if !s.Now.Equal(at) {
		t.Errorf("NewStore's stats at %s, want the configured clock's %s", s.Now, at)
	}
	a, err := postgres.Admin(pg.Pool).Stats(ctx)
	testenv.Must(t, err, "admin stats")
	if d := time.Since(a.Now); d < -time.Minute || d > time.Minute {
		t.Errorf("Admin's stats at %s, want the server's clock", a.Now)
	}
}
