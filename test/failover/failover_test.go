// Package failover runs Courier's relays across a PostgreSQL failover: a
// primary and a streaming standby of the test's own
// (COURIER_TEST_POSTGRES_BIN), writers and a relay (polling or CDC, with
// table rows or table-less messages) on a multi-host URL
// (target_session_attrs=read-write), the primary crashed under load (every
// one of its processes SIGKILLed at once) and the standby promoted. It counts what each replication mode loses
// (committed and acknowledged to the writer, never published), publishes
// as phantoms (published, but the transaction is not on the new primary)
// and publishes twice.
package failover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/relay/cdc"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// repeat runs one failover, or with -long 20 one after another, and logs
// what they did together.
func repeat(t *testing.T, run func(t *testing.T) outcome) {
	n := 1
	if testenv.Long() {
		n = 20
	}
	var outs []outcome
	for i := range n {
		t.Run(fmt.Sprintf("failover%d", i+1), func(t *testing.T) { outs = append(outs, run(t)) })
	}
	if n > 1 && len(outs) == n {
		t.Logf("summary of %d failovers: %s", n, summarize(outs))
	}
}

// outcome is what one failover did.
type outcome struct {
	counts
	unrecorded   int           // table-less messages whose copies died with the old primary (audit phantoms)
	promotion    time.Duration // from the kill to the promotion
	firstPublish time.Duration // from the promotion to the first publish from the new primary (a consumer's: its first effect there)
}

// summarize gives the range and total of each count over outs, and the
// median and largest time to the first publish.
func summarize(outs []outcome) string {
	span := func(name string, f func(outcome) int) string {
		lo, hi, sum := f(outs[0]), f(outs[0]), 0
		for _, o := range outs {
			v := f(o)
			lo, hi, sum = min(lo, v), max(hi, v), sum+v
		}
		return fmt.Sprintf("%s %d–%d (%d in all)", name, lo, hi, sum)
	}
	firsts := make([]time.Duration, len(outs))
	for i, o := range outs {
		firsts[i] = o.firstPublish
	}
	slices.Sort(firsts)
	return strings.Join([]string{
		span("lost", func(o outcome) int { return o.lost }),
		span("phantoms", func(o outcome) int { return o.phantoms }),
		span("published twice", func(o outcome) int { return o.duplicates }),
		span("table-less copies lost", func(o outcome) int { return o.unrecorded }),
		fmt.Sprintf("first publish (a consumer's: effect) from the new primary: median %v, max %v", firsts[len(firsts)/2].Round(time.Millisecond), firsts[len(firsts)-1].Round(time.Millisecond)),
	}, "; ")
}

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
		t.Run(m.name, func(t *testing.T) { repeat(t, func(t *testing.T) outcome { return runFailover(t, m, polling) }) })
	}
}

// The CDC relay follows a promoted standby too: its slot is not on the
// standby (PostgreSQL keeps a logical slot on one server only before
// version 17's failover slots), so it makes a new one on the new primary
// and publishes the table's rows first, as on its first start. Table rows
// are as safe as with the polling relay, except that the log may hand the
// relay a transaction the synchronous standby has not confirmed yet, a
// phantom if the primary dies then (counted, not refused).
func TestCDCRelayFollowsFailover(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { repeat(t, func(t *testing.T) outcome { return runFailover(t, m, cdcRows) }) })
	}
}

// Table-less messages (postgres.LogOnly) have no row to sweep: the ones
// the relay had not published when the primary died are lost with its
// slot, in every replication mode (counted). Every one written on the new
// primary, where a write fails until the relay's new slot exists, is
// published.
func TestTablelessMessagesAcrossFailover(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { repeat(t, func(t *testing.T) outcome { return runFailover(t, m, cdcTableless) }) })
	}
}

// On PostgreSQL 17 and later the CDC relay's slot is a failover slot,
// which a standby that synchronizes slots keeps: after the promotion the
// relay reads on from it, so every table-less message whose transaction
// the new primary holds is published (none is lost with the old slot, and
// the audit tells none apart as a phantom), and with synchronous
// replication nothing is lost and nothing is a phantom.
func TestFailoverSlotsKeepTablelessMessages(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			repeat(t, func(t *testing.T) outcome { return runFailover(t, m, failoverSlotsTableless) })
		})
	}
}

