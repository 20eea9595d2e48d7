package latency

import (
	"math"
	"slices"
	"sort"
)

// BucketsPerDecade is how many buckets a power of ten holds: each bound is
// 10^(1/20), about 1.122, times the one below.
const BucketsPerDecade = 20

// NumBuckets is how many buckets a Histogram has: 133 bounds, from 1ms to
// 10^6.6 ms (about 66 minutes, the first bound above one hour), and one
// bucket for the latencies above the highest.
const NumBuckets = 134

// lowestBound is the first bucket's upper bound, in seconds.
const lowestBound = 0.001

// bounds are the buckets' upper bounds in seconds, ascending. A latency l
// falls in the first bucket i with l <= bounds[i], or in the last bucket,
// len(bounds), above them all.
var bounds = func() []float64 {
	b := make([]float64, 0, NumBuckets-1)
	for k := range NumBuckets - 1 {
		v := lowestBound * math.Pow(10, float64(k)/BucketsPerDecade)
		// Round to 4 significant digits, so that the bounds read well
		// (0.001, 0.001122, 0.001259, …) and every process computes the
		// same ones.
		v = roundSig(v, 4)
		b = append(b, v)
	}
	return b
}()

// roundSig rounds v to n significant digits.
func roundSig(v float64, n int) float64 {
	p := math.Pow(10, float64(n)-math.Ceil(math.Log10(v)))
	return math.Round(v*p) / p
}

// Bounds returns the buckets' upper bounds in seconds, ascending: bucket i
// counts latencies above bound i-1 (0 for the first) and at most bound i;
// the last bucket, one past the bounds, counts those above the highest.
// They are the same in every process: samples recorded with them add up.
func Bounds() []float64 { return slices.Clone(bounds) }

// bucket returns the bucket of a latency of s seconds.
func bucket(s float64) int {
	return sort.SearchFloat64s(bounds, s)
}
