package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/memstore"
)

// start runs a consumer until the returned stop is called (or the test
// ends).
func (e *env[TTx]) start(consumer string, h inbox.Handler[TTx], cfg inbox.ConsumerConfig) (*inbox.Consumer[TTx], func()) {
	e.t.Helper()
	ib, err := inbox.New(e.db.inbox, consumer)
	testenv.Must(e.t, err, "inbox")
	c, err := inbox.NewConsumer(ib, e.subscriber(consumer), e.db.cs, h, testConfig(cfg))
	testenv.Must(e.t, err, "consumer")
	return c, e.launch(c)
}

func TestPanickingHandlerIsParked(t *testing.T) {
	onEachDialect(t, testPanickingHandlerIsParked, testPanickingHandlerIsParked)
}

// A handler that panics on one message: the consumer survives, each run's
// transaction rolls back, the message is parked after MaxDeliveries runs
// with the panic and its stack in its history, and the message behind it (on
// the one worker) is applied. With KeepOrder the retries wait in place, an
// hour each on the consumer's clock, which the test moves.
func testPanickingHandlerIsParked[TTx any](t *testing.T, d dialect[TTx]) {
	for _, keepOrder := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep-order=%v", keepOrder), func(t *testing.T) {
			e := newEnv(t, d)
			poison := courier.NewMessage("orders", "order-1", "OrderPlaced", []byte("poison"))
			next := courier.NewMessage("orders", "order-2", "OrderPlaced", []byte("fine"))
			var panicLine atomic.Int64
			const site = "inbox_test.testPanickingHandlerIsParked[...].func1.1"
			h := func(ctx context.Context, tx TTx, msg courier.Message) error {
				if err := e.db.insertEffect(ctx, tx, "panicky", msg); err != nil {
					return err
				}
				if string(msg.Payload) == "poison" {
					var lines []string
					_, _, line, _ := runtime.Caller(0)
					panicLine.Store(int64(line + 2))
					_ = lines[len(msg.Payload)] // index out of range
				}
				return nil
			}
			e.publish(poison, next)
			clock := memstore.NewClock()
			cfg := inbox.ConsumerConfig{MaxDeliveries: 3, Concurrency: 1, KeepOrder: keepOrder, Clock: clock.Now}
			if keepOrder {
				cfg.Backoff = courier.Backoff{Initial: time.Hour, Max: time.Hour}
			}
			c, _ := e.start("panicky", h, cfg)
			for failed := int64(1); keepOrder && failed <= 2; failed++ {
				testenv.Eventually(t, 10*time.Second, func() bool { return c.Metrics().Retried == failed }, "run %d did not fail: %v", failed, testenv.Lazy(func() any { return c.Metrics() }))
				clock.Advance(time.Hour)
			}
			testenv.Eventually(t, 15*time.Second, func() bool { mm := c.Metrics(); return mm.Parked == 1 && mm.Applied == 1 },
				"poison not parked or next not applied: %v", testenv.Lazy(func() any { return c.Metrics() }))
			if mm := c.Metrics(); mm.Panicked != 3 || mm.Retried != 2 {
				t.Fatalf("metrics %+v: want 3 panics, 2 retries", mm)
			}
			if e.effects(poison) != 0 || e.effects(next) != 1 {
				t.Fatalf("effects: poison %d, next %d; want 0 (rolled back) and 1", e.effects(poison), e.effects(next))
			}
			ps := e.parked("panicky")
			if len(ps) != 1 {
				t.Fatalf("parked %d messages, want 1", len(ps))
			}
			p := ps[0]
			want := fmt.Sprintf("handler panicked at %s (failures_test.go:%d): runtime error: index out of range [6] with length 0", site, panicLine.Load())
			if p.MessageID != poison.ID.String() || p.Reason != store.ReasonFailed || p.Attempts != 3 || p.Error != want || len(p.History) != 3 {
				t.Fatalf("parked %s: reason %q, attempts %d, error %q, %d history entries; want %s, failed, 3, %q, 3",
					p.MessageID, p.Reason, p.Attempts, p.Error, len(p.History), poison.ID, want)
			}
			for i, a := range p.History {
				if !strings.HasPrefix(a.Error, want+"\n\n") || !strings.Contains(a.Error, "testPanickingHandlerIsParked") {
					t.Fatalf("history entry %d lacks the panic and the handler's stack: %q", i, a.Error)
				}
			}
			if n := e.db.count(t, "SELECT count(*) FROM courier_inbox_failures"); n != 0 {
				t.Fatalf("%d recorded failures left after parking, want 0", n)
			}
		})
	}
}

