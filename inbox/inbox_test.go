package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/memstore"
)

// env is one test's database and stream.
type env[TTx any] struct {
	t       *testing.T
	db      *database[TTx]
	natsURL string
	mapping couriernats.Config
	stream  string
	pub     *couriernats.Publisher
	js      jetstream.JetStream
}

func newEnv[TTx any](t *testing.T, d dialect[TTx]) *env[TTx] {
	t.Helper()
	e := &env[TTx]{t: t}
	e.db = d.open(t) // first: a test whose database is missing skips here
	e.natsURL = testenv.NATSOrEmbedded(t)
	ctx := context.Background()
	nc := testenv.Connect(t, e.natsURL)
	e.stream = testenv.Name("IB")
	e.mapping = couriernats.Config{SubjectPrefix: e.stream + "."}
	// A short duplicate window, so tests can put copies of a message on the
	// wire, as a relay does when it republishes after the window.
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, e.mapping, couriernats.StreamConfig{Name: e.stream, Duplicates: 100 * time.Millisecond}), "stream")
	t.Cleanup(func() {
		js, _ := jetstream.New(nc)
		_ = js.DeleteStream(context.Background(), e.stream)
	})
	var err error
	e.pub, err = couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: e.mapping})
	testenv.Must(t, err, "publisher")
	e.js, err = jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	return e
}

// publish sends msgs straight to the stream (as a relay would).
func (e *env[TTx]) publish(msgs ...courier.Message) {
	e.t.Helper()
	for i, err := range e.pub.Publish(context.Background(), msgs) {
		testenv.Must(e.t, err, fmt.Sprintf("publish %d", i))
	}
}

// publishAgain sends copies of msgs, times times, as a relay that
// republishes after a crash does: each copy goes once the stream has
// forgotten the message's id (its duplicate window, on the server's timer),
// so that JetStream stores it. A copy the stream took for a duplicate is
// sent again until the stream holds it.
func (e *env[TTx]) publishAgain(t *testing.T, times int, msgs ...courier.Message) {
	t.Helper()
	for range times {
		for _, m := range msgs {
			before := e.streamMsgs(t)
			testenv.Eventually(t, time.Minute, func() bool {
				e.publish(m)
				return e.streamMsgs(t) > before
			}, "the stream never stored a copy of %s", m.ID)
		}
	}
}

// streamMsgs returns how many messages the stream holds.
func (e *env[TTx]) streamMsgs(t *testing.T) uint64 {
	t.Helper()
	s, err := e.js.Stream(context.Background(), e.stream)
	testenv.Must(t, err, "stream")
	info, err := s.Info(context.Background())
	testenv.Must(t, err, "stream info")
	return info.State.Msgs
}

func (e *env[TTx]) subscriber(consumer string) *couriernats.Subscriber {
	e.t.Helper()
	return e.subscriberVia(consumer)
}