// A relayKind is how messages are written and which relay publishes them.
type relayKind struct {
	name          string
	cdc           bool // the CDC relay; else the polling relay
	logOnly       bool // writers write table-less messages (postgres.LogOnly)
	phantoms      bool // phantoms are possible with synchronous replication
	failoverSlots bool // PostgreSQL 17's failover slots (see startCluster)
}

var (
	polling      = relayKind{name: "polling"}
	cdcRows      = relayKind{name: "cdc", cdc: true, phantoms: true}
	cdcTableless = relayKind{name: "cdc, table-less", cdc: true, logOnly: true, phantoms: true}
	// With failover slots, the relay reads on from its slot's copy on the
	// new primary: no table-less message is lost with the old slot, and
	// the primary decodes nothing its standby lacks, so no phantom.
	failoverSlotsTableless = relayKind{name: "cdc, table-less, failover slots", cdc: true, logOnly: true, failoverSlots: true}
)

// startCluster starts a primary replicating in mode m and its standby,
// and returns them with a pool on the multi-host URL of both
// (target_session_attrs=read-write), Courier's tables migrated, and a
// table failover_orders (n bigint PRIMARY KEY).
//
// With failoverSlots the servers are PostgreSQL 17 or later
// (COURIER_TEST_POSTGRES17_BIN) set up to keep failover slots on the
// standby: it streams through a physical slot of its own
// (primary_slot_name), synchronizes the primary's failover slots
// (sync_replication_slots, hot_standby_feedback), and the primary sends
// logical changes only once that slot has received them
// (synchronized_standby_slots), so that no relay runs ahead of the
// standby.
func startCluster(t *testing.T, m mode, failoverSlots bool) (primary, standby *testenv.PGServer, pool *pgxpool.Pool, d postgres.Driver) {
	standbySettings := []string{"wal_retrieve_retry_interval=100ms"}
	if failoverSlots {
		primary = testenv.StartPostgresFrom(t, testenv.Need(t, testenv.EnvPostgres17Bin), append(slices.Clone(m.settings), "synchronized_standby_slots=standby")...)
		conn, err := pgx.Connect(context.Background(), primary.URL)
		testenv.Must(t, err, "connect to the primary")
		_, err = conn.Exec(context.Background(), "SELECT pg_create_physical_replication_slot('standby')")
		testenv.Must(t, errors.Join(err, conn.Close(context.Background())), "the standby's slot")
		standbySettings = append(standbySettings, "primary_slot_name=standby", "hot_standby_feedback=on", "sync_replication_slots=on")
	} else {
		primary = testenv.StartPostgres(t, m.settings...)
	}
	standby = testenv.StartStandby(t, primary, standbySettings...)
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		primary.Port(), standby.Port())
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	testenv.Must(t, err, "pool")
	t.Cleanup(pool.Close)
	d = postgres.NewDriver(pool)
	_, err = d.Migrate(ctx)
	testenv.Must(t, err, "migrate")
	_, err = pool.Exec(ctx, "CREATE TABLE failover_orders (n bigint PRIMARY KEY)")
	testenv.Must(t, err, "orders table")
	return primary, standby, pool, d
}