func TestFailuresCountAcrossRestarts(t *testing.T) {
	onEachDialect(t, testFailuresCountAcrossRestarts, testFailuresCountAcrossRestarts)
}

// Failed runs are counted in the database: two failures in one consumer
// process and one in the next park a message at MaxDeliveries 3, with all
// three in its history. A run cut short by shutdown counts nothing.
func testFailuresCountAcrossRestarts[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	m := courier.NewMessage("inventory", "sku-9", "ReserveStock", nil)
	e.publish(m)
	var calls atomic.Int32
	first := func(ctx context.Context, tx TTx, msg courier.Message) error {
		if n := calls.Add(1); n > 2 {
			<-ctx.Done() // still working when the process stops
			return ctx.Err()
		}
		return fmt.Errorf("warehouse %d unreachable", calls.Load())
	}
	cfg := inbox.ConsumerConfig{MaxDeliveries: 3, ShutdownTimeout: 50 * time.Millisecond}
	c1, stop := e.start("stock", first, cfg)
	testenv.Eventually(t, 10*time.Second, func() bool { return calls.Load() == 3 }, "first process ran %d times", testenv.Lazy(func() any { return calls.Load() }))
	stop()
	if mm := c1.Metrics(); mm.Retried != 2 || mm.Parked != 0 {
		t.Fatalf("first process: metrics %+v, want 2 retries", mm)
	}
	second := func(ctx context.Context, tx TTx, msg courier.Message) error {
		return errors.New("warehouse 3 unreachable")
	}
	c2, _ := e.start("stock", second, cfg)
	testenv.Eventually(t, 15*time.Second, func() bool { return c2.Metrics().Parked == 1 }, "not parked: %v", testenv.Lazy(func() any { return c2.Metrics() }))
	if mm := c2.Metrics(); mm.Retried != 0 {
		t.Fatalf("second process: metrics %+v, want the first failure to park", mm)
	}
	p := e.parked("stock")[0]
	var got []string
	for _, a := range p.History {
		got = append(got, a.Error)
	}
	if p.Attempts != 3 || strings.Join(got, "; ") != "warehouse 1 unreachable; warehouse 2 unreachable; warehouse 3 unreachable" {
		t.Fatalf("parked after %d attempts with history %q; want 3, all three failures", p.Attempts, got)
	}
}

const envChildDieInHandler = "COURIER_TEST_INBOX_DIE_IN_HANDLER"

// TestConsumerDyingInHandlerChildProcess is not a test: it is the consumer
// process that TestCrashesAreNotFailures starts. Its handler kills the
// process: the delivery is neither acknowledged nor failed.
func TestConsumerDyingInHandlerChildProcess(t *testing.T) {
	if os.Getenv(envChildDieInHandler) != "1" {
		return
	}
	pg, std := childDialect(os.Getenv(envChildTx))
	if pg.connect != nil {
		dieInHandler(t, pg)
	} else {
		dieInHandler(t, std)
	}
}

