package inbox_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
)

// extendCounter's deliveries count the extensions they are asked for; the
// first waits until its delivery is acknowledged, so that it is under way
// when the handler's run ends.
type extendCounter struct {
	broker.Subscriber
	calls   atomic.Int32
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
	err := d.Delivery.Ack(ctx)
	d.s.once.Do(func() { close(d.s.acked) })
	return err
}

func TestNoExtensionAfterTheRun(t *testing.T) {
	onEachDialect(t, testNoExtensionAfterTheRun, testNoExtensionAfterTheRun)
}

// The broker hears that a message is in progress only while it is: an
// extension under way when the run ends is the last one, and none follows
// the acknowledgement.
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
	if n := sub.calls.Load(); n != 1 {
		t.Fatalf("%d extensions; want the one under way when the run ended", n)
	}
}