// subscriberVia subscribes to the stream through the JetStream consumer
// durable: one of another name than an instance's inbox consumer delivers
// the stream's messages afresh, as a key partition's new owner's does.
func (e *env[TTx]) subscriberVia(durable string) *couriernats.Subscriber {
	e.t.Helper()
	nc := testenv.Connect(e.t, e.natsURL)
	sub, err := couriernats.NewSubscriber(context.Background(), nc, couriernats.SubscriberConfig{
		Config: e.mapping, Stream: e.stream, Consumer: durable, AckWait: 2 * time.Second,
	})
	testenv.Must(e.t, err, "subscriber")
	e.t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// recordEffect is the handler most tests use: one row per application.
func recordEffect[TTx any](db *database[TTx], consumer string) inbox.Handler[TTx] {
	return func(ctx context.Context, tx TTx, msg courier.Message) error {
		return db.insertEffect(ctx, tx, consumer, msg)
	}
}

func (e *env[TTx]) effects(m courier.Message) int {
	e.t.Helper()
	return e.db.count(e.t, "SELECT count(*) FROM effects WHERE message_id = ?", m.ID.String())
}

func (e *env[TTx]) totalEffects() (n, distinct int) {
	e.t.Helper()
	testenv.Must(e.t, e.db.sql.QueryRowContext(context.Background(), "SELECT count(*), count(DISTINCT message_id) FROM effects").Scan(&n, &distinct), "count effects")
	return n, distinct
}

// parked lists what consumer parked, oldest first.
func (e *env[TTx]) parked(consumer string) []store.Parked {
	e.t.Helper()
	ps, err := e.db.admin.Parked(context.Background(), consumer, 100)
	testenv.Must(e.t, err, "list parked")
	return ps
}

// requestReplays asks for the replay of everything consumer parked, as
// `courier dlq replay` does.
func (e *env[TTx]) requestReplays(consumer string) {
	e.t.Helper()
	for _, p := range e.parked(consumer) {
		testenv.Must(e.t, e.db.admin.RequestReplay(context.Background(), p.ID), "request replay")
	}
}

// run starts a consumer until the test ends.
func (e *env[TTx]) run(consumer string, h inbox.Handler[TTx], cfg inbox.ConsumerConfig) *inbox.Consumer[TTx] {
	e.t.Helper()
	return e.runOn(e.subscriber(consumer), consumer, h, cfg)
}

// runOn starts a consumer on sub until the test ends.
func (e *env[TTx]) runOn(sub broker.Subscriber, consumer string, h inbox.Handler[TTx], cfg inbox.ConsumerConfig) *inbox.Consumer[TTx] {
	e.t.Helper()
	ib, err := inbox.New(e.db.inbox, consumer)
	testenv.Must(e.t, err, "inbox")
	c, err := inbox.NewConsumer(ib, sub, e.db.cs, h, testConfig(cfg))
	testenv.Must(e.t, err, "consumer")
	e.launch(c)
	return c
}

// testConfig is cfg with the tests' defaults for its zero fields.
func testConfig(cfg inbox.ConsumerConfig) inbox.ConsumerConfig {
	if cfg.Backoff == (courier.Backoff{}) {
		cfg.Backoff = courier.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond}
	}
	if cfg.ReplayEvery == 0 {
		cfg.ReplayEvery = 50 * time.Millisecond
	}
	if cfg.ExtendEvery == 0 {
		cfg.ExtendEvery = 500 * time.Millisecond // within the subscription's ack wait
	}
	if cfg.Group.MaxMessages == 0 {
		// The package's tests apply in groups (a group of one is a
		// transaction of its own, as without grouping): every promise
		// they prove holds with grouping on.
		cfg.Group.MaxMessages = inbox.DefaultGroupMessages
	}
	if os.Getenv("COURIER_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return cfg
}

// launch runs c until the returned stop is called (or the test ends).
func (e *env[TTx]) launch(c *inbox.Consumer[TTx]) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	stop = func() { cancel(); <-done }
	e.t.Cleanup(stop)
	return stop
}

func TestSameMessageFiveTimesOneEffect(t *testing.T) {
	onEachDialect(t, testSameMessageFiveTimesOneEffect, testSameMessageFiveTimesOneEffect)
}

func testSameMessageFiveTimesOneEffect[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	m := courier.NewMessage("payments", "order-1", "ChargeRequested", []byte("charge 42"))
	e.publish(m)
	e.publishAgain(t, 4, m)
	c := e.run("billing", recordEffect(e.db, "billing"), inbox.ConsumerConfig{})
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { mm := c.Metrics(); return mm.Applied+mm.Duplicates == 5, mm }, "not all deliveries handled")
	if n := e.effects(m); n != 1 {
		t.Fatalf("%d effects for one message delivered 5 times", n)
	}
	if mm := c.Metrics(); mm.Applied != 1 || mm.Duplicates != 4 {
		t.Fatalf("metrics %+v: want 1 applied, 4 duplicates", mm)
	}
	// The lower-level call says so too.
	ib, _ := inbox.New(e.db.inbox, "billing")
	res, err := ib.Handle(context.Background(), m, recordEffect(e.db, "billing"))
	if err != nil || res != inbox.Duplicate {
		t.Fatalf("Handle = %v, %v; want Duplicate", res, err)
	}
}

