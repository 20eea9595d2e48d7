// Package msgtrace carries OpenTelemetry trace context in messages and makes
// the spans of the messaging semantic conventions for the outbox writer, the
// relay and the inbox consumer. It uses the OpenTelemetry API only: spans
// are recorded when the program installs an SDK TracerProvider, and cost a
// non-recording span per call otherwise.
//
// Trace context travels in the message headers traceparent and tracestate
// (W3C Trace Context, courier.HeaderTraceParent and HeaderTraceState),
// whatever propagator the program installed globally: the header names are
// part of Courier's message format.
package msgtrace

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/courier-go/courier"
)

// ScopeName is the instrumentation scope of Courier's spans.
const ScopeName = "github.com/courier-go/courier"

// Attribute keys of the messaging semantic conventions.
const (
	System          = attribute.Key("messaging.system")
	Destination     = attribute.Key("messaging.destination.name")
	MessageID       = attribute.Key("messaging.message.id")
	OperationType   = attribute.Key("messaging.operation.type")
	OperationName   = attribute.Key("messaging.operation.name")
	BatchCount      = attribute.Key("messaging.batch.message_count")
	ConsumerGroup   = attribute.Key("messaging.consumer.group.name")
	ConversationID  = attribute.Key("messaging.message.conversation_id")
	DeliveryAttempt = attribute.Key("courier.delivery.attempt")
	InboxResult     = attribute.Key("courier.inbox.result")
)

var propagator = propagation.TraceContext{}

// Tracer returns the tracer of tp, or of the global provider when tp is nil.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

// Inject returns msgs with the trace context of ctx in their headers, when
// ctx carries a valid span context. Messages are copied with fresh header
// maps before they are changed, so the caller's messages stay as they were;
// without a span msgs is returned as it is.
func Inject(ctx context.Context, msgs []courier.Message) []courier.Message {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return msgs
	}
	out := make([]courier.Message, len(msgs))
	for i, m := range msgs {
		h := make(map[string]string, len(m.Headers)+2)
		for k, v := range m.Headers {
			if k != courier.HeaderTraceParent && k != courier.HeaderTraceState {
				h[k] = v
			}
		}
		m.Headers = h
		propagator.Inject(ctx, courier.HeaderCarrier{Msg: &m})
		out[i] = m
	}
	return out
}

// Extract returns the span context msg's headers carry; it is invalid when
// they carry none.
func Extract(msg *courier.Message) trace.SpanContext {
	if msg.Headers[courier.HeaderTraceParent] == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagator.Extract(context.Background(), courier.HeaderCarrier{Msg: msg}))
}
