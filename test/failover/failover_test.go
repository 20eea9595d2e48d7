// Package failover runs the polling relay across a PostgreSQL failover: a
// primary and a streaming standby of the test's own
// (COURIER_TEST_POSTGRES_BIN), writers and a relay on a multi-host URL
// (target_session_attrs=read-write), the primary crashed under load (every
// one of its processes SIGKILLed at once) and the standby promoted. It counts what each replication mode loses
// (committed and acknowledged to the writer, never published), publishes
// as phantoms (published, but the transaction is not on the new primary)
// and publishes twice.
package failover

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// A mode is how the primary replicates: its settings on top of the
// defaults, and whether a commit the writer saw waits for the standby.
type mode struct {
	name     string
	settings []string
	sync     bool
}

var modes = []mode{
	{name: "async"},
	{name: "sync", settings: []string{"synchronous_standby_names=*", "synchronous_commit=on"}, sync: true},
	{name: "remote_apply", settings: []string{"synchronous_standby_names=*", "synchronous_commit=remote_apply"}, sync: true},
}

// The polling relay follows a promoted standby by itself, through the
// multi-host URL: every transaction the new primary holds is published,
// each key's in order. With synchronous replication nothing a writer saw
// committed is lost and nothing is published for a transaction the new
// primary does not hold; asynchronous replication may do both, and the
// counts are logged.
func TestPollingRelayFollowsFailover(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { runFailover(t, m) })
	}
}

func runFailover(t *testing.T, m mode) {
	primary := testenv.StartPostgres(t, m.settings...)
	standby := testenv.StartStandby(t, primary, "wal_retrieve_retry_interval=100ms")
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		primary.Port(), standby.Port())
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	testenv.Must(t, err, "pool")
	t.Cleanup(pool.Close)
	d := postgres.NewDriver(pool)
	_, err = d.Migrate(ctx)
	testenv.Must(t, err, "migrate")
	_, err = pool.Exec(ctx, "CREATE TABLE failover_orders (n bigint PRIMARY KEY)")
	testenv.Must(t, err, "orders table")

	log := slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rs, err := d.RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "relay store")
	n, err := d.Notifier(log)
	testenv.Must(t, err, "notifier")
	pub := memory.NewPublisher()
	firstAfter := &firstPublish{RelayStore: rs}
	r, err := relay.New(firstAfter, pub, relay.Config{Notifier: n, LeaseDuration: 5 * time.Second, PollInterval: 50 * time.Millisecond,
		Backoff: relay.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}, Observer: firstAfter, Logger: log})
	testenv.Must(t, err, "relay")
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(rctx) }()
	t.Cleanup(func() { stopRelay(); <-relayDone })

	w := &writer{pool: pool, w: outbox.New(d.Inserter(), outbox.Config{})}
	wctx, stopWriting := context.WithCancel(ctx)
	writing := make(chan struct{})
	go func() { defer close(writing); w.run(wctx) }()
	t.Cleanup(func() { stopWriting(); <-writing })

	testenv.Eventually(t, 30*time.Second, func() bool { return w.ackedCount() >= 300 && len(pub.Messages()) >= 100 },
		"writers acknowledged %d, relay published %d before the failover", testenv.Lazy(func() any { return w.ackedCount() }),
		testenv.Lazy(func() any { return len(pub.Messages()) }))
	killed := time.Now()
	primary.Crash()
	standby.Promote()
	promoted := time.Now()
	firstAfter.from(promoted)
	before := w.ackedCount()
	testenv.Eventually(t, 60*time.Second, func() bool { return w.ackedCount() >= before+300 },
		"writers acknowledged %d after the promotion", testenv.Lazy(func() any { return w.ackedCount() - before }))
	stopWriting()
	<-writing
	pending := func() int64 {
		var c int64
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM courier_outbox").Scan(&c); err != nil {
			return -1
		}
		return c
	}
	testenv.Eventually(t, 60*time.Second, func() bool { return pending() == 0 }, "outbox not drained on the new primary: %d rows",
		testenv.Lazy(func() any { return pending() }))

	got := tally(t, pool, w, pub.Messages())
	t.Logf("%s: %d written and acknowledged, %d on the new primary, %d published (%d distinct): %d lost, %d phantoms, %d duplicates; the standby promoted %v after the kill, the relay's first publish from it %v after the promotion",
		m.name, got.acked, got.survived, got.deliveries, got.published, got.lost, got.phantoms, got.duplicates,
		promoted.Sub(killed).Round(time.Millisecond), firstAfter.when().Sub(promoted).Round(time.Millisecond))
	if got.unpublished != 0 {
		t.Fatalf("%d transactions on the new primary never published", got.unpublished)
	}
	if m.sync && (got.lost != 0 || got.phantoms != 0) {
		t.Fatalf("synchronous replication: %d lost, %d phantoms; want none", got.lost, got.phantoms)
	}
}

