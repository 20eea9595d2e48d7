package msgtrace_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/msgtrace"
)

func TestInjectExtractRoundTrip(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
		TraceState: mustState(t, "vendor=v1"),
	})
	msgs := []courier.Message{courier.NewMessage("t", "k", "T", nil, courier.WithHeader("x", "y"))}
	out := msgtrace.Inject(trace.ContextWithRemoteSpanContext(context.Background(), sc), msgs)
	if msgs[0].Headers[courier.HeaderTraceParent] != "" {
		t.Fatal("Inject changed the caller's message")
	}
	got := msgtrace.Extract(&out[0])
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || got.TraceState().Get("vendor") != "v1" || !got.IsRemote() {
		t.Errorf("extracted %+v, want %+v", got, sc)
	}
	if out[0].Headers["x"] != "y" {
		t.Errorf("headers lost: %v", out[0].Headers)
	}
	if same := msgtrace.Inject(context.Background(), msgs); &same[0] != &msgs[0] {
		t.Error("Inject without a span copied the messages")
	}
	if msgtrace.Extract(&msgs[0]).IsValid() {
		t.Error("a message without traceparent gave a valid span context")
	}
	bad := courier.NewMessage("t", "k", "T", nil, courier.WithHeader(courier.HeaderTraceParent, "garbage"))
	if msgtrace.Extract(&bad).IsValid() {
		t.Error("a malformed traceparent gave a valid span context")
	}
}

func mustState(t *testing.T, s string) trace.TraceState {
	ts, err := trace.ParseTraceState(s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}
