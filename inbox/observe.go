package inbox

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/internal/msgtrace"
)

// Observer is told what a Consumer does with its deliveries, for metrics:
// package metrics implements it with Prometheus. Its methods are called
// from the consumer's goroutines, concurrently, and must return quickly.
// Embed NopObserver in an implementation so that methods added to Observer
// later do nothing until you write them.
type Observer interface {
	// Handled is called after each run of the handler through the inbox:
	// with err nil and res Applied when its effects committed, res
	// Duplicate when the delivery was skipped because the message had been
	// applied before, and with the run's error when it failed (it is then
	// retried or parked). d is how long the run took, its transaction
	// included; in a group (ConsumerConfig.Group), how long the group's
	// transaction took. Runs cut short by shutdown are not reported, nor
	// runs in a group that rolled back for another message's run (they
	// are run again).
	Handled(consumer string, msg courier.Message, res Result, err error, d time.Duration)
	// Parked is called when a delivery is parked as a consume-side dead
	// letter; reason is store.ReasonMalformed, store.ReasonFailed,
	// store.ReasonNewerVersion or store.ReasonHeld (parked behind the
	// parked message that holds its key: ConsumerConfig.HoldKeys).
	Parked(consumer, reason string)
	// Replayed is called when a parked message was applied on an
	// operator's request (courier dlq replay) and unparked.
	Replayed(consumer string, msg courier.Message)
	// Grouped is called when a group's transaction committed
	// (ConsumerConfig.Group): n deliveries applied together, duplicates
	// included, each also told to Handled. A delivery applied alone is
	// not told here.
	Grouped(consumer string, n int)
}

// NopObserver does nothing. Embed it in an Observer to implement only the
// methods you need.
type NopObserver struct{}

// Handled does nothing.
func (NopObserver) Handled(string, courier.Message, Result, error, time.Duration) {}

// Parked does nothing.
func (NopObserver) Parked(string, string) {}

// Replayed does nothing.
func (NopObserver) Replayed(string, courier.Message) {}

// Grouped does nothing.
func (NopObserver) Grouped(string, int) {}

// Observers returns an Observer that tells each of obs in turn, leaving
// out the nil ones: how a consumer feeds several, such as the metrics'
// (metrics.Collector.Consumer) and the latency recorder
// (latency.Recorder). It returns NopObserver{} when none is left, and the
// one left when there is one.
func Observers(obs ...Observer) Observer {
	var all observers
	for _, o := range obs {
		if o != nil {
			all = append(all, o)
		}
	}
	switch len(all) {
	case 0:
		return NopObserver{}
	case 1:
		return all[0]
	}
	return all
}

// observers tells each of its observers in turn.
type observers []Observer

func (os observers) Handled(consumer string, msg courier.Message, res Result, err error, d time.Duration) {
	for _, o := range os {
		o.Handled(consumer, msg, res, err, d)
	}
}

func (os observers) Parked(consumer, reason string) {
	for _, o := range os {
		o.Parked(consumer, reason)
	}
}

func (os observers) Replayed(consumer string, msg courier.Message) {
	for _, o := range os {
		o.Replayed(consumer, msg)
	}
}

func (os observers) Grouped(consumer string, n int) {
	for _, o := range os {
		o.Grouped(consumer, n)
	}
}

// traced runs msg's handler through the inbox in a process span linked to
// the trace context the message carries, and reports the run to the
// Observer. The handler's context holds the span, so messages it writes to
// an outbox carry it on.
func (c *Consumer[TTx]) traced(ctx context.Context, d broker.Delivery, msg courier.Message) (Result, error) {
	ctx, end := c.startSpan(ctx, d, msg)
	start := c.cfg.Clock.Now()
	res, err := c.ib.Handle(ctx, msg, c.run)
	took := c.cfg.Clock.Now().Sub(start)
	if err == nil || ctx.Err() == nil {
		c.cfg.Observer.Handled(c.ib.consumer, msg, res, err, took)
	}
	end(res, err)
	return res, err
}

// startSpan starts the process span of msg's run, linked to the trace
// context the message carries; the returned context holds it, and end
// ends it with the run's outcome.
func (c *Consumer[TTx]) startSpan(ctx context.Context, d broker.Delivery, msg courier.Message) (context.Context, spanEnd) {
	subject := d.Raw().Subject
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	if sc := msgtrace.Extract(&msg); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	ctx, span := c.tracer.Start(ctx, "process "+subject, opts...)
	if span.IsRecording() {
		span.SetAttributes(
			msgtrace.System.String(c.system),
			msgtrace.Destination.String(subject),
			msgtrace.MessageID.String(msg.ID.String()),
			msgtrace.OperationType.String("process"),
			msgtrace.OperationName.String("process"),
			msgtrace.ConsumerGroup.String(c.ib.consumer),
			msgtrace.DeliveryAttempt.Int(d.Attempt()),
		)
		if corr := msg.Headers[courier.HeaderCorrelationID]; corr != "" {
			span.SetAttributes(msgtrace.ConversationID.String(corr))
		}
	}
	return ctx, func(res Result, err error) { endSpan(span, res, err) }
}

// startBatchSpan starts the process span of a batch handler's run over the
// deliveries of g at places at, linked to the trace context each message
// carries. Its end may be called once per message: the first ends it.
func (c *Consumer[TTx]) startBatchSpan(ctx context.Context, g []job, at []int) (context.Context, spanEnd) {
	subject := g[at[0]].d.Raw().Subject
	links := make([]trace.Link, 0, len(at))
	for _, i := range at {
		msg := g[i].msg
		if sc := msgtrace.Extract(&msg); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	ctx, span := c.tracer.Start(ctx, "process "+subject, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...))
	if span.IsRecording() {
		span.SetAttributes(
			msgtrace.System.String(c.system),
			msgtrace.Destination.String(subject),
			msgtrace.OperationType.String("process"),
			msgtrace.OperationName.String("process"),
			msgtrace.ConsumerGroup.String(c.ib.consumer),
			msgtrace.BatchCount.Int(len(at)),
		)
	}
	ended := false
	return ctx, func(res Result, err error) {
		if !ended {
			ended = true
			endSpan(span, res, err)
		}
	}
}

// spanEnd ends a process span with its run's outcome.
type spanEnd func(res Result, err error)

// endSpan ends span with a run's outcome.
func endSpan(span trace.Span, res Result, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(msgtrace.InboxResult.String(res.String()))
	}
	span.End()
}