func TestFailTwiceThenSucceed(t *testing.T) {
	onEachDialect(t, testFailTwiceThenSucceed, testFailTwiceThenSucceed)
}

// With KeepOrder the retries wait in place, an hour each on the consumer's
// clock, which the test moves; without, the broker brings the message back
// after the backoff (the 20ms the tests use).
func testFailTwiceThenSucceed[TTx any](t *testing.T, d dialect[TTx]) {
	for _, keepOrder := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep-order=%v", keepOrder), func(t *testing.T) {
			e := newEnv(t, d)
			var calls atomic.Int32
			h := func(ctx context.Context, tx TTx, msg courier.Message) error {
				if err := recordEffect(e.db, "flaky")(ctx, tx, msg); err != nil { // rolled back below
					return err
				}
				if calls.Add(1) <= 2 {
					return errors.New("payment provider timed out")
				}
				return nil
			}
			m := courier.NewMessage("payments", "order-2", "ChargeRequested", nil)
			e.publish(m)
			clock := memstore.NewClock()
			clock.Set(time.Now())
			cfg := inbox.ConsumerConfig{KeepOrder: keepOrder, Clock: clock.Now}
			if keepOrder {
				cfg.Backoff = courier.Backoff{Initial: time.Hour, Max: time.Hour}
			}
			c := e.run(fmt.Sprintf("flaky-%v", keepOrder), h, cfg)
			for failed := int64(1); keepOrder && failed <= 2; failed++ {
				testenv.Eventually(t, 10*time.Second, func() bool { return c.Metrics().Retried == failed }, "run %d did not fail: %v", failed, testenv.Lazy(func() any { return c.Metrics() }))
				clock.Advance(time.Hour - time.Second)
				if n := calls.Load(); int64(n) != failed {
					t.Fatalf("%d runs after %d failures, before the backoff ended", n, failed)
				}
				clock.Advance(time.Second)
			}
			testenv.Eventually(t, 10*time.Second, func() bool { return c.Metrics().Applied == 1 }, "never applied: %v", testenv.Lazy(func() any { return c.Metrics() }))
			if n := e.effects(m); n != 1 || calls.Load() != 3 {
				t.Fatalf("%d effects after %d calls; want 1 effect after 3 calls", n, calls.Load())
			}
			if mm := c.Metrics(); mm.Retried != 2 {
				t.Fatalf("metrics %+v: want 2 retries", mm)
			}
		})
	}
}

func TestAlwaysFailingIsParkedThenReplayedAfterFix(t *testing.T) {
	onEachDialect(t, testAlwaysFailingIsParkedThenReplayedAfterFix, testAlwaysFailingIsParkedThenReplayedAfterFix)
}

