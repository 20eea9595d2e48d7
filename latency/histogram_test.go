package latency_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/courier-go/courier/latency"
)

// The bounds run from 1ms to past an hour, each about 12% above the one
// below, the same in every process.
func TestBounds(t *testing.T) {
	b := latency.Bounds()
	if len(b) != latency.NumBuckets-1 {
		t.Fatalf("%d bounds, want NumBuckets-1 = %d", len(b), latency.NumBuckets-1)
	}
	if b[0] != 0.001 {
		t.Errorf("first bound %g, want 0.001 (1ms)", b[0])
	}
	if last := b[len(b)-1]; last < 3600 || b[len(b)-2] >= 3600 {
		t.Errorf("last bounds %g, %g: want the first bound at or above one hour last", b[len(b)-2], last)
	}
	for i := 1; i < len(b); i++ {
		if r := b[i] / b[i-1]; r < 1.11 || r > 1.13 {
			t.Errorf("bound %d (%g) is %.4f times bound %d (%g), want about 1.122", i, b[i], r, i-1, b[i-1])
		}
	}
	b[0] = 7
	if latency.Bounds()[0] != 0.001 {
		t.Error("Bounds returned the package's own slice")
	}
}

func TestHistogramEdges(t *testing.T) {
	last := time.Duration(latency.Bounds()[latency.NumBuckets-2] * float64(time.Second))
	for _, c := range []struct {
		name     string
		observe  []time.Duration
		messages int64
		skewed   int64
		bucket   int // where the first observation is counted
		p50, p99 time.Duration
	}{
		{name: "empty"},
		{name: "all skewed", observe: []time.Duration{-time.Second, -time.Millisecond, -1}, messages: 3, skewed: 3, bucket: 0, p50: 500 * time.Microsecond, p99: 990 * time.Microsecond},
		{name: "zero", observe: []time.Duration{0}, messages: 1, bucket: 0, p50: 500 * time.Microsecond, p99: 990 * time.Microsecond},
		{name: "on a bound", observe: []time.Duration{time.Millisecond}, messages: 1, bucket: 0, p50: 500 * time.Microsecond, p99: 990 * time.Microsecond},
		{name: "just above a bound", observe: []time.Duration{time.Millisecond + time.Microsecond}, messages: 1, bucket: 1},
		{name: "beyond the last bound", observe: []time.Duration{3 * time.Hour, 5 * time.Hour}, messages: 2, bucket: latency.NumBuckets - 1, p50: last, p99: last},
		{name: "on the last bound", observe: []time.Duration{last}, messages: 1, bucket: latency.NumBuckets - 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h latency.Histogram
			for _, d := range c.observe {
				h.Observe(d)
			}
			if h.Messages != c.messages || h.Skewed != c.skewed {
				t.Fatalf("counts %d messages, %d skewed; want %d, %d", h.Messages, h.Skewed, c.messages, c.skewed)
			}
			if c.messages == 0 {
				if h.Buckets != nil || h.Quantile(0.5) != 0 || h.Quantile(0.99) != 0 || h.Mean() != 0 {
					t.Fatalf("empty histogram: buckets %v, p50 %s, p99 %s, mean %s", h.Buckets, h.Quantile(0.5), h.Quantile(0.99), h.Mean())
				}
				return
			}
			if len(h.Buckets) != latency.NumBuckets || h.Buckets[c.bucket] == 0 {
				t.Fatalf("bucket %d holds nothing: %v", c.bucket, h.Buckets)
			}
			if c.p50 != 0 && (h.Quantile(0.5) != c.p50 || h.Quantile(0.99) != c.p99) {
				t.Fatalf("p50 %s, p99 %s; want %s, %s", h.Quantile(0.5), h.Quantile(0.99), c.p50, c.p99)
			}
			if c.skewed > 0 && h.SumSeconds != 0 {
				t.Fatalf("skewed latencies summed to %g, want 0", h.SumSeconds)
			}
		})
	}
}

