package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/courier-go/courier"
)

// newConsumerLatency makes the consumers' commit-to-applied histogram and
// its count of skewed clocks.
func (c *Collector) newConsumerLatency() {
	c.consumerLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "courier_consumer_latency_seconds",
		Help:    "Time from a message's OccurredAt (the writer's clock, just before its transaction commits) to the commit of the consumer's handler (the consumer's clock), per consumer and topic; the first MaxTopics topics have series of their own, the others are summed under topic=\"other topics\". A negative time (the consumer's clock behind the writer's) counts as 0 and in courier_consumer_clock_skew_messages_total.",
		Buckets: latencyBuckets,
	}, []string{"consumer", "topic"})
	c.clockSkew = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "courier_consumer_clock_skew_messages_total",
		Help: "Messages applied, by the consumer's clock, before they occurred by the writer's: the hosts' clocks are apart by more than the messages' latency, which courier_consumer_latency_seconds counts as 0.",
	}, []string{"consumer"})
}

// observeLatency counts an applied message's latency, from its OccurredAt
// to now, when it has one.
func (o consumerObserver) observeLatency(consumer string, msg courier.Message) {
	if msg.OccurredAt.IsZero() {
		return
	}
	d := o.c.now().Sub(msg.OccurredAt)
	if d < 0 {
		o.c.clockSkew.WithLabelValues(consumer).Inc()
		d = 0
	}
	o.c.consumerLatency.WithLabelValues(consumer, o.c.latencyTopic(msg.Topic)).Observe(d.Seconds())
}

// latencyTopic returns the topic label of topic's latency series, bounded
// as the outbox gauges' are (Config.MaxTopics): the first MaxTopics topics
// seen keep theirs for the Collector's lifetime, the others are OtherTopics.
func (c *Collector) latencyTopic(topic string) string {
	c.latencyMu.Lock()
	defer c.latencyMu.Unlock()
	switch {
	case c.latencyTopics[topic]:
		return topic
	case topic == OtherTopics || len(c.latencyTopics) >= c.cfg.MaxTopics:
		return OtherTopics
	}
	c.latencyTopics[topic] = true
	return topic
}
