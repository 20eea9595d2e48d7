package saga_test

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/saga"
	"github.com/courier-go/courier/store/memstore"
	"github.com/courier-go/courier/store/sqlite"
)

// A saga whose step panics on a reply, run by an inbox consumer: the panic
// is recovered, the transition and its command roll back, the reply is
// parked with the panic and its stack after MaxDeliveries runs, and other
// instances' replies go on being applied. The retry waits in place an hour
// on the consumer's clock, which the test moves.
func TestPanickingStepIsParkedByTheConsumer(t *testing.T) {
	f := newFixture(t, "sqlite")
	def := orderSaga()
	panicLine := 0
	def.Steps[0].OnReply = func(o *Order, r courier.Message) error {
		if string(r.Payload) == "corrupt" {
			_, _, line, _ := runtime.Caller(0)
			panicLine = line + 2
			panic("charge id out of range")
		}
		o.ChargeID = string(r.Payload)
		return nil
	}
	orch, err := saga.New(def, f.sagas, outbox.New(sqlite.DatabaseSQL(), outbox.Config{}), saga.Config{})
	testenv.Must(t, err, "orchestrator")
	f.orch = orch
	f.start("o1", 100)
	f.start("o2", 200)
	expect(t, f.commands("o1"), "ChargeRequested")
	expect(t, f.commands("o2"), "ChargeRequested")

	srv := testenv.EmbeddedNATS(t)
	nc := testenv.Connect(t, srv.ClientURL())
	mapping := couriernats.Config{SubjectPrefix: "saga."}
	testenv.Must(t, couriernats.EnsureStream(context.Background(), nc, mapping, couriernats.StreamConfig{Name: "SAGA"}), "stream")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
	testenv.Must(t, err, "publisher")
	for _, err := range pub.Publish(context.Background(), []courier.Message{
		reply("o1", "PaymentSucceeded", "corrupt"), reply("o2", "PaymentSucceeded", "ch_2"),
	}) {
		testenv.Must(t, err, "publish")
	}
	sub, err := couriernats.NewSubscriber(context.Background(), nc, couriernats.SubscriberConfig{
		Config: mapping, Stream: "SAGA", Consumer: "orders", AckWait: 2 * time.Second,
	})
	testenv.Must(t, err, "subscriber")
	t.Cleanup(func() { _ = sub.Close() })
	ib, err := inbox.New(sqlite.NewDriver(f.db).Inbox(), "orders")
	testenv.Must(t, err, "inbox")
	h := func(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
		_, err := orch.Handle(ctx, tx, msg)
		return err
	}
	clock := memstore.NewClock()
	c, err := inbox.NewConsumer(ib, sub, sqlite.NewDriver(f.db).ConsumerStore(), h, inbox.ConsumerConfig{
		Concurrency: 1, KeepOrder: true, MaxDeliveries: 2, ExtendEvery: 500 * time.Millisecond,
		Backoff: courier.Backoff{Initial: time.Hour, Max: time.Hour}, Clock: clock.Now,
	})
	testenv.Must(t, err, "consumer")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	testenv.Eventually(t, 15*time.Second, func() bool { return c.Metrics().Retried == 1 }, "the reply did not fail: %v", testenv.Lazy(func() any { return c.Metrics() }))
	clock.Advance(time.Hour)
	testenv.Eventually(t, 15*time.Second, func() bool { m := c.Metrics(); return m.Parked == 1 && m.Applied == 1 },
		"reply not parked or the other not applied: %v", testenv.Lazy(func() any { return c.Metrics() }))
	if in := f.get("o1"); in.State != "PaymentPending" || in.Data.ChargeID != "" {
		t.Fatalf("o1 after its reply panicked: %s, charge %q; want PaymentPending, none", in.State, in.Data.ChargeID)
	}
	expect(t, f.commands("o1"))
	if in := f.get("o2"); in.State != "Paid" || in.Data.ChargeID != "ch_2" {
		t.Fatalf("o2: %s, charge %q; want Paid, ch_2", in.State, in.Data.ChargeID)
	}
	expect(t, f.commands("o2"), "ReserveStock")
	ps, err := sqlite.Admin(f.db).Parked(context.Background(), "orders", 10)
	testenv.Must(t, err, "parked")
	site := fmt.Sprintf("saga_test.TestPanickingStepIsParkedByTheConsumer.func1 (consumer_test.go:%d)", panicLine)
	if len(ps) != 1 || ps[0].Error != "handler panicked at "+site+": charge id out of range" || len(ps[0].History) != 2 ||
		!strings.Contains(ps[0].History[1].Error, "saga.(*Orchestrator") {
		t.Fatalf("parked %+v: want the reply, with the panic and the saga's stack in its 2 history entries", ps)
	}
}