func runFailover(t *testing.T, m mode, k relayKind) outcome {
	primary, standby, pool, d := startCluster(t, m, k.failoverSlots)
	ctx := context.Background()

	log := slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pub := memory.NewPublisher()
	began := time.Now()
	first := &firstPublish{}
	run, swept := startRelay(t, d, k, pub, first, log)
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- run(rctx) }()
	t.Cleanup(func() { stopRelay(); <-relayDone })

	ins := d.Inserter()
	if k.logOnly {
		ins = postgres.LogOnly()
	}
	w := pgWriter(d, ins)
	if k.failoverSlots {
		waitSynced(t, pool, standby)
	}
	var leases, leasedKeys int
	killed, promoted := failOver(t, w, pub, func() time.Time {
		primary.Crash()
		standby.Promote()
		promoted := time.Now()
		first.from(promoted)
		leases, leasedKeys = carriedLeases(t, pool, k)
		return promoted
	})
	if k.logOnly {
		unpublished := func() int { return len(w.unpublishedSince(promoted, pub.Messages())) }
		testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { n := unpublished(); return n == 0, n },
			"table-less messages written on the new primary not published")
		waitRecorded(t, d.Operations(), pub, promoted)
	} else {
		pending := func() int64 {
			var c int64
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM courier_outbox").Scan(&c); err != nil {
				return -1
			}
			return c
		}
		testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { n := pending(); return n == 0, n }, "outbox not drained on the new primary")
	}

	got := tally(t, pool, w, pub.Messages())
	t.Logf("%s, %s: %d written and acknowledged, %d on the new primary, %d published (%d distinct): %d lost, %d phantoms, %d duplicates, %d on the new primary never published; %d rows swept after the failover; the standby promoted %v after the kill, with %d live leases holding %d keys; the relay's first publish from it %v after the promotion",
		k.name, m.name, got.acked, got.survived, got.deliveries, got.published, got.lost, got.phantoms, got.duplicates, got.unpublished,
		swept(), promoted.Sub(killed).Round(time.Millisecond), leases, leasedKeys, first.when().Sub(promoted).Round(time.Millisecond))
	if first.when().IsZero() {
		t.Fatal("the relay published nothing from the new primary")
	}
	unrecorded := checkAudit(t, d.Operations(), pub, began, promoted, k.logOnly && !k.failoverSlots, got)
	if (!k.logOnly || k.failoverSlots) && got.unpublished != 0 {
		t.Fatalf("%d transactions on the new primary never published", got.unpublished)
	}
	if m.sync && !k.logOnly && got.lost != 0 {
		t.Fatalf("synchronous replication: %d lost; want none", got.lost)
	}
	if m.sync && !k.phantoms && got.phantoms != 0 {
		t.Fatalf("synchronous replication: %d phantoms; want none", got.phantoms)
	}
	if k.cdc { // the relay makes its slot once the rows it swept are recorded
		slots := func() (n int) {
			_ = pool.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND NOT temporary", cdc.DefaultSlot).Scan(&n)
			return n
		}
		testenv.Eventually(t, 30*time.Second, func() bool { return slots() == 1 }, "the new primary has %d slots named %s; want the relay's",
			testenv.Lazy(func() any { return slots() }), cdc.DefaultSlot)
	}
	if k.failoverSlots { // the copy the standby synchronized, not one made anew
		var synced, failover bool
		testenv.Must(t, pool.QueryRow(ctx, "SELECT synced, failover FROM pg_replication_slots WHERE slot_name = $1", cdc.DefaultSlot).Scan(&synced, &failover), "the slot")
		if !synced || !failover {
			t.Fatalf("the relay's slot on the new primary: synced %v, failover %v; want the standby's synchronized copy, a failover slot", synced, failover)
		}
	}
	return outcome{counts: got, unrecorded: unrecorded, promotion: promoted.Sub(killed), firstPublish: first.when().Sub(promoted)}
}

