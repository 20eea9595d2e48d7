package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/memstore"
)

// Carry a request's trace with its messages: a message written while the
// request's span is in ctx stores the span's context in its traceparent
// header, which the relay's send span and the consumers' process spans
// link to. The program installs the OpenTelemetry SDK; Courier uses only the
// API.
func ExampleWriter_Write_traceContext() {
	ctx := context.Background()
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(ctx) }()
	st := memstore.New(memstore.Config{})
	w := outbox.New(st, outbox.Config{})

	reqCtx, span := tp.Tracer("shop").Start(ctx, "POST /orders")
	err := st.InTx(reqCtx, func(tx *memstore.Tx) error {
		return w.Write(reqCtx, tx, courier.NewMessage("orders", "order-42", "OrderPlaced", nil))
	})
	span.End()
	if err != nil {
		panic(err)
	}

	b, err := st.Claim(ctx, "example", 10, time.Minute)
	if err != nil {
		panic(err)
	}
	tp0 := b.Records[0].Message.Headers[courier.HeaderTraceParent]
	fmt.Println("carries the request's trace:", strings.Contains(tp0, span.SpanContext().TraceID().String()))
	fmt.Println("and its span:", strings.Contains(tp0, span.SpanContext().SpanID().String()))
	// Output:
	// carries the request's trace: true
	// and its span: true
}