func testAlwaysFailingIsParkedThenReplayedAfterFix[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	var fixed atomic.Bool
	h := func(ctx context.Context, tx TTx, msg courier.Message) error {
		if !fixed.Load() {
			return errors.New("inventory service rejects SKU-7")
		}
		return recordEffect(e.db, "inventory")(ctx, tx, msg)
	}
	m := courier.NewMessage("inventory", "order-3", "ReserveStock", []byte("SKU-7"))
	e.publish(m)
	c := e.run("inventory", h, inbox.ConsumerConfig{MaxDeliveries: 3})
	testenv.Eventually(t, 10*time.Second, func() bool { return c.Metrics().Parked == 1 }, "not parked: %v", testenv.Lazy(func() any { return c.Metrics() }))
	ps := e.parked("inventory")
	if len(ps) != 1 || ps[0].MessageID != m.ID.String() {
		t.Fatalf("parked %+v, want message %s", ps, m.ID)
	}
	if p := ps[0]; p.Reason != store.ReasonFailed || p.Attempts != 3 || len(p.History) != 3 || p.Error != "inventory service rejects SKU-7" {
		t.Fatalf("parked: reason %q attempts %d history %d error %q", p.Reason, p.Attempts, len(p.History), p.Error)
	}
	if e.effects(m) != 0 {
		t.Fatal("effect recorded for a failing message")
	}
	// Fix the handler, ask for a replay.
	fixed.Store(true)
	e.requestReplays("inventory")
	testenv.Eventually(t, 10*time.Second, func() bool { return c.Metrics().Replayed == 1 }, "not replayed: %v", testenv.Lazy(func() any { return c.Metrics() }))
	if n := e.effects(m); n != 1 {
		t.Fatalf("%d effects after the replay, want 1", n)
	}
	if left := e.db.count(t, "SELECT count(*) FROM courier_inbox_dead_letters"); left != 0 {
		t.Fatalf("%d parked rows left after a successful replay", left)
	}
}

func TestHandlerThatWritesOutboxThenFailsLeavesNothing(t *testing.T) {
	onEachDialect(t, testHandlerThatWritesOutboxThenFailsLeavesNothing, testHandlerThatWritesOutboxThenFailsLeavesNothing)
}

func testHandlerThatWritesOutboxThenFailsLeavesNothing[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	w := outbox.New(e.db.outbox, outbox.Config{})
	var failing atomic.Bool
	failing.Store(true)
	h := func(ctx context.Context, tx TTx, msg courier.Message) error {
		if err := recordEffect(e.db, "orders")(ctx, tx, msg); err != nil {
			return err
		}
		next := courier.NewMessage("shipping", msg.Key, "PrepareShipment", nil, courier.CausedBy(msg))
		if err := w.Write(ctx, tx, next); err != nil {
			return err
		}
		if failing.Load() {
			return errors.New("crashed after writing")
		}
		return nil
	}
	m := courier.NewMessage("orders", "order-4", "PaymentSucceeded", nil)
	e.publish(m)
	c := e.run("orders", h, inbox.ConsumerConfig{MaxDeliveries: 2})
	testenv.Eventually(t, 10*time.Second, func() bool { return c.Metrics().Parked == 1 }, "not parked: %v", testenv.Lazy(func() any { return c.Metrics() }))
	outboxRows := e.db.count(t, "SELECT count(*) FROM courier_outbox")
	markers := e.db.count(t, "SELECT count(*) FROM courier_inbox")
	if e.effects(m) != 0 || outboxRows != 0 || markers != 0 {
		t.Fatalf("after failures: %d effects, %d outbox rows, %d markers; want none", e.effects(m), outboxRows, markers)
	}
	failing.Store(false)
	e.requestReplays("orders")
	testenv.Eventually(t, 10*time.Second, func() bool { return c.Metrics().Replayed == 1 }, "not replayed")
	outboxRows = e.db.count(t, "SELECT count(*) FROM courier_outbox")
	if e.effects(m) != 1 || outboxRows != 1 {
		t.Fatalf("after the replay: %d effects, %d outbox rows; want one of each", e.effects(m), outboxRows)
	}
}

// ChargeRequested is the typed message of TestMalformedAndUnknownAreParkedAtOnce.
type ChargeRequested struct {
	Amount int `json:"amount"`
}

func TestMalformedAndUnknownAreParkedAtOnce(t *testing.T) {
	onEachDialect(t, testMalformedAndUnknownAreParkedAtOnce, testMalformedAndUnknownAreParkedAtOnce)
}