func dieInHandler[TTx any](t *testing.T, d dialect[TTx]) {
	ctx := context.Background()
	db, sub, ib := childConsumer(t, d)
	die := func(context.Context, TTx, courier.Message) error {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	c, err := inbox.NewConsumer(ib, sub, db.cs, die, inbox.ConsumerConfig{})
	if err != nil {
		panic(err)
	}
	_ = c.Run(ctx) // never returns: the first delivery kills the process
}

func TestCrashesAreNotFailures(t *testing.T) {
	onEachDialect(t, testCrashesAreNotFailures, testCrashesAreNotFailures)
}

// Deliveries lost to crashes count nothing: after two consumer processes
// died inside the handler, a message whose handler then fails once is
// retried and applied at MaxDeliveries 2, though the broker delivers it for
// the fourth time.
func testCrashesAreNotFailures[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	m := courier.NewMessage("ledger", "acct-2", "Credit", []byte("+5"))
	e.publish(m)
	for range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestConsumerDyingInHandlerChildProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), envChildDieInHandler+"=1", envChildTx+"="+txType[TTx](), envChildURL+"="+e.db.url,
			envChildNATS+"="+e.natsURL, envChildPrefix+"="+e.mapping.SubjectPrefix, envChildStream+"="+e.stream)
		cmd.Stderr = os.Stderr
		testenv.Must(t, cmd.Start(), "start consumer")
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("consumer did not die in its handler: %v", err)
		}
	}
	var calls atomic.Int32
	h := func(ctx context.Context, tx TTx, msg courier.Message) error {
		if calls.Add(1) == 1 {
			return errors.New("ledger locked")
		}
		return e.db.insertEffect(ctx, tx, "ledger", msg)
	}
	c, _ := e.start("ledger", h, inbox.ConsumerConfig{MaxDeliveries: 2})
	testenv.Eventually(t, 15*time.Second, func() bool { mm := c.Metrics(); return mm.Applied+mm.Parked == 1 },
		"neither applied nor parked: %v", testenv.Lazy(func() any { return c.Metrics() }))
	if mm := c.Metrics(); mm.Applied != 1 || mm.Retried != 1 || e.effects(m) != 1 {
		t.Fatalf("metrics %+v, %d effects: want the message applied after one retry", mm, e.effects(m))
	}
	if n := e.db.count(t, "SELECT count(*) FROM courier_inbox_failures"); n != 0 {
		t.Fatalf("%d recorded failures left after the message was applied, want 0", n)
	}
}

func TestNewerVersionWaitsForTheDeploy(t *testing.T) {
	onEachDialect(t, testNewerVersionWaitsForTheDeploy, testNewerVersionWaitsForTheDeploy)
}

