package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
)

// extendCounter's deliveries count the extensions they are asked for, and
// those asked for once their acknowledgement began; the first waits until
// its delivery is acknowledged, so that it is under way when the handler's
// run ends.
type extendCounter struct {
	broker.Subscriber
	calls   atomic.Int32
	late    atomic.Int32  // extensions begun after the acknowledgement did
	acking  atomic.Bool   // an acknowledgement began
	entered chan struct{} // closed when the first extension began
	acked   chan struct{} // closed when a delivery was acknowledged
	once    sync.Once
}

func (s *extendCounter) Next(ctx context.Context) (broker.Delivery, error) {
	d, err := s.Subscriber.Next(ctx)
	if err != nil {
		return nil, err
	}
	return &countedDelivery{Delivery: d, s: s}, nil
}

type countedDelivery struct {
	broker.Delivery
	s *extendCounter
}

func (d *countedDelivery) Extend(ctx context.Context) error {
	if d.s.acking.Load() {
		d.s.late.Add(1)
	}
	if d.s.calls.Add(1) == 1 {
		close(d.s.entered)
		select {
		case <-d.s.acked:
		case <-ctx.Done():
		}
	}
	return d.Delivery.Extend(ctx)
}

func (d *countedDelivery) Ack(ctx context.Context) error {
	d.s.acking.Store(true)
	err := d.Delivery.Ack(ctx)
	d.s.once.Do(func() { close(d.s.acked) })
	return err
}

func TestNoExtensionAfterTheRun(t *testing.T) {
	onEachDialect(t, testNoExtensionAfterTheRun, testNoExtensionAfterTheRun)
}

// The broker hears that a message is in progress only while it is: an
// extension under way when the run ends is the last one, and none follows
// the acknowledgement. (Others may begin while the handler runs: the
// delivery is extended while it waits for a worker, then while it is
// handled, and the first may still be under way.)
func testNoExtensionAfterTheRun[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	sub := &extendCounter{Subscriber: e.subscriber("brief"), entered: make(chan struct{}), acked: make(chan struct{})}
	h := func(ctx context.Context, tx TTx, msg courier.Message) error {
		select {
		case <-sub.entered: // the run ends while its extension is under way
		case <-ctx.Done():
			return ctx.Err()
		}
		return recordEffect(e.db, "brief")(ctx, tx, msg)
	}
	e.publish(courier.NewMessage("orders", "order-5", "OrderPlaced", nil))
	c := e.runOn(sub, "brief", h, inbox.ConsumerConfig{Concurrency: 1, ExtendEvery: time.Millisecond})
	testenv.Eventually(t, 10*time.Second, func() bool { return c.Metrics().Applied == 1 }, "not applied: %v", testenv.Lazy(func() any { return c.Metrics() }))
	<-sub.acked
	time.Sleep(100 * time.Millisecond) // a hundred ExtendEvery
	if n := sub.late.Load(); n != 0 {
		t.Fatalf("%d extensions after the acknowledgement (of %d); want none", n, sub.calls.Load())
	}
}

// receiveCounter counts the deliveries its consumer receives.
type receiveCounter struct {
	broker.Subscriber
	received atomic.Int32
}

func (s *receiveCounter) Next(ctx context.Context) (broker.Delivery, error) {
	d, err := s.Subscriber.Next(ctx)
	if err == nil {
		s.received.Add(1)
	}
	return d, err
}

func TestWaitingDeliveriesAreExtended(t *testing.T) {
	for _, keepOrder := range []bool{false, true} {
		t.Run(fmt.Sprintf("KeepOrder=%t", keepOrder), func(t *testing.T) {
			// The consumer extends, whatever the dialect: SQLite's is enough.
			testWaitingDeliveriesAreExtended[*sql.Tx](keepOrder)(t, sqliteDialect())
		})
	}
}

// Deliveries received while the only worker is busy for longer than the
// subscription's ack wait (2s) wait for it, and are extended meanwhile:
// the broker brings none of them again.
func testWaitingDeliveriesAreExtended[TTx any](keepOrder bool) func(t *testing.T, d dialect[TTx]) {
	return func(t *testing.T, d dialect[TTx]) {
		e := newEnv(t, d)
		sub := &receiveCounter{Subscriber: e.subscriber("waiting")}
		entered, release := make(chan struct{}), make(chan struct{})
		h := func(ctx context.Context, tx TTx, msg courier.Message) error {
			if msg.Key == "slow" {
				close(entered)
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return recordEffect(e.db, "waiting")(ctx, tx, msg)
		}
		e.publish(courier.NewMessage("orders", "slow", "OrderPlaced", nil))
		c := e.runOn(sub, "waiting", h, inbox.ConsumerConfig{Concurrency: 1, KeepOrder: keepOrder})
		<-entered
		const waiting = 5
		for i := range waiting {
			e.publish(courier.NewMessage("orders", fmt.Sprintf("order-%d", i), "OrderPlaced", nil))
		}
		testenv.Eventually(t, 10*time.Second, func() bool { return sub.received.Load() == 1+waiting }, "received %d deliveries", testenv.Lazy(func() any { return sub.received.Load() }))
		time.Sleep(3 * time.Second) // past the ack wait (2s), the worker still busy
		close(release)
		testenv.Eventually(t, 10*time.Second, func() bool { return c.Metrics().Applied == 1+waiting }, "not applied: %v", testenv.Lazy(func() any { return c.Metrics() }))
		if n := sub.received.Load(); n != 1+waiting {
			t.Fatalf("%d deliveries received for %d messages: the broker brought back some that waited for the worker", n, 1+waiting)
		}
		if n, distinct := e.totalEffects(); n != 1+waiting || distinct != 1+waiting {
			t.Fatalf("%d effects of %d messages, want %d of %d", n, distinct, 1+waiting, 1+waiting)
		}
	}
}
