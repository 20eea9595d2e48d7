package e2e

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/sqlite"
)

// One order written while a request's span is current goes writer → relay
// → NATS → inbox consumer, whose handler fails once and then writes a
// follow-up message: the spans form the chain the messaging conventions
// describe (the relay's send span and each process span linked to the
// producer's context, the follow-up carrying the process span's context on),
// and the metrics count what happened. A second message, applied before it
// arrives, counts as a duplicate.
func TestTraceAndMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "shop.db"))
	testenv.Must(t, err, "open")
	t.Cleanup(func() { db.Close() })
	d := sqlite.NewDriver(db)
	_, err = d.Migrate(ctx)
	testenv.Must(t, err, "migrate")

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	col, err := metrics.New(metrics.Config{Outbox: metrics.StoreStats(d.Admin()), MinInterval: time.Nanosecond})
	testenv.Must(t, err, "metrics")
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)

	b := newBroker(t)
	n := store.NewLocalNotifier()
	cfg := relayConfig(n)
	cfg.Observer, cfg.TracerProvider = col.Relay(), tp
	b.startRelay(relayStore(t, d), cfg)
	w := outbox.New(d.Inserter(), outbox.Config{Notify: n.Signal})

	// The consumer: its handler fails the order's first run, then writes
	// a follow-up in its transaction.
	ib, err := inbox.New(d.Inbox(), "billing")
	testenv.Must(t, err, "inbox")
	var runs atomic.Int32
	handler := func(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
		if msg.Type != "OrderPlaced" {
			return nil
		}
		if runs.Add(1) == 1 {
			return errors.New("card service timed out")
		}
		return w.Write(ctx, tx, courier.NewMessage("billing", msg.Key, "PaymentCaptured", nil, courier.CausedBy(msg)))
	}
	sub, err := couriernats.NewSubscriber(ctx, b.nc, couriernats.SubscriberConfig{
		Config: b.mapping, Stream: b.stream, Consumer: "billing", Topics: []string{"orders"},
	})
	testenv.Must(t, err, "subscriber")
	defer sub.Close()
	c, err := inbox.NewConsumer(ib, sub, d.ConsumerStore(), handler, inbox.ConsumerConfig{
		Observer: col.Consumer(), TracerProvider: tp,
		Backoff: courier.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
	})
	testenv.Must(t, err, "consumer")
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() { stop(); <-done }()

	// The request: its span is current while the order is written.
	reqCtx, req := tp.Tracer("shop").Start(ctx, "POST /orders")
	order := courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{}`))
	dup := courier.NewMessage("orders", "order-43", "OrderCancelled", nil)
	testenv.Must(t, d.InTx(reqCtx, func(tx *sql.Tx) error { return w.Write(reqCtx, tx, order, dup) }), "write")
	req.End()
	if order.Headers != nil {
		t.Errorf("Write changed the caller's message: headers %v", order.Headers)
	}
	// The second message is applied before the consumer receives it.
	_, err = ib.Handle(ctx, dup, func(context.Context, *sql.Tx, courier.Message) error { return nil })
	testenv.Must(t, err, "apply the duplicate first")

	value := func(name string, labels ...string) float64 { return gathered(t, reg, name, labels...) }
	testenv.Eventually(t, 30*time.Second, func() bool {
		return value("courier_consumer_processed_messages_total", "consumer", "billing") == 1 &&
			value("courier_consumer_duplicate_messages_total", "consumer", "billing") == 1 &&
			value("courier_relay_published_messages_total") == 3
	}, "order not processed and its follow-up not published; processed %v, published %v",
		testenv.Lazy(func() any { return value("courier_consumer_processed_messages_total", "consumer", "billing") }),
		testenv.Lazy(func() any { return value("courier_relay_published_messages_total") }))

	// Metrics.
	for _, m := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"courier_consumer_failed_runs_total", []string{"consumer", "billing"}, 1},
		{"courier_consumer_handler_duration_seconds", []string{"consumer", "billing"}, 3}, // sample count: 2 runs + 1 duplicate
		{"courier_relay_publish_latency_seconds", nil, 3},
		{"courier_outbox_pending_messages", []string{"topic", ""}, 0},
		{"courier_outbox_oldest_pending_age_seconds", []string{"topic", ""}, 0},
		{"courier_relay_dead_lettered_messages_total", nil, 0},
	} {
		if got := value(m.name, m.labels...); got != m.want {
			t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
		}
	}
	if got := value("courier_relay_claimed_batches_total"); got < 2 {
		t.Errorf("claimed batches %v, want at least 2 (the order, then its follow-up)", got)
	}

	// Spans.
	reqSC := req.SpanContext()
	spans := exp.GetSpans()
	var sends, processes []tracetest.SpanStub
	for _, s := range spans {
		switch attr(s, "messaging.operation.type") {
		case "send":
			sends = append(sends, s)
		case "process":
			processes = append(processes, s)
		}
	}
	orderSend := findLinked(sends, reqSC)
	if orderSend == nil {
		t.Fatalf("no send span linked to the request's span among %d send spans", len(sends))
	}
	if orderSend.SpanKind != trace.SpanKindProducer || orderSend.Name != "send orders" ||
		attr(*orderSend, "messaging.system") != "nats" || attr(*orderSend, "messaging.destination.name") != "orders" {
		t.Errorf("send span: name %q kind %v attributes %v", orderSend.Name, orderSend.SpanKind, orderSend.Attributes)
	}
	if attr(*orderSend, "messaging.batch.message_count") != "2" && attr(*orderSend, "messaging.message.id") == "" {
		t.Errorf("send span has neither a batch count nor a message id: %v", orderSend.Attributes)
	}
	var orderRuns []tracetest.SpanStub
	for _, s := range processes {
		if attr(s, "messaging.message.id") == order.ID.String() {
			orderRuns = append(orderRuns, s)
		}
	}
	if len(orderRuns) != 2 {
		t.Fatalf("%d process spans for the order, want 2 (a failed run, then the one that applied it)", len(orderRuns))
	}
	subject := b.mapping.Subject("orders")
	for i, s := range orderRuns {
		if s.Name != "process "+subject || s.SpanKind != trace.SpanKindConsumer ||
			attr(s, "messaging.destination.name") != subject || attr(s, "messaging.consumer.group.name") != "billing" ||
			attr(s, "messaging.system") != "nats" {
			t.Errorf("process span %d: name %q kind %v attributes %v", i, s.Name, s.SpanKind, s.Attributes)
		}
		if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != reqSC.SpanID() || s.Links[0].SpanContext.TraceID() != reqSC.TraceID() {
			t.Errorf("process span %d links %v, want the request's span", i, s.Links)
		}
		if s.Parent.IsValid() {
			t.Errorf("process span %d has a parent %v; it starts a trace of its own, linked to the producer", i, s.Parent)
		}
	}
	failedRun, appliedRun := orderRuns[0], orderRuns[1]
	if failedRun.Status.Code.String() != "Error" || appliedRun.Status.Code.String() == "Error" {
		t.Errorf("statuses %v then %v, want Error then not", failedRun.Status, appliedRun.Status)
	}
	if attr(appliedRun, "courier.inbox.result") != "applied" {
		t.Errorf("applied run's result %q", attr(appliedRun, "courier.inbox.result"))
	}
	// The follow-up carries the applied run's context: its send span links
	// to that run.
	if findLinked(sends, appliedRun.SpanContext) == nil {
		t.Errorf("no send span links to the process span that wrote the follow-up")
	}
	for _, s := range processes {
		if attr(s, "messaging.message.id") == dup.ID.String() && attr(s, "courier.inbox.result") != "duplicate" {
			t.Errorf("duplicate's process span: result %q", attr(s, "courier.inbox.result"))
		}
	}
}

// findLinked returns the first of spans with a link to sc.
func findLinked(spans []tracetest.SpanStub, sc trace.SpanContext) *tracetest.SpanStub {
	for i := range spans {
		for _, l := range spans[i].Links {
			if l.SpanContext.TraceID() == sc.TraceID() && l.SpanContext.SpanID() == sc.SpanID() {
				return &spans[i]
			}
		}
	}
	return nil
}

// attr returns the value of s's attribute key as text, "" when absent.
func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// gathered returns the value of the series of name with the given label
// pairs in reg: a counter's or gauge's value, a histogram's sample count.
// A series that does not exist is 0.
func gathered(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	testenv.Must(t, err, "gather")
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return 0
}

// A message whose handler fails MaxDeliveries times is parked, and counted
// so with its reason; an operator's replay that succeeds is counted as
// replayed.
func TestParkAndReplayCounted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "billing.db"))
	testenv.Must(t, err, "open")
	t.Cleanup(func() { db.Close() })
	d := sqlite.NewDriver(db)
	_, err = d.Migrate(ctx)
	testenv.Must(t, err, "migrate")
	col, err := metrics.New(metrics.Config{})
	testenv.Must(t, err, "metrics")
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)

	b := newBroker(t)
	ib, err := inbox.New(d.Inbox(), "billing")
	testenv.Must(t, err, "inbox")
	var broken atomic.Bool
	broken.Store(true)
	handler := func(context.Context, *sql.Tx, courier.Message) error {
		if broken.Load() {
			return errors.New("card service down")
		}
		return nil
	}
	sub, err := couriernats.NewSubscriber(ctx, b.nc, couriernats.SubscriberConfig{
		Config: b.mapping, Stream: b.stream, Consumer: "billing", Topics: []string{"orders"},
	})
	testenv.Must(t, err, "subscriber")
	defer sub.Close()
	c, err := inbox.NewConsumer(ib, sub, d.ConsumerStore(), handler, inbox.ConsumerConfig{
		Observer: col.Consumer(), MaxDeliveries: 2, ReplayEvery: 20 * time.Millisecond,
		Backoff: courier.Backoff{Initial: 5 * time.Millisecond, Max: 10 * time.Millisecond},
	})
	testenv.Must(t, err, "consumer")
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() { stop(); <-done }()

	pub, err := couriernats.NewPublisher(b.nc, couriernats.PublisherConfig{Config: b.mapping})
	testenv.Must(t, err, "publisher")
	for _, err := range pub.Publish(ctx, []courier.Message{courier.NewMessage("orders", "order-1", "OrderPlaced", nil)}) {
		testenv.Must(t, err, "publish")
	}
	value := func(name string, labels ...string) float64 { return gathered(t, reg, name, labels...) }
	testenv.Eventually(t, 30*time.Second, func() bool {
		return value("courier_consumer_parked_messages_total", "consumer", "billing", "reason", store.ReasonFailed) == 1
	}, "message not parked")
	if got := value("courier_consumer_failed_runs_total", "consumer", "billing"); got != 2 {
		t.Errorf("failed runs %v, want 2 (MaxDeliveries)", got)
	}

	broken.Store(false)
	parked, err := d.Admin().Parked(ctx, "billing", 10)
	testenv.Must(t, err, "parked")
	if len(parked) != 1 {
		t.Fatalf("%d parked", len(parked))
	}
	testenv.Must(t, d.Admin().RequestReplay(ctx, parked[0].ID), "request replay")
	testenv.Eventually(t, 30*time.Second, func() bool {
		return value("courier_consumer_replayed_messages_total", "consumer", "billing") == 1
	}, "replay not counted")
}