func testMalformedAndUnknownAreParkedAtOnce[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	r := inbox.NewRouter[TTx]()
	// A run may be rolled back with its group (the malformed messages
	// fail in it) and run again: every run must see the amount, and one
	// effect commit.
	var wrong atomic.Int64
	inbox.On(r, func(ctx context.Context, tx TTx, msg courier.Message, v ChargeRequested) error {
		if v.Amount != 42 {
			wrong.Store(int64(v.Amount))
		}
		return recordEffect(e.db, "typed")(ctx, tx, msg)
	})
	good, err := courier.NewJSON("payments", "o-1", ChargeRequested{Amount: 42})
	testenv.Must(t, err, "json")
	badJSON := courier.NewMessage("payments", "o-2", "ChargeRequested", []byte("{not json"), courier.WithContentType(courier.ContentTypeJSON))
	unknown := courier.NewMessage("payments", "o-3", "RefundRequested", []byte("{}"))
	e.publish(good, badJSON, unknown)
	// And one without Courier's headers at all.
	nc := testenv.Connect(t, e.natsURL)
	testenv.Must(t, nc.Publish(e.mapping.Subject("payments"), []byte("raw bytes")), "raw publish")

	c := e.run("typed", r.Handler(), inbox.ConsumerConfig{MaxDeliveries: 10})
	testenv.Eventually(t, 10*time.Second, func() bool { return c.Metrics().Parked == 3 && c.Metrics().Applied == 1 }, "metrics %v", testenv.Lazy(func() any { return c.Metrics() }))
	if c.Metrics().Retried != 0 {
		t.Fatalf("malformed messages were retried: %+v", c.Metrics())
	}
	if a := wrong.Load(); a != 0 || e.effects(good) != 1 {
		t.Fatalf("typed handler saw amount %d (want 42), its effect committed %d times (want 1)", a, e.effects(good))
	}
	for _, p := range e.parked("typed") {
		if p.Reason != store.ReasonMalformed || p.Attempts != 1 || p.Error == "" {
			t.Errorf("parked %q after %d attempts: %s", p.Reason, p.Attempts, p.Error)
		}
	}
}

// Four instances of one consumer share a durable subscription; every one of
// 10,000 messages (2,000 with -short, 1,000 on SQLite under the race
// detector) must be applied exactly once.
func TestFourInstancesExactlyOnce(t *testing.T) {
	onEachDialect(t, testFourInstancesExactlyOnce, testFourInstancesExactlyOnce)
}

func testFourInstancesExactlyOnce[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	n := 10000
	switch {
	case raceEnabled && e.db.driver.SerialWrites():
		n = 1000
	case testing.Short():
		n = 2000
	}
	msgs := make([]courier.Message, n)
	for i := range msgs {
		msgs[i] = courier.NewMessage("orders", fmt.Sprintf("o-%d", i%300), "OrderPlaced", []byte(fmt.Sprint(i)))
	}
	var consumers []*inbox.Consumer[TTx]
	start := time.Now()
	for range 4 {
		consumers = append(consumers, e.run("warehouse", recordEffect(e.db, "warehouse"), inbox.ConsumerConfig{Concurrency: 8}))
	}
	for i := 0; i < n; i += 1000 {
		e.publish(msgs[i:min(i+1000, n)]...)
	}
	// Some duplicates on the wire too.
	var copies []courier.Message
	for i := range 10 {
		copies = append(copies, msgs[i*7])
	}
	e.publishAgain(t, 1, copies...)
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { total, _ := e.totalEffects(); return total >= n, total },
		"%d effects missing; consumers: %v", n, testenv.Lazy(func() any { return metricsOf(consumers) }))
	elapsed := time.Since(start)
	// Then every delivery on the wire (copies and redeliveries) has been
	// acknowledged: a duplicate applied twice would show now.
	js, err := jetstream.New(testenv.Connect(t, e.natsURL))
	testenv.Must(t, err, "jetstream")
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		info, err := js.Consumer(context.Background(), e.stream, "warehouse")
		if err != nil {
			return false, err.Error()
		}
		ci := info.CachedInfo()
		return ci.NumPending == 0 && ci.NumAckPending == 0, fmt.Sprintf("%d undelivered, %d unacknowledged", ci.NumPending, ci.NumAckPending)
	}, "deliveries in flight")
	total, distinct := e.totalEffects()
	if total != n || distinct != n {
		t.Fatalf("%d effects for %d distinct messages, want exactly %d", total, distinct, n)
	}
	var per []int64
	var dups int64
	for _, c := range consumers {
		per = append(per, c.Metrics().Applied)
		dups += c.Metrics().Duplicates
	}
	t.Logf("%s: %d messages through 4 instances in %s (%.0f msg/s); applied per instance %v; %d duplicates skipped",
		d.name, n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), per, dups)
}

