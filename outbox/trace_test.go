package outbox_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/memstore"
)

// The writer records the trace context of the caller's span in the stored
// messages, replacing what they carried, and leaves the caller's messages
// as they were; without a span it adds nothing.
func TestWriteRecordsTraceContext(t *testing.T) {
	ctx := context.Background()
	st := memstore.New(memstore.Config{})
	w := outbox.New(st, outbox.Config{})
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	spanCtx := trace.ContextWithSpanContext(ctx, sc)
	traced := courier.NewMessage("orders", "order-1", "OrderPlaced", nil,
		courier.WithHeader(courier.HeaderTraceParent, "00-11111111111111111111111111111111-2222222222222222-01"),
		courier.WithCorrelationID("checkout-7"))
	plain := courier.NewMessage("orders", "order-2", "OrderPlaced", nil)
	testenv.Must(t, st.InTx(ctx, func(tx *memstore.Tx) error { return w.Write(spanCtx, tx, traced) }), "write with a span")
	testenv.Must(t, st.InTx(ctx, func(tx *memstore.Tx) error { return w.Write(ctx, tx, plain) }), "write without a span")

	if got := traced.Headers[courier.HeaderTraceParent]; got != "00-11111111111111111111111111111111-2222222222222222-01" {
		t.Errorf("the caller's message changed: traceparent %q", got)
	}
	b, err := st.Claim(ctx, "test", 10, time.Minute)
	testenv.Must(t, err, "claim")
	if len(b.Records) != 2 {
		t.Fatalf("%d records", len(b.Records))
	}
	stored := b.Records[0].Message.Headers
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; stored[courier.HeaderTraceParent] != want {
		t.Errorf("stored traceparent %q, want %q", stored[courier.HeaderTraceParent], want)
	}
	if stored[courier.HeaderCorrelationID] != "checkout-7" {
		t.Errorf("other headers lost: %v", stored)
	}
	if h := b.Records[1].Message.Headers; h[courier.HeaderTraceParent] != "" {
		t.Errorf("a message written without a span got trace headers: %v", h)
	}
}