// exact is the q-quantile of sorted, the nearest rank.
func exact(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// The quantiles read from the buckets are within 10% of the exact ones, on
// random latencies of several shapes.
func TestQuantileAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(46, 46))
	for _, c := range []struct {
		name string
		draw func() time.Duration
	}{
		{"lognormal around 20ms", func() time.Duration { return secs(0.02 * math.Exp(rng.NormFloat64())) }},
		{"exponential, mean 150ms", func() time.Duration { return secs(0.15 * rng.ExpFloat64()) }},
		{"uniform 2ms to 40ms", func() time.Duration { return secs(0.002 + 0.038*rng.Float64()) }},
		{"bimodal 5ms and 2s", func() time.Duration {
			if rng.Float64() < 0.97 {
				return secs(0.005 * (1 + 0.2*rng.NormFloat64()))
			}
			return secs(2 * (1 + 0.1*rng.NormFloat64()))
		}},
		{"heavy tail, minutes", func() time.Duration { return secs(30 / math.Pow(rng.Float64(), 0.7)) }},
	} {
		for _, n := range []int{100, 1000, 100_000} {
			var h latency.Histogram
			ds := make([]time.Duration, n)
			for i := range ds {
				ds[i] = max(c.draw(), 0)
				h.Observe(ds[i])
			}
			slices.Sort(ds)
			for _, q := range []float64{0.5, 0.9, 0.99} {
				want, got := exact(ds, q), h.Quantile(q)
				if rel := math.Abs(float64(got-want)) / float64(want); rel > 0.10 {
					t.Errorf("%s, %d latencies: p%g is %s, exact %s: %.1f%% off, want within 10%%", c.name, n, q*100, got, want, rel*100)
				} else if n == 100_000 {
					t.Logf("%s: p%g %s, exact %s (%.2f%% off)", c.name, q*100, got, want, rel*100)
				}
			}
		}
	}
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func TestAdd(t *testing.T) {
	var a, b, both latency.Histogram
	for i := range 50 {
		d := time.Duration(i*i) * time.Millisecond
		a.Observe(d)
		both.Observe(d)
		b.Observe(-d)
		both.Observe(-d)
	}
	var sum latency.Histogram
	sum.Add(latency.Histogram{})
	if sum.Buckets != nil {
		t.Fatal("adding an empty histogram made buckets")
	}
	sum.Add(a)
	sum.Add(b)
	if sum.Messages != both.Messages || sum.Skewed != both.Skewed || sum.SumSeconds != both.SumSeconds || !slices.Equal(sum.Buckets, both.Buckets) {
		t.Fatalf("a + b = %+v, want %+v", sum, both)
	}
}

// FuzzHistogram: whatever the latencies, the counts add up, a sample reads
// back as the histogram, and the quantiles grow with q and stay within the
// buckets of the smallest and largest latency.
func FuzzHistogram(f *testing.F) {
	f.Add(int64(0), int64(1), int64(-5))
	f.Add(int64(time.Hour*5), int64(time.Millisecond), int64(time.Millisecond+1))
	f.Add(int64(-time.Hour), int64(math.MaxInt64), int64(math.MinInt64))
	f.Fuzz(func(t *testing.T, a, b, c int64) {
		var h latency.Histogram
		ds := []time.Duration{time.Duration(a), time.Duration(b), time.Duration(c)}
		var skewed int64
		for _, d := range ds {
			h.Observe(d)
			if d < 0 {
				skewed++
			}
		}
		var total int64
		for _, n := range h.Buckets {
			total += n
		}
		if h.Messages != 3 || total != 3 || h.Skewed != skewed {
			t.Fatalf("%v: %d messages, %d in buckets, %d skewed", ds, h.Messages, total, h.Skewed)
		}
		back, err := latency.FromSample(h.Sample("c", "t", time.Second))
		if err != nil || back.Messages != h.Messages || back.Skewed != h.Skewed || !slices.Equal(back.Buckets, h.Buckets) {
			t.Fatalf("%v: sample reads back as %+v, %v", ds, back, err)
		}
		lo, hi := slices.Min(ds), slices.Max(ds)
		prev := time.Duration(-1)
		for _, q := range []float64{0, 0.01, 0.5, 0.9, 0.99, 1} {
			v := h.Quantile(q)
			if v < prev {
				t.Fatalf("%v: quantile %g is %s, below the one before (%s)", ds, q, v, prev)
			}
			prev = v
			if v < 0 || (lo > time.Millisecond && float64(v) < float64(lo)/1.13-float64(time.Microsecond)) || float64(v) > max(float64(hi)*1.13, float64(time.Millisecond))+float64(time.Microsecond) {
				t.Fatalf("%v: quantile %g is %s, outside the buckets of %s … %s", ds, q, v, lo, hi)
			}
		}
	})
}
