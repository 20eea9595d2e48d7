package dispatch

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/brokerkind"
	"github.com/courier-go/courier/internal/msgtrace"
)

// traced wraps the dispatcher's publisher: each call to the broker becomes a send
// span linked to the trace context its messages carry, and is reported to
// the Observer. It forwards the optional interfaces of package broker that
// the relay asks the publisher about (OrderKeeper): add any new one here.
type traced struct {
	pub    broker.Publisher
	obs    Observer
	tracer trace.Tracer
	system string
	clock  courier.Clock
}

func instrument(pub broker.Publisher, cfg Config) broker.Publisher {
	return traced{pub: pub, obs: cfg.Observer, tracer: msgtrace.Tracer(cfg.TracerProvider), system: brokerkind.SystemOf(pub), clock: cfg.Clock}
}

func (p traced) Publish(ctx context.Context, msgs []courier.Message) []error {
	start := p.clock.Now()
	ctx, span := p.tracer.Start(ctx, p.spanName(msgs), trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(msgtrace.System.String(p.system), msgtrace.OperationType.String("send"),
			msgtrace.OperationName.String("send"))
		if t := topicOf(msgs); t != "" {
			span.SetAttributes(msgtrace.Destination.String(t))
		}
		if len(msgs) == 1 {
			span.SetAttributes(msgtrace.MessageID.String(msgs[0].ID.String()))
		} else {
			span.SetAttributes(msgtrace.BatchCount.Int(len(msgs)))
		}
		// One link per trace context: the messages of one transaction
		// usually share the writer's.
		seen := make(map[string]bool)
		for i := range msgs {
			tp := msgs[i].Headers[courier.HeaderTraceParent]
			if tp == "" || seen[tp] {
				continue
			}
			seen[tp] = true
			if sc := msgtrace.Extract(&msgs[i]); sc.IsValid() {
				span.AddLink(trace.Link{SpanContext: sc})
			}
		}
	}
	errs := p.pub.Publish(ctx, msgs)
	p.obs.Published(msgs, errs, p.clock.Now().Sub(start))
	if span.IsRecording() {
		failed, first := 0, error(nil)
		for _, err := range errs {
			if err != nil {
				if failed++; first == nil {
					first = err
				}
			}
		}
		if failed > 0 {
			span.RecordError(first)
			span.SetStatus(codes.Error, fmt.Sprintf("%d of %d messages failed, the first: %v", failed, len(msgs), first))
		}
	}
	span.End()
	return errs
}

// KeepsKeyOrder forwards broker.OrderKeeper.
func (p traced) KeepsKeyOrder() bool { return broker.KeepsKeyOrder(p.pub) }

// spanName is "send" and the topic, when every message goes to one.
func (p traced) spanName(msgs []courier.Message) string {
	if t := topicOf(msgs); t != "" {
		return "send " + t
	}
	return "send"
}

// topicOf returns the topic of msgs if they share one, else "".
func topicOf(msgs []courier.Message) string {
	if len(msgs) == 0 {
		return ""
	}
	t := msgs[0].Topic
	for i := 1; i < len(msgs); i++ {
		if msgs[i].Topic != t {
			return ""
		}
	}
	return t
}
