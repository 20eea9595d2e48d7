// Package latency measures how long messages take from their commit to
// their effect: from courier.Message.OccurredAt, which the writer sets just
// before its transaction commits, to the commit of the consumer's handler
// (an inbox run whose result is Applied).
//
// A [Recorder] is an inbox.Observer: set it (with inbox.Observers, next to
// the metrics' observer) as a consumer's Observer and run it. It counts
// each applied message in a [Histogram] per consumer and topic, and every
// few seconds records them in the database (store.Delivery's
// RecordLatency, table courier_latency), where `courier status`, the
// dashboard and any other process read them back ([Summarize], [Series]).
// The relay's courier_relay_publish_latency_seconds measures the first
// leg of the same path, from OccurredAt to the broker's acknowledgement.
//
// # Buckets
//
// Every histogram has the same buckets, log-spaced from 1ms to about one
// hour ([Bounds]), twenty to a decade: each bucket's upper bound is 12%
// above its lower one, so that a quantile interpolated within its bucket
// is off by a few percent, and by 12% at worst. Samples recorded by
// different processes add up bucket by bucket.
//
// # Clock skew
//
// OccurredAt is the writer host's clock; the effect's commit is the
// consumer host's. A difference between the two clocks adds to every
// figure (consumer ahead) or takes from it (consumer behind). A latency
// that comes out negative (the consumer's clock is behind by more than the
// message took) is counted as no time, in the first bucket, and in the
// histogram's Skewed count: a Skewed count above zero says the clocks are
// apart by more than the latencies measured, and that the low quantiles
// are too low. With NTP the hosts are within milliseconds of each other;
// comparing the consumers' figures with the relay's publish latency (the
// writer's clock against the relay's) tells skew from delay.
package latency
