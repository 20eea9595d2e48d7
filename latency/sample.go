package latency

import (
	"fmt"
	"time"

	"github.com/courier-go/courier/store"
)

// Sample returns h as the sample of consumer's latencies of topic over
// period, ready for store.Delivery's RecordLatency. Its Buckets leave out
// the empty buckets past the last one that counts a message (FromSample
// reads them as empty), so that a sample of fast messages is short.
func (h Histogram) Sample(consumer, topic string, period time.Duration) store.LatencySample {
	last := len(h.Buckets)
	for last > 0 && h.Buckets[last-1] == 0 {
		last--
	}
	var b []int64
	if last > 0 {
		b = append(make([]int64, 0, last), h.Buckets[:last]...)
	}
	return store.LatencySample{
		Consumer: consumer, Topic: topic, Period: period,
		Messages: h.Messages, SumSeconds: h.SumSeconds, Skewed: h.Skewed, Buckets: b,
	}
}

// FromSample returns the histogram a sample holds. Buckets missing at its
// end are empty. It fails when the sample has more buckets than
// NumBuckets, or a negative count: it was not recorded with these bounds.
func FromSample(s store.LatencySample) (Histogram, error) {
	if len(s.Buckets) > NumBuckets {
		return Histogram{}, fmt.Errorf("latency: sample %d of %s/%s has %d buckets, more than the %d of this version's bounds", s.ID, s.Consumer, s.Topic, len(s.Buckets), NumBuckets)
	}
	h := Histogram{Messages: s.Messages, SumSeconds: s.SumSeconds, Skewed: s.Skewed}
	if s.Messages < 0 || s.Skewed < 0 {
		return Histogram{}, fmt.Errorf("latency: sample %d of %s/%s counts %d messages, %d skewed: counts are never negative", s.ID, s.Consumer, s.Topic, s.Messages, s.Skewed)
	}
	if s.Messages > 0 || len(s.Buckets) > 0 {
		h.Buckets = make([]int64, NumBuckets)
		for i, n := range s.Buckets {
			if n < 0 {
				return Histogram{}, fmt.Errorf("latency: sample %d of %s/%s counts %d in bucket %d: counts are never negative", s.ID, s.Consumer, s.Topic, n, i)
			}
			h.Buckets[i] = n
		}
	}
	return h, nil
}