// The producer is deployed first: a consumer that knows version 1 of an
// event meets version 2. It neither applies it nor counts its runs (far
// more than MaxDeliveries 1) while the message of another key goes on;
// the wait, counted from its first run in the database, carries over to
// the next process, which parks it once NewerVersionWait passed on the
// consumer's clock, with the reason and the version named. The consumer
// that knows version 2, deployed after, applies it when it is replayed.
func testNewerVersionWaitsForTheDeploy[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	old := courier.NewMessage("orders", "o1", "OrderPlaced", []byte("v1"))
	newer := courier.NewMessage("orders", "o2", "OrderPlaced", []byte("v2"), courier.WithVersion(2))
	e.publish(newer, old)
	router := func(versions ...int) inbox.Handler[TTx] {
		r := inbox.NewRouter[TTx]()
		for _, v := range versions {
			r.HandleVersion("OrderPlaced", v, recordEffect(e.db, "orders"))
		}
		return r.Handler()
	}
	clock := memstore.NewClock()
	cfg := inbox.ConsumerConfig{MaxDeliveries: 1, NewerVersionWait: time.Hour, Concurrency: 1, Clock: clock.Now}
	c1, stop := e.start("orders", router(1), cfg)
	testenv.Eventually(t, 10*time.Second, func() bool { mm := c1.Metrics(); return mm.Retried >= 3 && mm.Applied == 1 },
		"the newer message was not retried past MaxDeliveries, or the older one not applied: %v", testenv.Lazy(func() any { return c1.Metrics() }))
	stop()
	if mm := c1.Metrics(); mm.Parked != 0 || e.effects(newer) != 0 || e.effects(old) != 1 {
		t.Fatalf("before the wait ended: metrics %+v, effects of the newer %d, of the older %d", mm, e.effects(newer), e.effects(old))
	}

	clock.Advance(time.Hour)
	c2, stop := e.start("orders", router(1), cfg)
	testenv.Eventually(t, 10*time.Second, func() bool { return c2.Metrics().Parked == 1 }, "not parked: %v", testenv.Lazy(func() any { return c2.Metrics() }))
	stop()
	if mm := c2.Metrics(); mm.Retried != 0 {
		t.Fatalf("the next process retried it (%+v): the wait did not carry over", mm)
	}
	ps := e.parked("orders")
	if len(ps) != 1 || ps[0].MessageID != newer.ID.String() || ps[0].Reason != store.ReasonNewerVersion ||
		!strings.Contains(ps[0].Error, "OrderPlaced version 2") || !ps[0].History[0].Uncounted {
		t.Fatalf("parked %+v; want the newer message, reason %s, naming its version, its runs uncounted", ps, store.ReasonNewerVersion)
	}

	c3 := e.run("orders", router(1, 2), cfg)
	e.requestReplays("orders")
	testenv.Eventually(t, 10*time.Second, func() bool { return c3.Metrics().Replayed == 1 }, "not replayed: %v", testenv.Lazy(func() any { return c3.Metrics() }))
	if e.effects(newer) != 1 || len(e.parked("orders")) != 0 {
		t.Fatalf("after the replay: %d effects of the newer message, %d parked", e.effects(newer), len(e.parked("orders")))
	}
	if n := e.db.count(t, "SELECT count(*) FROM courier_inbox_failures"); n != 0 {
		t.Fatalf("%d recorded failures left", n)
	}
}

func TestFailuresClearedMeanwhile(t *testing.T) {
	onEachDialect(t, testFailuresClearedMeanwhile, testFailuresClearedMeanwhile)
}

// A run whose failure comes back with no history (another delivery of the
// message cleared it meanwhile) counts as the message's only failure,
// counted or newer than the consumer knows, in place or not: the
// consumer retries it and applies it once the handler succeeds.
func testFailuresClearedMeanwhile[TTx any](t *testing.T, d dialect[TTx]) {
	for _, keepOrder := range []bool{false, true} {
		for _, cause := range []error{errors.New("flaky"), fmt.Errorf("%w: version 2", courier.ErrNewerVersion)} {
			t.Run(fmt.Sprintf("keep-order=%v/%v", keepOrder, cause), func(t *testing.T) {
				e := newEnv(t, d)
				e.db.cs = emptyHistory{e.db.cs}
				msg := courier.NewMessage("orders", "o1", "OrderPlaced", []byte("x"))
				e.publish(msg)
				var runs atomic.Int64
				h := func(ctx context.Context, tx TTx, m courier.Message) error {
					if runs.Add(1) <= 3 {
						return cause
					}
					return e.db.insertEffect(ctx, tx, "orders", m)
				}
				c, _ := e.start("orders", h, inbox.ConsumerConfig{MaxDeliveries: 2, Concurrency: 1, KeepOrder: keepOrder})
				testenv.Eventually(t, 15*time.Second, func() bool { return c.Metrics().Applied == 1 }, "not applied: %v", testenv.Lazy(func() any { return c.Metrics() }))
				if mm := c.Metrics(); mm.Retried != 3 || mm.Parked != 0 || e.effects(msg) != 1 {
					t.Fatalf("metrics %+v, %d effects; want 3 retries, nothing parked, applied once", mm, e.effects(msg))
				}
			})
		}
	}
}

// emptyHistory returns no history from RecordFailure, as when another
// delivery of the message cleared its failures between the insert and the
// read.
type emptyHistory struct{ store.ConsumerStore }

