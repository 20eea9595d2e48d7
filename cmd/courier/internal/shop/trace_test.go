package shop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/courier-go/courier/cmd/courier/internal/shop"
	"github.com/courier-go/courier/idempotency"
	"github.com/courier-go/courier/internal/testenv"
)

// One order, traced from the client's POST /orders to ShippingReady: the
// request's server span is the child of the client's span; from it, each
// hop of the saga is a send span of the sending service's relay and a
// process span of the receiving service, each linked to the span that
// wrote the message, in the order the saga visits the services.
func TestOneOrderTracedThroughEveryService(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	otel.SetTracerProvider(tp) // the shop's relays and consumers use the global provider
	t.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		_ = tp.Shutdown(context.Background())
	})
	st := sqliteStack(t)
	s := st.start(t, st.options(t))
	c := newClient(t, s)

	ctx, client := tp.Tracer("client").Start(context.Background(), "checkout")
	body, err := json.Marshal(mug(1))
	testenv.Must(t, err, "encode")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/orders", bytes.NewReader(body))
	testenv.Must(t, err, "request")
	req.Header.Set(idempotency.HeaderKey, uuid.NewString())
	req.Header.Set("Authorization", "Bearer test-client")
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := c.http.Do(req)
	testenv.Must(t, err, "POST /orders")
	var placed shop.OrderPlaced
	testenv.Must(t, json.NewDecoder(resp.Body).Decode(&placed), "decode")
	resp.Body.Close()
	client.End()
	var v shop.OrderView
	testenv.Eventually(t, 30*time.Second, func() bool { v = c.get(placed.ID); return v.State == shop.StateShippingReady },
		"order not ShippingReady: %s", testenv.Lazy(func() any { return v.State }))

	spans := exp.GetSpans()
	var server *tracetest.SpanStub
	for i, sp := range spans {
		if sp.Name == "POST /orders" && sp.Parent.SpanID() == client.SpanContext().SpanID() {
			server = &spans[i]
		}
	}
	if server == nil || server.SpanKind != trace.SpanKindServer || server.SpanContext.TraceID() != client.SpanContext().TraceID() {
		t.Fatalf("no server span of POST /orders in the client's trace: %+v", server)
	}
	cur := server.SpanContext
	var path []string
	for _, service := range []string{shop.Payment, shop.Orders, shop.Inventory, shop.Orders, shop.Shipping, shop.Orders} {
		if linkedTo(spans, cur, "send") == nil {
			t.Fatalf("after %s: no send span links to the span that wrote the next message", strings.Join(path, " > "))
		}
		next := linkedTo(spans, cur, "process", service)
		if next == nil {
			t.Fatalf("after %s: no process span of %s links to the span that wrote its message", strings.Join(path, " > "), service)
		}
		path = append(path, service)
		cur = next.SpanContext
	}
	t.Logf("traced: client > POST /orders > %s (%d spans)", strings.Join(path, " > "), len(spans))
}

// linkedTo returns a span of the messaging operation op (of the consumer
// group, if given) with a link to sc that did not fail.
func linkedTo(spans []tracetest.SpanStub, sc trace.SpanContext, op string, group ...string) *tracetest.SpanStub {
	for i, sp := range spans {
		if attrOf(sp, "messaging.operation.type") != op || sp.Status.Code.String() == "Error" {
			continue
		}
		if len(group) > 0 && attrOf(sp, "messaging.consumer.group.name") != group[0] {
			continue
		}
		for _, l := range sp.Links {
			if l.SpanContext.SpanID() == sc.SpanID() && l.SpanContext.TraceID() == sc.TraceID() {
				return &spans[i]
			}
		}
	}
	return nil
}

func attrOf(sp tracetest.SpanStub, key string) string {
	for _, kv := range sp.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}