// Messages of one key are applied in publish order when KeepOrder is set,
// even when one of them needs retries.
func TestKeepOrderPerKey(t *testing.T) {
	onEachDialect(t, testKeepOrderPerKey, testKeepOrderPerKey)
}

func testKeepOrderPerKey[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	var failedOnce atomic.Bool
	h := func(ctx context.Context, tx TTx, msg courier.Message) error {
		if string(msg.Payload) == "3" && !failedOnce.Swap(true) {
			return errors.New("transient")
		}
		return e.db.insertEffect(ctx, tx, "ordered", msg)
	}
	var msgs []courier.Message
	for i := range 200 {
		msgs = append(msgs, courier.NewMessage("orders", fmt.Sprintf("k-%d", i%5), "Step", []byte(fmt.Sprint(i))))
	}
	e.publish(msgs...)
	clock := memstore.NewClock()
	c := e.run("ordered", h, inbox.ConsumerConfig{KeepOrder: true, Concurrency: 3, Clock: clock.Now, Backoff: courier.Backoff{Initial: time.Hour, Max: time.Hour}})
	testenv.Eventually(t, 10*time.Second, func() bool { return c.Metrics().Retried == 1 }, "message 3 did not fail: %v", testenv.Lazy(func() any { return c.Metrics() }))
	clock.Advance(time.Hour) // its retry in place falls due
	testenv.Eventually(t, 10*time.Second, func() bool { return c.Metrics().Applied == 200 }, "metrics %v", testenv.Lazy(func() any { return c.Metrics() }))
	// The effects in the order they committed: each key's in its order.
	rows, err := e.db.sql.QueryContext(context.Background(), "SELECT note FROM effects ORDER BY seq")
	testenv.Must(t, err, "read effects")
	defer rows.Close()
	seen := map[int][]int{}
	for rows.Next() {
		var i int
		testenv.Must(t, rows.Scan(&i), "scan")
		seen[i%5] = append(seen[i%5], i)
	}
	testenv.Must(t, rows.Err(), "read effects")
	for k, xs := range seen {
		if len(xs) != 40 || !slices.IsSorted(xs) {
			t.Fatalf("key k-%d applied %v, want its 40 messages in order", k, xs)
		}
	}
}

// With KeepOrder, a key whose message waits (its handler blocks, as on a
// row lock another instance holds) holds back its own later messages only:
// every other key's are applied meanwhile, by the other workers. Not on
// SQLite, where the waiting handler's transaction holds the database's one
// write lock, and so every other key.
func TestKeepOrderWaitingKeyHoldsOnlyItself(t *testing.T) {
	onEachDialect(t, testWaitingKeyHoldsOnlyItself, testWaitingKeyHoldsOnlyItself)
}

