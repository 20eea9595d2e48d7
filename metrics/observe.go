package metrics

import (
	"errors"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/relay"
)

// Relay returns the observer that fills the relay metrics; set it as
// relay.Config.Observer.
func (c *Collector) Relay() relay.Observer { return relayObserver{c} }

// Consumer returns the observer that fills the consumer metrics; set it as
// inbox.ConsumerConfig.Observer. The consumer's name labels its series.
// Each applied message's latency, from its OccurredAt to now, goes in
// courier_consumer_latency_seconds by consumer and topic (the topic label
// bounded by Config.MaxTopics, as the outbox gauges'); the collector's
// clock is the consumer's, the message's OccurredAt the writer's.
func (c *Collector) Consumer() inbox.Observer { return consumerObserver{c} }

type relayObserver struct{ c *Collector }

func (o relayObserver) Claimed(n int) {
	o.c.claimedBatches.Inc()
	o.c.claimedMessages.Add(float64(n))
}

func (o relayObserver) Published(msgs []courier.Message, errs []error, d time.Duration) {
	o.c.publishDuration.Observe(d.Seconds())
	now := o.c.now()
	for i, err := range errs {
		switch {
		case err == nil:
			if l, ok := latency(now, msgs[i]); ok {
				o.c.publishLatency.Observe(l)
			}
		case errors.Is(err, broker.ErrUnavailable):
			o.c.publishErrors.WithLabelValues("unavailable").Inc()
		case errors.Is(err, broker.ErrRejected):
			o.c.publishErrors.WithLabelValues("rejected").Inc()
		default:
			o.c.publishErrors.WithLabelValues("refused").Inc()
		}
	}
}

// latency is the seconds from m's OccurredAt to now, when m has one.
func latency(now time.Time, m courier.Message) (float64, bool) {
	if m.OccurredAt.IsZero() {
		return 0, false
	}
	return max(now.Sub(m.OccurredAt), 0).Seconds(), true
}

func (o relayObserver) Completed(published, retried, dead int) {
	o.c.published.Add(float64(published))
	o.c.retried.Add(float64(retried))
	o.c.dead.Add(float64(dead))
}

func (o relayObserver) LeaseLost(int) { o.c.leaseLost.Inc() }

func (o relayObserver) Released(n int) { o.c.released.Add(float64(n)) }

type consumerObserver struct{ c *Collector }

func (o consumerObserver) Handled(consumer string, msg courier.Message, res inbox.Result, err error, d time.Duration) {
	o.c.handlerDuration.WithLabelValues(consumer).Observe(d.Seconds())
	switch {
	case err != nil:
		o.c.failed.WithLabelValues(consumer).Inc()
	case res == inbox.Duplicate:
		o.c.duplicates.WithLabelValues(consumer).Inc()
	default:
		o.c.processed.WithLabelValues(consumer).Inc()
		o.observeLatency(consumer, msg)
	}
}

func (o consumerObserver) Parked(consumer, reason string) {
	o.c.parked.WithLabelValues(consumer, reason).Inc()
}

func (o consumerObserver) Replayed(consumer string, _ courier.Message) {
	o.c.replayed.WithLabelValues(consumer).Inc()
}

func (o consumerObserver) Grouped(consumer string, n int) {
	o.c.groupSize.WithLabelValues(consumer).Observe(float64(n))
}