// checkAudit audits the broker against the new primary (the relays keep
// their published copies) and fails the test unless the audit finds what
// the test counted in the window it audited: each phantom and each
// duplicate, no lost message (the broker keeps all it acknowledged) and no
// order break. A message lost with its transaction is unknown to the new
// primary and to the broker alike: no audit can find it.
//
// The window narrows to the first copy the new primary holds when it
// holds none from before the test (the old primary's last completions
// may all be lost with it): what the broker stored before is not judged,
// and the test expects only what it stored within.
//
// A table-less message has no row: the database knows it only by its
// copy, which the CDC relay records a moment after the broker took it.
// Those the old primary had not recorded when it died are phantoms to the
// audit, though their transactions survived: with logOnly, the audit's
// phantoms must hold the test's, and the others must have been stored
// before the promotion. It returns how many there were.
func checkAudit(t *testing.T, db audit.Database, pub *memory.Publisher, began, promoted time.Time, logOnly bool, got counts) (unrecorded int) {
	t.Helper()
	ctx := context.Background()
	rep, err := audit.Run(ctx, db, pub, audit.Config{From: began, To: time.Now(), Slack: time.Second, Examples: 1 << 20})
	testenv.Must(t, err, "audit")
	// What the broker stored, by message id, and what the test expects
	// the audit to judge: the messages it first stored in the window.
	stored := map[string][]time.Time{}
	_, err = pub.ReadBack(ctx, time.Time{}, time.Now().Add(time.Hour), func(s broker.Stored) error {
		id := s.Message.ID.String()
		stored[id] = append(stored[id], s.At)
		return nil
	})
	testenv.Must(t, err, "read the broker")
	judged := func(id string) bool { at := stored[id]; return !at[0].Before(rep.From) && at[0].Before(rep.To) }
	phantoms, duplicates := map[string]bool{}, map[string]bool{}
	for _, f := range rep.Phantoms.Examples {
		switch {
		case got.phantomIDs[f.MessageID]:
			phantoms[f.MessageID] = true
		case logOnly && f.StoredAt.Before(promoted):
			unrecorded++
		default:
			t.Errorf("the audit found a phantom the test did not count: %+v", f)
		}
	}
	for _, f := range rep.Duplicates.Examples {
		duplicates[f.MessageID] = true
		if len(stored[f.MessageID]) < 2 {
			t.Errorf("the audit found a duplicate the broker holds once: %+v", f)
		}
	}
	for id, at := range stored {
		if judged(id) && got.phantomIDs[id] && !phantoms[id] {
			t.Errorf("the audit missed phantom %s, stored at %s in the window %s to %s", id, at[0], rep.From, rep.To)
		}
		if judged(id) && len(at) > 1 && !at[len(at)-1].After(rep.To) && !duplicates[id] {
			t.Errorf("the audit missed duplicate %s, stored at %v in the window %s to %s", id, at, rep.From, rep.To)
		}
	}
	t.Logf("audit: %d published copies on the new primary, %d messages on the broker: %d lost, %d phantoms (%d of them table-less messages whose copies died with the old primary), %d duplicates, %d order breaks, %d pending; the window narrowed by %v %v",
		rep.Published, rep.Stored, rep.Lost.Count, rep.Phantoms.Count, unrecorded, rep.Duplicates.Count, rep.OrderBreaks.Count, rep.Pending,
		rep.From.Sub(began).Round(time.Millisecond), rep.Narrowed)
	if rep.Lost.Count != 0 || rep.OrderBreaks.Count != 0 {
		t.Fatalf("the audit found %d lost and %d order breaks: %+v %+v", rep.Lost.Count, rep.OrderBreaks.Count, rep.Lost.Examples, rep.OrderBreaks.Examples)
	}
	return unrecorded
}

// waitRecorded waits until the new primary holds a copy of each message
// the broker stored since the promotion: the CDC relay records a
// table-less message's copy a moment after the broker took it.
func waitRecorded(t *testing.T, db audit.Database, pub *memory.Publisher, promoted time.Time) {
	t.Helper()
	ctx := context.Background()
	var ids []string
	seen := map[string]bool{}
	_, err := pub.ReadBack(ctx, promoted, time.Now().Add(time.Hour), func(s broker.Stored) error {
		if id := s.Message.ID.String(); !seen[id] { // a message the relay published again is one to find
			seen[id] = true
			ids = append(ids, id)
		}
		return nil
	})
	testenv.Must(t, err, "read the broker")
	var located int
	testenv.Eventually(t, 30*time.Second, func() bool {
		places, err := db.Locate(ctx, ids)
		located = len(places)
		return err == nil && located == len(ids)
	}, "copies of %v of the %d messages published from the new primary", testenv.Lazy(func() any { return located }), len(ids))
}

// waitSynced waits until the relay has made its slot a failover slot on
// the primary that pool reaches and the standby holds a synchronized copy
// of it, ready to be used once the standby is promoted. The standby's
// worker keeps a copy only once the relay has confirmed a position past
// where the copy starts, which needs something in the log to decode: with
// no writes, a running-transactions record every 15 s, which each poll
// here writes at once (pg_log_standby_snapshot).
func waitSynced(t *testing.T, pool *pgxpool.Pool, standby *testenv.PGServer) {
	t.Helper()
	ctx := context.Background()
	failover := func() bool {
		var ok bool
		err := pool.QueryRow(ctx, `SELECT count(*) = 1 FROM pg_replication_slots WHERE slot_name = $1 AND failover`, cdc.DefaultSlot).Scan(&ok)
		return err == nil && ok
	}
	testenv.Eventually(t, 60*time.Second, failover, "the relay did not make slot %s a failover slot", cdc.DefaultSlot)
	conn, err := pgx.Connect(ctx, standby.URL)
	testenv.Must(t, err, "connect to the standby")
	defer conn.Close(ctx)
	synced := func() bool {
		_, _ = pool.Exec(ctx, "SELECT pg_log_standby_snapshot()") // a running-transactions record
		var ok bool
		err := conn.QueryRow(ctx, `SELECT count(*) = 1 FROM pg_replication_slots WHERE slot_name = $1 AND synced AND NOT temporary`, cdc.DefaultSlot).Scan(&ok)
		return err == nil && ok
	}
	testenv.Eventually(t, 60*time.Second, synced, "the standby holds no synchronized copy of slot %s", cdc.DefaultSlot)
}

