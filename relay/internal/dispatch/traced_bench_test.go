package dispatch

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// BenchmarkInstrumentedPublish measures what the send span and the
// observer add to one call to the broker of a batch of 1000 messages, each
// carrying a traceparent: with tracing off (the default), and with an SDK
// recording every span and its links, the messages written by one request
// or each by its own. The publisher acknowledges at once,
// so the numbers are the instrumentation's cost, not a broker's.
func BenchmarkInstrumentedPublish(b *testing.B) {
	shared := make([]courier.Message, 1000)   // written by one request
	distinct := make([]courier.Message, 1000) // each by a request of its own
	for i := range shared {
		shared[i] = courier.NewMessage("orders", fmt.Sprint(i), "OrderPlaced", nil,
			courier.WithHeader(courier.HeaderTraceParent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
		distinct[i] = courier.NewMessage("orders", fmt.Sprint(i), "OrderPlaced", nil,
			courier.WithHeader(courier.HeaderTraceParent, fmt.Sprintf("00-4bf92f3577b34da6a3ce929d0e0e4736-%016x-01", i+1)))
	}
	recording := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
	defer func() { _ = recording.Shutdown(context.Background()) }()
	for _, tc := range []struct {
		name string
		tp   trace.TracerProvider // nil: not instrumented
		msgs []courier.Message
	}{
		{"bare", nil, shared},
		{"tracing-off", noop.NewTracerProvider(), shared},
		{"tracing-on/one-context", recording, shared},
		{"tracing-on/1000-contexts", recording, distinct},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var p broker.Publisher = ackAll{}
			if tc.tp != nil {
				p = instrument(p, Config{Observer: nopObserver{}, TracerProvider: tc.tp})
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				p.Publish(ctx, tc.msgs)
			}
		})
	}
}

// ackAll acknowledges every message at once.
type ackAll struct{}

func (ackAll) Publish(_ context.Context, msgs []courier.Message) []error {
	return make([]error, len(msgs))
}

// nopObserver is told nothing.
type nopObserver struct{}

func (nopObserver) Published([]courier.Message, []error, time.Duration) {}
