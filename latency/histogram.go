package latency

import (
	"math"
	"time"
)

// Histogram counts latencies in the buckets of Bounds. Its zero value is
// an empty histogram, ready to use. It is not safe for concurrent use.
type Histogram struct {
	// Messages counts the latencies observed.
	Messages int64
	// SumSeconds is their sum, skewed ones counted as 0.
	SumSeconds float64
	// Skewed counts the negative latencies observed (the consumer's clock
	// behind the writer's by more than the message took), counted as 0
	// in the first bucket.
	Skewed int64
	// Buckets counts the latencies per bucket: NumBuckets of them once
	// one is observed, nil before.
	Buckets []int64
}

// Observe counts a latency of d. A negative d counts as 0, in the first
// bucket, and in Skewed.
func (h *Histogram) Observe(d time.Duration) {
	if h.Buckets == nil {
		h.Buckets = make([]int64, NumBuckets)
	}
	h.Messages++
	if d < 0 {
		h.Skewed++
		h.Buckets[0]++
		return
	}
	s := d.Seconds()
	h.SumSeconds += s
	h.Buckets[bucket(s)]++
}

// Add adds o's counts to h.
func (h *Histogram) Add(o Histogram) {
	if o.Messages == 0 && o.Buckets == nil {
		return
	}
	if h.Buckets == nil {
		h.Buckets = make([]int64, NumBuckets)
	}
	h.Messages += o.Messages
	h.SumSeconds += o.SumSeconds
	h.Skewed += o.Skewed
	for i, n := range o.Buckets {
		h.Buckets[i] += n
	}
}

// Mean returns the latencies' mean, 0 when h is empty.
func (h Histogram) Mean() time.Duration {
	if h.Messages == 0 {
		return 0
	}
	return seconds(h.SumSeconds / float64(h.Messages))
}

// Quantile returns the latency under which a fraction q (0 to 1) of the
// observed ones fall, interpolated within its bucket: linearly in the
// first bucket (0 to 1ms), geometrically in the others, whose bounds are
// log-spaced. It returns 0 for an empty histogram, and the highest bound
// when the quantile falls above it (the histogram knows no more than
// "above"). A q outside 0 to 1 is taken as 0 or 1.
func (h Histogram) Quantile(q float64) time.Duration {
	var total int64
	for _, n := range h.Buckets {
		total += n
	}
	if total == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := q * float64(total)
	var cum int64
	for i, n := range h.Buckets {
		if n == 0 {
			continue
		}
		if float64(cum+n) < rank && i < len(h.Buckets)-1 {
			cum += n
			continue
		}
		if i >= len(bounds) {
			return seconds(bounds[len(bounds)-1])
		}
		frac := min(max((rank-float64(cum))/float64(n), 0), 1)
		if i == 0 {
			return seconds(frac * bounds[0])
		}
		lo, hi := bounds[i-1], bounds[i]
		return seconds(lo * math.Pow(hi/lo, frac))
	}
	return seconds(bounds[len(bounds)-1])
}

// seconds converts s seconds to a Duration, to the microsecond: finer is
// noise next to the buckets' widths.
func seconds(s float64) time.Duration {
	return time.Duration(math.Round(s*1e6)) * time.Microsecond
}