// carriedLeases counts the polling relay's leases that the new primary
// holds as live, and the keys they hold: leases whose claim reached the
// standby but whose completion did not. Their rows, and the later
// messages of their keys, wait until the lease ends.
func carriedLeases(t *testing.T, pool *pgxpool.Pool, k relayKind) (leases, keys int) {
	if k.cdc {
		return 0, 0
	}
	testenv.Eventually(t, 10*time.Second, func() bool { // the pool's connections to the old primary fail first
		return pool.QueryRow(context.Background(), `SELECT count(*), coalesce(sum(cardinality(keys)), 0) FROM courier_outbox_leases WHERE until > now()`).Scan(&leases, &keys) == nil
	}, "could not read the leases on the new primary")
	return leases, keys
}

// startRelay makes k's relay on d, publishing to pub and telling first of
// its calls. It returns the relay's Run and a count of the rows it swept
// from the table since it started (the CDC relay, making a slot; 0 for the
// polling relay).
func startRelay(t *testing.T, d postgres.Driver, k relayKind, pub broker.Publisher, first *firstPublish, log *slog.Logger) (run func(context.Context) error, swept func() int64) {
	ctx := context.Background()
	backoff := relay.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	if k.cdc {
		r, err := cdc.New(d.CDC(), pub, cdc.Config{Backoff: backoff, Standby: 100 * time.Millisecond, Observer: first, Logger: log, KeepPublished: true})
		testenv.Must(t, err, "cdc relay")
		return r.Run, func() int64 { return r.Stats().Swept }
	}
	rs, err := d.RelayStore(ctx, store.RelayConfig{KeepPublished: true})
	testenv.Must(t, err, "relay store")
	n, err := d.Notifier(log)
	testenv.Must(t, err, "notifier")
	first.RelayStore = rs
	r, err := relay.New(first, pub, relay.Config{Notifier: n, LeaseDuration: 5 * time.Second, PollInterval: 50 * time.Millisecond,
		Backoff: backoff, Observer: first, Logger: log})
	testenv.Must(t, err, "relay")
	return r.Run, func() int64 { return 0 }
}

// writer commits one order and its message per transaction (commit),
// numbered, for ten keys, through the failover: a transaction whose commit
// failed is not written again (it may or may not have committed), the
// next one is.
type writer struct {
	commit func(ctx context.Context, n int64, msg courier.Message) error

	mu    sync.Mutex
	acked []int64     // commits that returned nil
	at    []time.Time // when each returned
}

// pgWriter is a writer on PostgreSQL, writing messages through ins.
func pgWriter(d postgres.Driver, ins store.Inserter[pgx.Tx]) *writer {
	w := outbox.New(ins, outbox.Config{})
	return &writer{commit: func(ctx context.Context, n int64, msg courier.Message) error {
		return d.InTx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO failover_orders (n) VALUES ($1)", n); err != nil {
				return err
			}
			return w.Write(ctx, tx, msg)
		})
	}}
}

func (w *writer) run(ctx context.Context) {
	for n := int64(0); ctx.Err() == nil; n++ {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := w.commit(tctx, n, courier.NewMessage("orders", "k"+strconv.FormatInt(n%10, 10), "OrderPlaced", []byte(strconv.FormatInt(n, 10))))
		cancel()
		if err != nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		w.mu.Lock()
		w.acked, w.at = append(w.acked, n), append(w.at, time.Now())
		w.mu.Unlock()
	}
}

// acks returns the commits that returned nil.
func (w *writer) acks() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.acked)
}

