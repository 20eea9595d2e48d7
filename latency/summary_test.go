package latency_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/latency"
	"github.com/courier-go/courier/store"
)

// sample is consumer's sample of topic recorded at at, of n latencies of d.
func sample(consumer, topic string, at time.Time, n int, d time.Duration) store.LatencySample {
	var h latency.Histogram
	for range n {
		h.Observe(d)
	}
	s := h.Sample(consumer, topic, 10*time.Second)
	s.At = at
	return s
}

func TestSummarize(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	ss := []store.LatencySample{
		sample("billing", "orders", t0.Add(-time.Minute), 1000, time.Hour), // before the window
		sample("billing", "orders", t0, 98, 10*time.Millisecond),
		sample("billing", "orders", t0.Add(10*time.Second), 2, 2*time.Second),
		sample("shipping", "orders", t0.Add(10*time.Second), 5, -time.Second),
		sample("billing", "audit", t0.Add(20*time.Second), 1, 300*time.Millisecond),
	}
	got, err := latency.Summarize(ss, t0)
	testenv.Must(t, err, "summarize")
	type want struct {
		topic, consumer  string
		messages, skewed int64
		p50, p99         [2]time.Duration // ranges
	}
	ws := []want{
		{"audit", "billing", 1, 0, near(300 * time.Millisecond), near(300 * time.Millisecond)},
		{"orders", "billing", 100, 0, near(10 * time.Millisecond), near(2 * time.Second)},
		{"orders", "shipping", 5, 5, [2]time.Duration{0, time.Millisecond}, [2]time.Duration{0, time.Millisecond}},
	}
	if len(got) != len(ws) {
		t.Fatalf("summaries %+v, want %d", got, len(ws))
	}
	for i, w := range ws {
		g := got[i]
		if g.Topic != w.topic || g.Consumer != w.consumer || g.Messages != w.messages || g.Skewed != w.skewed ||
			g.P50 < w.p50[0] || g.P50 > w.p50[1] || g.P99 < w.p99[0] || g.P99 > w.p99[1] {
			t.Errorf("summary %d: %s/%s %d messages %d skewed p50 %s p99 %s; want %+v", i, g.Topic, g.Consumer, g.Messages, g.Skewed, g.P50, g.P99, w)
		}
	}

	// A sample of other bounds is left out, and said.
	bad := sample("billing", "orders", t0, 1, time.Second)
	bad.Buckets = make([]int64, latency.NumBuckets+1)
	got, err = latency.Summarize(append(ss, bad), t0)
	if err == nil || !strings.Contains(err.Error(), "more than the 134") || len(got) != 3 {
		t.Fatalf("a sample of more buckets: %v, %d summaries", err, len(got))
	}
	if got, err := latency.Summarize(nil, t0); err != nil || len(got) != 0 {
		t.Fatalf("no samples: %v, %v", got, err)
	}
}

func TestSeries(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	ss := []store.LatencySample{
		sample("billing", "orders", t0, 10, time.Second),                          // at from: before the first stretch
		sample("billing", "orders", t0.Add(time.Minute), 10, 10*time.Millisecond), // the end of the first
		sample("shipping", "orders", t0.Add(time.Minute), 10, 30*time.Millisecond),
		sample("billing", "orders", t0.Add(2*time.Minute+time.Second), 10, 100*time.Millisecond), // the third
		sample("billing", "payments", t0.Add(90*time.Second), 4, 5*time.Millisecond),
		sample("billing", "orders", t0.Add(10*time.Minute), 10, time.Second), // after the last
	}
	got, err := latency.Series(ss, t0, time.Minute, 3)
	testenv.Must(t, err, "series")
	if len(got) != 2 || got[0].Topic != "orders" || got[1].Topic != "payments" {
		t.Fatalf("series %+v, want orders and payments", got)
	}
	o := got[0].Points
	if len(o) != 3 || !o[0].At.Equal(t0.Add(time.Minute)) || !o[2].At.Equal(t0.Add(3*time.Minute)) {
		t.Fatalf("orders' points %+v", o)
	}
	if o[0].Messages != 20 || o[0].P50 < 9*time.Millisecond || o[0].P50 > 30*time.Millisecond || !in(o[0].P99, near(30*time.Millisecond)) {
		t.Errorf("first point %+v, want both consumers' 20 messages, p99 about 30ms", o[0])
	}
	if o[1].Messages != 0 || o[2].Messages != 10 || !in(o[2].P50, near(100*time.Millisecond)) {
		t.Errorf("points 2 and 3: %+v, %+v", o[1], o[2])
	}
	if p := got[1].Points; p[1].Messages != 4 || p[0].Messages != 0 {
		t.Errorf("payments' points %+v", p)
	}
	if got, _ := latency.Series(ss, t0, 0, 3); got != nil {
		t.Errorf("no step: %+v", got)
	}
}

// near is the range a quantile of latencies all d falls in: d's bucket.
func near(d time.Duration) [2]time.Duration {
	return [2]time.Duration{time.Duration(float64(d) / 1.13), time.Duration(float64(d) * 1.13)}
}

func in(d time.Duration, r [2]time.Duration) bool { return d >= r[0] && d <= r[1] }

// Read pages through a window's samples, each page from the last one's
// time, without taking a sample twice, and stops at most.
func TestRead(t *testing.T) {
	db := newSamples(t, nil)
	ctx := context.Background()
	var ss []store.LatencySample
	for i := range 5 {
		ss = append(ss, sample("billing", fmt.Sprintf("t%d", i), time.Time{}, 1, time.Millisecond))
	}
	testenv.Must(t, db.RecordLatency(ctx, ss), "record")
	testenv.Must(t, db.RecordLatency(ctx, ss[:2]), "record")
	got, full, err := latency.Read(ctx, db, time.Time{}, 0)
	if err != nil || full || len(got) != 7 {
		t.Fatalf("read: %d samples, full %t, %v; want 7", len(got), full, err)
	}
	got, full, err = latency.Read(ctx, db, time.Time{}, 3)
	if err != nil || !full || len(got) != 3 {
		t.Fatalf("read at most 3: %d samples, full %t, %v", len(got), full, err)
	}
}

// Past a page (store.MaxLatencyRows), Read asks again from the last
// sample's time and takes each sample once.
func TestReadPages(t *testing.T) {
	db := newSamples(t, nil)
	ctx := context.Background()
	n := store.MaxLatencyRows + 50
	for done := 0; done < n; {
		var ss []store.LatencySample
		for range min(1000, n-done) {
			ss = append(ss, sample("billing", fmt.Sprintf("t%d", done%7), time.Time{}, 1, time.Millisecond))
			done++
		}
		testenv.Must(t, db.RecordLatency(ctx, ss), "record")
	}
	got, full, err := latency.Read(ctx, db, time.Time{}, 10*store.MaxLatencyRows)
	if err != nil || full || len(got) != n {
		t.Fatalf("read: %d samples, full %t, %v; want %d", len(got), full, err, n)
	}
	seen := map[int64]bool{}
	for _, s := range got {
		if seen[s.ID] {
			t.Fatalf("sample %d read twice", s.ID)
		}
		seen[s.ID] = true
	}
}