func testWaitingKeyHoldsOnlyItself[TTx any](t *testing.T, d dialect[TTx]) {
	if d.name == "sqlite" {
		t.Skip("SQLite has one writer at a time: a handler waiting in its transaction holds every key")
	}
	e := newEnv(t, d)
	release := make(chan struct{})
	var mu sync.Mutex
	var stuck []string
	others := 0
	h := func(ctx context.Context, tx TTx, msg courier.Message) error {
		if msg.Key == "stuck" {
			if string(msg.Payload) == "0" {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			mu.Lock()
			stuck = append(stuck, string(msg.Payload))
			mu.Unlock()
			return nil
		}
		mu.Lock()
		others++
		mu.Unlock()
		return nil
	}
	var msgs []courier.Message
	for i := range 100 {
		if i < 20 {
			msgs = append(msgs, courier.NewMessage("orders", "stuck", "Step", []byte(fmt.Sprint(i))))
		}
		msgs = append(msgs, courier.NewMessage("orders", fmt.Sprintf("other-%d", i), "Step", []byte("x")))
	}
	e.publish(msgs...)
	c := e.run("waiting", h, inbox.ConsumerConfig{KeepOrder: true, Concurrency: 2})
	testenv.Eventually(t, 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return others == 100 },
		"%v of the other keys' messages applied while key stuck waits", testenv.Lazy(func() any { mu.Lock(); defer mu.Unlock(); return others }))
	mu.Lock()
	if len(stuck) != 0 {
		t.Fatalf("key stuck's later messages were applied before its first: %v", stuck)
	}
	mu.Unlock()
	close(release)
	testenv.Eventually(t, 20*time.Second, func() bool { return c.Metrics().Applied == 120 }, "metrics %v", testenv.Lazy(func() any { return c.Metrics() }))
	mu.Lock()
	defer mu.Unlock()
	for i, p := range stuck {
		if p != fmt.Sprint(i) {
			t.Fatalf("key stuck applied out of order: %v", stuck)
		}
	}
}

// A replay that several instances of a consumer take up applies the
// message once and is counted once, by the instance that applied it.
func TestReplayCountedOnceAcrossInstances(t *testing.T) {
	onEachDialect(t, testReplayCountedOnce, testReplayCountedOnce)
}

func testReplayCountedOnce[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	var fixed atomic.Bool
	h := func(ctx context.Context, tx TTx, msg courier.Message) error {
		if !fixed.Load() {
			return errors.New("not yet")
		}
		return recordEffect(e.db, "inventory")(ctx, tx, msg)
	}
	m := courier.NewMessage("inventory", "order-3", "ReserveStock", []byte("SKU-7"))
	e.publish(m)
	cfg := inbox.ConsumerConfig{MaxDeliveries: 1, ReplayEvery: 10 * time.Millisecond}
	a := e.run("inventory", h, cfg)
	b := e.run("inventory", h, cfg)
	testenv.Eventually(t, 10*time.Second, func() bool { return a.Metrics().Parked+b.Metrics().Parked == 1 }, "not parked")
	fixed.Store(true)
	e.requestReplays("inventory")
	testenv.Eventually(t, 10*time.Second, func() bool { return e.db.count(t, "SELECT count(*) FROM courier_inbox_dead_letters") == 0 }, "still parked")
	if n := e.effects(m); n != 1 {
		t.Fatalf("%d effects after the replay, want 1", n)
	}
	replayed := func() int64 { return a.Metrics().Replayed + b.Metrics().Replayed }
	testenv.Eventually(t, 10*time.Second, func() bool { return replayed() >= 1 }, "the replay was not counted")
	// Both instances went through the request by now (each looks every
	// 10ms, and read it before the row was gone or not at all).
	time.Sleep(100 * time.Millisecond)
	if r := replayed(); r != 1 {
		t.Fatalf("the replay counted %d times by the two instances; want once", r)
	}
}

// metricsOf returns each consumer's metrics, for a failure message.
func metricsOf[TTx any](consumers []*inbox.Consumer[TTx]) []inbox.ConsumerMetrics {
	out := make([]inbox.ConsumerMetrics, len(consumers))
	for i, c := range consumers {
		out[i] = c.Metrics()
	}
	return out
}
