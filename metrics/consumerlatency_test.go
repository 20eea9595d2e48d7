package metrics_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/metrics"
)

// A consumer's applied messages are measured from their OccurredAt to the
// collector's clock, per consumer and topic; failed runs, duplicates and
// messages without an OccurredAt are not; a message applied before it
// occurred (the consumer's clock behind the writer's) counts as 0 and as
// skew. The topic label is bounded by MaxTopics, as the outbox gauges'.
func TestConsumerLatency(t *testing.T) {
	col, err := metrics.New(metrics.Config{MaxTopics: 2})
	testenv.Must(t, err, "new")
	now := time.Unix(1_000_000, 0)
	metrics.SetClock(col, func() time.Time { return now })
	c := col.Consumer()
	at := func(topic string, ago time.Duration) courier.Message {
		return courier.Message{Topic: topic, OccurredAt: now.Add(-ago)}
	}
	c.Handled("billing", at("orders", 20*time.Millisecond), inbox.Applied, nil, time.Millisecond)
	c.Handled("billing", at("orders", 2*time.Second), inbox.Applied, nil, time.Millisecond)
	c.Handled("billing", at("orders", -time.Second), inbox.Applied, nil, time.Millisecond) // skewed
	c.Handled("billing", at("orders", time.Hour), inbox.Duplicate, nil, time.Millisecond)
	c.Handled("billing", at("orders", time.Hour), 0, errors.New("boom"), time.Millisecond)
	c.Handled("billing", courier.Message{Topic: "orders"}, inbox.Applied, nil, time.Millisecond)
	c.Handled("shipping", at("payments", 300*time.Millisecond), inbox.Applied, nil, time.Millisecond)
	c.Handled("shipping", at("customer-1", time.Second), inbox.Applied, nil, time.Millisecond) // past MaxTopics
	c.Handled("shipping", at("customer-2", 3*time.Second), inbox.Applied, nil, time.Millisecond)
	c.Handled("shipping", at(metrics.OtherTopics, time.Second), inbox.Applied, nil, time.Millisecond)

	count := func(consumer, topic string) (n uint64, sum float64) {
		t.Helper()
		reg := registry(col)
		mfs, err := reg.Gather()
		testenv.Must(t, err, "gather")
		for _, mf := range mfs {
			if mf.GetName() != "courier_consumer_latency_seconds" {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["consumer"] == consumer && labels["topic"] == topic {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
		return 0, 0
	}
	for _, w := range []struct {
		consumer, topic string
		n               uint64
		sum             float64
	}{
		{"billing", "orders", 3, 2.02},
		{"shipping", "payments", 1, 0.3},
		{"shipping", metrics.OtherTopics, 3, 5},
	} {
		n, sum := count(w.consumer, w.topic)
		if n != w.n || sum < w.sum-1e-9 || sum > w.sum+1e-9 {
			t.Errorf("%s/%s: %d latencies summing %gs, want %d summing %gs", w.consumer, w.topic, n, sum, w.n, w.sum)
		}
	}
	if n := testutil.CollectAndCount(col, "courier_consumer_latency_seconds"); n != 3 {
		t.Errorf("%d latency series, want 3 (orders, payments, other topics)", n)
	}
	want := `
# HELP courier_consumer_clock_skew_messages_total Messages applied, by the consumer's clock, before they occurred by the writer's: the hosts' clocks are apart by more than the messages' latency, which courier_consumer_latency_seconds counts as 0.
# TYPE courier_consumer_clock_skew_messages_total counter
courier_consumer_clock_skew_messages_total{consumer="billing"} 1
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want), "courier_consumer_clock_skew_messages_total"); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkConsumerHandled is the metrics' cost per applied message, the
// latency histogram included.
func BenchmarkConsumerHandled(b *testing.B) {
	col, err := metrics.New(metrics.Config{})
	if err != nil {
		b.Fatal(err)
	}
	c := col.Consumer()
	msg := courier.Message{Topic: "orders", OccurredAt: time.Now().Add(-20 * time.Millisecond)}
	b.ReportAllocs()
	for b.Loop() {
		c.Handled("billing", msg, inbox.Applied, nil, time.Millisecond)
	}
}
