package latency_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/latency"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/store/sqlite"
)

// A consumer's latency, commit to applied, recorded in its database next
// to the metrics' observer, and read back as `courier status` does.
func ExampleRecorder() {
	dir, err := os.MkdirTemp("", "latency-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "courier.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := sqlite.Migrate(ctx, db); err != nil {
		fmt.Println(err)
		return
	}
	delivery := sqlite.NewDriver(db).Delivery()

	rec, err := latency.NewRecorder(latency.Config{Delivery: delivery})
	if err != nil {
		fmt.Println(err)
		return
	}
	col, err := metrics.New(metrics.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	// The consumer's configuration: both observers.
	cfg := inbox.ConsumerConfig{Observer: inbox.Observers(col.Consumer(), rec)}
	// Run flushes every 10s and once more when ctx ends:
	//	go rec.Run(ctx)

	// What the consumer reports of three applied orders.
	for _, took := range []time.Duration{12 * time.Millisecond, 15 * time.Millisecond, 400 * time.Millisecond} {
		msg := courier.Message{Topic: "orders", OccurredAt: time.Now().Add(-took)}
		cfg.Observer.Handled("billing", msg, inbox.Applied, nil, time.Millisecond)
	}
	if err := rec.Flush(ctx); err != nil {
		fmt.Println(err)
		return
	}

	samples, _, err := latency.Read(ctx, delivery, time.Now().Add(-5*time.Minute), 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	sums, err := latency.Summarize(samples, time.Time{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range sums {
		fmt.Printf("%s at %s: %d messages, p50 under 20ms: %t, p99 over 300ms: %t\n", s.Topic, s.Consumer, s.Messages, s.P50 < 20*time.Millisecond, s.P99 > 300*time.Millisecond)
	}
	// Output:
	// orders at billing: 3 messages, p50 under 20ms: true, p99 over 300ms: true
}

// Quantiles read from a histogram's buckets.
func ExampleHistogram() {
	var h latency.Histogram
	for i := range 100 {
		h.Observe(time.Duration(i+1) * time.Millisecond) // 1ms … 100ms
	}
	h.Observe(-time.Second) // the consumer's clock behind the writer's
	fmt.Println("messages", h.Messages, "skewed", h.Skewed)
	fmt.Println("p50 within 12% of 50ms:", within12(h.Quantile(0.5), 50*time.Millisecond))
	fmt.Println("p99 within 12% of 99ms:", within12(h.Quantile(0.99), 99*time.Millisecond))
	// Output:
	// messages 101 skewed 1
	// p50 within 12% of 50ms: true
	// p99 within 12% of 99ms: true
}

func within12(d, want time.Duration) bool {
	r := float64(d) / float64(want)
	return r > 1/1.12 && r < 1.12
}
