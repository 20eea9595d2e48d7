package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/courier-go/courier/latency"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/store"
)

// latencyPoints is how many stretches of time the latency charts cut
// Config.History into, at most: each point sums the samples recorded in
// its stretch.
const latencyPoints = 60

// latencyCharts draws the consumers' latency, commit to applied, per
// topic over the History before now (the store's clock): the p50 chart
// and the p99 chart, every consumer of a topic together. It reads the
// samples recorded since the charts' start, at most store.MaxLatencyRows
// of them.
func (h *Handler) latencyCharts(ctx context.Context, now time.Time) []chart {
	hist := h.cfg.History
	p50 := chart{ID: "chart-latency-p50", Title: "Latency p50 per topic, commit to applied, in seconds",
		Note: "The median time from a message's commit (its OccurredAt, the writer's clock) to the commit of a consumer's handler (the consumer's clock), every consumer of the topic together, from the samples consumers record (latency.Recorder; courier shop --latency-every). A gap: no message of the topic was applied then."}
	p99 := chart{ID: "chart-latency-p99", Title: "Latency p99 per topic, commit to applied, in seconds",
		Note: "The 99th percentile of the same: one message in a hundred took longer. A line that climbs while p50 stays: a few keys or a slow consumer; both climbing: the relay or the consumers are behind. See docs/operations.md, End-to-end latency."}
	empty := func(why string) []chart {
		p50.Empty, p99.Empty = why, why
		return []chart{draw(p50, now, hist, nil), draw(p99, now, hist, nil)}
	}
	if h.cfg.Database == nil {
		return empty("No database to read the latency from.")
	}
	samples, from, err := h.latencySamples(ctx, now)
	if err != nil {
		h.cfg.Logger.Warn("dashboard: read the consumers' latency for the trend charts", "err", err)
		return empty("The consumers' latency could not be read: " + err.Error())
	}
	if len(samples) == 0 {
		return empty(fmt.Sprintf("No consumer recorded its latency in the last %s: consumers record it with latency.Recorder (courier shop does, --latency-every).", ago(hist)))
	}
	if !from.Equal(now.Add(-hist)) {
		note := fmt.Sprintf(" The last %s hold more than %d samples, the most a view reads: the charts draw the last %s.", ago(hist), store.MaxLatencyRows, ago(now.Sub(from)))
		if len(samples) == store.MaxLatencyRows {
			note = fmt.Sprintf(" The last %s hold more than %d samples, the most a view reads: the charts draw those from %s to %s.", ago(hist), store.MaxLatencyRows,
				from.Format(time.TimeOnly), samples[len(samples)-1].At.Format(time.TimeOnly))
		}
		p50.Note += note
		p99.Note += note
	}
	samples = boundTopics(samples)
	step := latencyStep(samples, hist)
	n := int((hist + step - 1) / step)
	series, err := latency.Series(samples, now.Add(-time.Duration(n)*step), step, n)
	if err != nil {
		h.cfg.Logger.Warn("dashboard: latency samples left out of the trend charts", "err", err)
	}
	var ps50, ps99 []plotted
	for _, s := range series {
		other := s.Topic == metrics.OtherTopics
		v50, v99 := make([]value, len(s.Points)), make([]value, len(s.Points))
		for i, p := range s.Points {
			ok := p.Messages > 0
			v50[i] = value{at: p.At, v: p.P50.Seconds(), ok: ok}
			v99[i] = value{at: p.At, v: p.P99.Seconds(), ok: ok}
		}
		ps50 = append(ps50, plotted{name: s.Topic, other: other, vals: v50, say: sayLatency("p50")})
		ps99 = append(ps99, plotted{name: s.Topic, other: other, vals: v99, say: sayLatency("p99")})
	}
	return []chart{draw(p50, now, hist, ps50), draw(p99, now, hist, ps99)}
}

// latencySamples reads the samples recorded in the History before now, at
// most store.MaxLatencyRows of them, and returns them with the time they
// start from. When the History holds more, the span of the oldest page
// read says how long a stretch a page holds, and a second read takes the
// latest nine tenths of such a stretch: the newest figures matter most,
// and two reads of a page bound a view's cost.
func (h *Handler) latencySamples(ctx context.Context, now time.Time) ([]store.LatencySample, time.Time, error) {
	d := h.cfg.Database.Delivery()
	from := now.Add(-h.cfg.History)
	samples, err := d.Latency(ctx, from, store.MaxLatencyRows)
	if err != nil || len(samples) < store.MaxLatencyRows {
		return samples, from, err
	}
	span := samples[len(samples)-1].At.Sub(samples[0].At)
	if span <= 0 {
		return samples, from, nil // a page recorded at one time: nothing later fits
	}
	from = now.Add(-span * 9 / 10)
	samples, err = d.Latency(ctx, from, store.MaxLatencyRows)
	return samples, from, err
}

// sayLatency says a quantile's newest value: "p99 120ms".
func sayLatency(q string) func(float64) string {
	return func(v float64) string {
		d := time.Duration(v * float64(time.Second))
		if d < 10*time.Second {
			return q + " " + d.Round(time.Millisecond).String()
		}
		return q + " " + d.Round(100*time.Millisecond).String()
	}
}

// latencyStep is the stretch of time a point of the latency charts sums:
// History/latencyPoints, or the samples' median period if longer (a point
// shorter than the consumers' flushes would be a gap between two), at
// most a quarter of History.
func latencyStep(samples []store.LatencySample, hist time.Duration) time.Duration {
	periods := make([]time.Duration, len(samples))
	for i, s := range samples {
		periods[i] = s.Period
	}
	slices.Sort(periods)
	step := hist / latencyPoints
	if len(periods) > 0 {
		step = max(step, periods[len(periods)/2])
	}
	return max(min(step, hist/4), time.Millisecond)
}

// boundTopics returns samples with the topics past trendTopics, those
// with the fewest messages, renamed metrics.OtherTopics, so that the charts
// draw at most trendTopics lines and the rest as one.
func boundTopics(samples []store.LatencySample) []store.LatencySample {
	msgs := map[string]int64{}
	for _, s := range samples {
		msgs[s.Topic] += s.Messages
	}
	if len(msgs) <= trendTopics {
		return samples
	}
	names := make([]string, 0, len(msgs))
	for n := range msgs {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(msgs[b], msgs[a]), cmp.Compare(a, b)) })
	kept := map[string]bool{}
	for _, n := range names[:trendTopics] {
		kept[n] = true
	}
	out := slices.Clone(samples)
	for i := range out {
		if !kept[out[i].Topic] {
			out[i].Topic = metrics.OtherTopics
		}
	}
	return out
}
