package metrics_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/memstore"
)

// Count what a relay does and how the outbox stands. The Collector goes in
// a registry of the program's own (serve it with promhttp.HandlerFor); the
// relay reports to it through its Observer. The outbox and broker here are
// in memory; a real program passes its dialect's Admin to StoreStats.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := memstore.New(memstore.Config{})
	col, err := metrics.New(metrics.Config{Outbox: metrics.StoreStats(st)})
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)

	r, err := relay.New(st, memory.NewPublisher(), relay.Config{Observer: col.Relay(), Notifier: st.NewNotifier()})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()

	w := outbox.New(st, outbox.Config{})
	err = st.InTx(ctx, func(tx *memstore.Tx) error {
		return w.Write(ctx, tx,
			courier.NewMessage("orders", "order-1", "OrderPlaced", nil),
			courier.NewMessage("orders", "order-2", "OrderPlaced", nil))
	})
	if err != nil {
		panic(err)
	}
	for r.Metrics().Published < 2 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}

	show(reg, "courier_outbox_pending_messages", "courier_relay_published_messages_total", "courier_relay_publish_latency_seconds")
	// Output:
	// courier_outbox_pending_messages{topic=""} 0
	// courier_relay_publish_latency_seconds 2 samples
	// courier_relay_published_messages_total 2
}

// show writes the series of the named metrics in reg: values, or a
// histogram's sample count.
func show(reg *prometheus.Registry, names ...string) {
	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	var lines []string
	for _, mf := range mfs {
		if !slices.Contains(names, mf.GetName()) {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			series := mf.GetName()
			if len(labels) > 0 {
				series += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Histogram != nil:
				lines = append(lines, fmt.Sprintf("%s %d samples", series, m.Histogram.GetSampleCount()))
			case m.Counter != nil:
				lines = append(lines, fmt.Sprintf("%s %g", series, m.Counter.GetValue()))
			case m.Gauge != nil:
				lines = append(lines, fmt.Sprintf("%s %g", series, m.Gauge.GetValue()))
			}
		}
	}
	sort.Strings(lines)
	fmt.Println(strings.Join(lines, "\n"))
}