// failOver runs w in the background, waits for it and the relay (which
// published to pub) to be under way, calls failover (crash the primary,
// promote the standby, move the clients if need be), waits for w to
// commit on the new primary, and stops it. It returns when the primary
// was killed and when it was promoted, as failover says.
func failOver(t *testing.T, w *writer, pub *memory.Publisher, failover func() (promoted time.Time)) (killed, promoted time.Time) {
	wctx, stopWriting := context.WithCancel(context.Background())
	writing := make(chan struct{})
	go func() { defer close(writing); w.run(wctx) }()
	t.Cleanup(func() { stopWriting(); <-writing })
	testenv.Eventually(t, 30*time.Second, func() bool { return w.ackedCount() >= 300 && len(pub.Messages()) >= 100 },
		"writers acknowledged %d, relay published %d before the failover", testenv.Lazy(func() any { return w.ackedCount() }),
		testenv.Lazy(func() any { return len(pub.Messages()) }))
	killed = time.Now()
	promoted = failover()
	before := w.ackedCount()
	testenv.Eventually(t, 60*time.Second, func() bool { return w.ackedCount() >= before+300 },
		"writers acknowledged %d after the promotion", testenv.Lazy(func() any { return w.ackedCount() - before }))
	stopWriting()
	<-writing
	return killed, promoted
}

// unpublishedSince returns the commits acknowledged after since that msgs
// does not hold.
func (w *writer) unpublishedSince(since time.Time, msgs []courier.Message) []int64 {
	published := map[string]bool{}
	for _, m := range msgs {
		published[string(m.Payload)] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var missing []int64
	for i, n := range w.acked {
		if w.at[i].After(since) && !published[strconv.FormatInt(n, 10)] {
			missing = append(missing, n)
		}
	}
	return missing
}

func (w *writer) ackedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// counts are what a failover did.
type counts struct {
	acked, survived, deliveries, published int
	lost                                   int             // acknowledged to the writer, never published
	phantoms                               int             // published, not on the new primary
	phantomIDs                             map[string]bool // their message ids
	duplicates                             int             // published more than once
	unpublished                            int             // on the new primary, never published
}

// tally reads what the new primary holds and counts (count) what the
// failover did.
func tally(t *testing.T, pool *pgxpool.Pool, w *writer, msgs []courier.Message) counts {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT n FROM failover_orders")
	testenv.Must(t, err, "read the orders")
	survived, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	testenv.Must(t, err, "read the orders")
	return count(t, survived, w.acks(), msgs)
}

// count compares what the writers saw committed (acked), what the new
// primary holds (survived) and what was published (msgs), and checks each
// key's order among the first copies.
func count(t *testing.T, survived, acked []int64, msgs []courier.Message) counts {
	t.Helper()
	onPrimary := map[int64]bool{}
	for _, n := range survived {
		onPrimary[n] = true
	}
	seen := map[int64]int{}
	last := map[string]int64{}
	ids := map[int64]string{}
	for _, m := range msgs {
		n, err := strconv.ParseInt(string(m.Payload), 10, 64)
		testenv.Must(t, err, "payload")
		seen[n]++
		ids[n] = m.ID.String()
		if seen[n] > 1 {
			continue
		}
		if p, ok := last[m.Key]; ok && n < p {
			t.Fatalf("key %s: order %d published after %d", m.Key, n, p)
		}
		last[m.Key] = n
	}
	c := counts{acked: len(acked), survived: len(survived), deliveries: len(msgs), published: len(seen), phantomIDs: map[string]bool{}}
	for _, n := range acked {
		if seen[n] == 0 {
			c.lost++
		}
	}
	for n, k := range seen {
		if !onPrimary[n] {
			c.phantoms++
			c.phantomIDs[ids[n]] = true
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
// primary. For the polling relay, whose store it wraps to see the claims:
// the first acknowledged publish of a batch whose claim started after the
// promotion. For the CDC relay: the first acknowledged publish of a call
// that started after the promotion (the old primary's connection was dead
// by then, so what it carries came from the new one).
type firstPublish struct {
	store.RelayStore // the polling relay's; nil for the CDC relay
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
// a claim, or, for the CDC relay, that started after the promotion.
func (f *firstPublish) Published(_ []courier.Message, errs []error, took time.Duration) {
	now := time.Now()
	since := f.since.Load()
	after := f.claimed.Load()
	if f.RelayStore == nil {
		after = since != 0 && now.Add(-took).UnixNano() > since
	}
	if after && slices.Contains(errs, nil) {
		f.at.CompareAndSwap(0, now.UnixNano())
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