// writer commits one order and its message per transaction, numbered, for
// ten keys, through the failover: a transaction whose commit failed is not
// written again (it may or may not have committed), the next one is.
type writer struct {
	pool *pgxpool.Pool
	w    *outbox.Writer[pgx.Tx]

	mu    sync.Mutex
	acked []int64 // commits that returned nil
}

func (w *writer) run(ctx context.Context) {
	d := postgres.NewDriver(w.pool)
	for n := int64(0); ctx.Err() == nil; n++ {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := d.InTx(tctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(tctx, "INSERT INTO failover_orders (n) VALUES ($1)", n); err != nil {
				return err
			}
			return w.w.Write(tctx, tx, courier.NewMessage("orders", "k"+strconv.FormatInt(n%10, 10), "OrderPlaced", []byte(strconv.FormatInt(n, 10))))
		})
		cancel()
		if err != nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		w.mu.Lock()
		w.acked = append(w.acked, n)
		w.mu.Unlock()
	}
}

func (w *writer) ackedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// counts are what a failover did.
type counts struct {
	acked, survived, deliveries, published int
	lost                                   int // acknowledged to the writer, never published
	phantoms                               int // published, not on the new primary
	duplicates                             int // published more than once
	unpublished                            int // on the new primary, never published
}

// tally compares what the writers saw committed, what the new primary
// holds and what was published, and checks each key's order among the
// first copies.
func tally(t *testing.T, pool *pgxpool.Pool, w *writer, msgs []courier.Message) counts {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT n FROM failover_orders")
	testenv.Must(t, err, "read the orders")
	survived, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	testenv.Must(t, err, "read the orders")
	onPrimary := map[int64]bool{}
	for _, n := range survived {
		onPrimary[n] = true
	}
	seen := map[int64]int{}
	last := map[string]int64{}
	for _, m := range msgs {
		n, err := strconv.ParseInt(string(m.Payload), 10, 64)
		testenv.Must(t, err, "payload")
		seen[n]++
		if seen[n] > 1 {
			continue
		}
		if p, ok := last[m.Key]; ok && n < p {
			t.Fatalf("key %s: order %d published after %d", m.Key, n, p)
		}
		last[m.Key] = n
	}
	w.mu.Lock()
	acked := slices.Clone(w.acked)
	w.mu.Unlock()
	c := counts{acked: len(acked), survived: len(survived), deliveries: len(msgs), published: len(seen)}
	for _, n := range acked {
		if seen[n] == 0 {
			c.lost++
		}
	}
	for n, k := range seen {
		if !onPrimary[n] {
			c.phantoms++
		}
		c.duplicates += k - 1
	}
	for _, n := range survived {
		if seen[n] == 0 {
			c.unpublished++
		}
	}
	return c
}

// firstPublish notes when the relay first published from the new
// primary: the first acknowledged publish of a batch whose claim started
// after the promotion. It wraps the relay's store to see the claims.
type firstPublish struct {
	store.RelayStore
	relay.NopObserver
	since   atomic.Int64 // the promotion, unix nanoseconds; 0: not yet
	claimed atomic.Bool  // a claim started since leased rows
	at      atomic.Int64
}

func (f *firstPublish) from(t time.Time) { f.since.Store(t.UnixNano()) }

// Claim notes a claim that started after the promotion and leased rows.
func (f *firstPublish) Claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	since, start := f.since.Load(), time.Now().UnixNano()
	b, err := f.RelayStore.Claim(ctx, owner, limit, lease)
	if err == nil && len(b.Records) > 0 && since != 0 && start > since {
		f.claimed.Store(true)
	}
	return b, err
}

// Published records the first call with a message acknowledged after such
// a claim.
func (f *firstPublish) Published(_ []courier.Message, errs []error, _ time.Duration) {
	if f.claimed.Load() && slices.Contains(errs, nil) {
		f.at.CompareAndSwap(0, time.Now().UnixNano())
	}
}

// when returns when that publish happened, the zero time if none did.
func (f *firstPublish) when() time.Time {
	if at := f.at.Load(); at != 0 {
		return time.Unix(0, at)
	}
	return time.Time{}
}

// logWriter writes the relay's log to the test's.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
