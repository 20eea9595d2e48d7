package latency

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/courier-go/courier/store"
)

// Summary is the latency of one topic's messages at one consumer over a
// window, from the samples recorded in it.
type Summary struct {
	Topic    string `json:"topic"`
	Consumer string `json:"consumer"`
	// Messages counts the messages applied; Skewed those whose latency
	// came out negative (see Histogram.Skewed).
	Messages int64 `json:"messages"`
	Skewed   int64 `json:"skewed"`
	// P50 and P99 are the median and the 99th percentile, interpolated
	// within their buckets (Histogram.Quantile).
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	// Histogram is the samples' sum.
	Histogram Histogram `json:"-"`
}

// Summarize sums the samples recorded at or after since, per topic and
// consumer, sorted by topic then consumer. A sample's whole period counts
// when it was recorded (its At) in the window, though it may have begun
// before. A sample FromSample refuses is left out, and the first such
// refusal is returned with the summaries of the others.
func Summarize(samples []store.LatencySample, since time.Time) ([]Summary, error) {
	type pair struct{ topic, consumer string }
	sums := map[pair]*Summary{}
	var errs []error
	for _, s := range samples {
		if s.At.Before(since) {
			continue
		}
		h, err := FromSample(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		k := pair{s.Topic, s.Consumer}
		sum := sums[k]
		if sum == nil {
			sum = &Summary{Topic: s.Topic, Consumer: s.Consumer}
			sums[k] = sum
		}
		sum.Histogram.Add(h)
	}
	out := make([]Summary, 0, len(sums))
	for _, s := range sums {
		h := s.Histogram
		s.Messages, s.Skewed, s.P50, s.P99 = h.Messages, h.Skewed, h.Quantile(0.5), h.Quantile(0.99)
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b Summary) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Consumer, b.Consumer))
	})
	return out, firstErr(errs)
}

func firstErr(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs[0], fmt.Errorf("latency: and %d more samples refused", len(errs)-1))
}

// Point is a topic's latency over one stretch of time, every consumer's
// samples together.
type Point struct {
	// At is the stretch's end.
	At time.Time `json:"at"`
	// Messages counts the messages of the samples recorded in the
	// stretch; 0 when none was: the point is unknown, a gap in a chart.
	Messages int64         `json:"messages"`
	Skewed   int64         `json:"skewed"`
	P50      time.Duration `json:"p50_ns"`
	P99      time.Duration `json:"p99_ns"`
}

// TopicSeries is one topic's latency over time.
type TopicSeries struct {
	Topic  string  `json:"topic"`
	Points []Point `json:"points"`
}

// Series cuts the time after from into n stretches of step each and
// returns, per topic (sorted), a Point per stretch: the samples recorded
// in it (At after its start, at or before its end), every consumer's
// together. Samples outside the n stretches are left out, and so are
// those FromSample refuses (the first refusal is returned with the
// series). It returns nil when step or n is not positive.
func Series(samples []store.LatencySample, from time.Time, step time.Duration, n int) ([]TopicSeries, error) {
	if step <= 0 || n <= 0 {
		return nil, nil
	}
	hists := map[string][]Histogram{}
	var errs []error
	for _, s := range samples {
		if !s.At.After(from) {
			continue
		}
		i := int((s.At.Sub(from) - 1) / step)
		if i >= n {
			continue
		}
		h, err := FromSample(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		hs := hists[s.Topic]
		if hs == nil {
			hs = make([]Histogram, n)
			hists[s.Topic] = hs
		}
		hs[i].Add(h)
	}
	out := make([]TopicSeries, 0, len(hists))
	for topic, hs := range hists {
		ts := TopicSeries{Topic: topic, Points: make([]Point, n)}
		for i, h := range hs {
			ts.Points[i] = Point{At: from.Add(time.Duration(i+1) * step), Messages: h.Messages, Skewed: h.Skewed,
				P50: h.Quantile(0.5), P99: h.Quantile(0.99)}
		}
		out = append(out, ts)
	}
	slices.SortFunc(out, func(a, b TopicSeries) int { return cmp.Compare(a.Topic, b.Topic) })
	return out, firstErr(errs)
}