func (s emptyHistory) RecordFailure(ctx context.Context, consumer string, id uuid.UUID, f store.Attempt) ([]store.Attempt, error) {
	if _, err := s.ConsumerStore.RecordFailure(ctx, consumer, id, f); err != nil {
		return nil, err
	}
	return nil, s.ConsumerStore.ClearFailures(ctx, consumer, id)
}

func TestAppliedMessageLeavesNoFailures(t *testing.T) {
	onEachDialect(t, testAppliedMessageLeavesNoFailures, testAppliedMessageLeavesNoFailures)
}

// A message's failures go when it is applied, whichever instance applies
// it and whatever the broker's count of its deliveries says: one instance
// fails it (uncounted runs of a version it does not know yet, or counted
// ones) and stops; the next reads the stream through a subscription of its
// own, as a key partition's new owner does, so the message reaches it as a
// first delivery, and applies it. An instance that applies it after
// failing it itself leaves none either, though the consumer store's
// ClearFailures fails (the database unreachable after the commit).
// Nothing is left for the operators' status to count.
func testAppliedMessageLeavesNoFailures[TTx any](t *testing.T, d dialect[TTx]) {
	newer := fmt.Errorf("%w: OrderPlaced version 2", courier.ErrNewerVersion)
	for _, tc := range []struct {
		name      string
		cause     error
		keepOrder bool
		handover  bool
	}{
		{"newer version, retried in place, handed over", newer, true, true},
		{"newer version, redelivered, handed over", newer, false, true},
		{"counted, retried in place, handed over", errors.New("ledger locked"), true, true},
		{"counted, redelivered, handed over", errors.New("ledger locked"), false, true},
		{"counted, applied by the instance that failed it", errors.New("ledger locked"), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, d)
			m := courier.NewMessage("orders", "o1", "OrderPlaced", []byte("x"))
			e.publish(m)
			failures := func() int { return e.db.count(t, "SELECT count(*) FROM courier_inbox_failures") }
			cfg := inbox.ConsumerConfig{MaxDeliveries: 100, Concurrency: 1, KeepOrder: tc.keepOrder}
			var runs atomic.Int64
			h := func(ctx context.Context, tx TTx, msg courier.Message) error {
				if !tc.handover && runs.Add(1) > 3 {
					return e.db.insertEffect(ctx, tx, "orders", msg)
				}
				return tc.cause
			}
			var c *inbox.Consumer[TTx]
			if tc.handover {
				first, stop := e.start("orders", h, cfg)
				testenv.Eventually(t, 10*time.Second, func() bool { return failures() >= 3 },
					"%d failures recorded; metrics %v", testenv.Lazy(func() any { return failures() }), testenv.Lazy(func() any { return first.Metrics() }))
				stop()
				c = e.runOn(e.subscriberVia("orders-next"), "orders", recordEffect(e.db, "orders"), cfg)
			} else {
				e.db.cs = failingClear{e.db.cs}
				c, _ = e.start("orders", h, cfg)
			}
			testenv.Eventually(t, 10*time.Second, func() bool { return c.Metrics().Applied == 1 },
				"not applied: %v", testenv.Lazy(func() any { return c.Metrics() }))
			if n := failures(); n != 0 || e.effects(m) != 1 {
				t.Fatalf("%d recorded failures left after the message was applied (%d effects), want 0", n, e.effects(m))
			}
			st, err := e.db.driver.Operations().Status(context.Background())
			testenv.Must(t, err, "status")
			if len(st.Consumers) != 0 {
				t.Fatalf("status of the consumers: %+v, want none in trouble", st.Consumers)
			}
		})
	}
}

// failingClear fails ClearFailures, as when the database is unreachable
// after the applying transaction committed.
type failingClear struct{ store.ConsumerStore }

func (failingClear) ClearFailures(context.Context, string, uuid.UUID) error {
	return errors.New("database unreachable")
}
