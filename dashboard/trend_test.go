package dashboard

import (
	"fmt"
	"testing"
	"time"

	"github.com/courier-go/courier/store"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// at is a reading at t0+d whose topic "orders" has n pending.
func at(d time.Duration, n int64) reading {
	return reading{at: t0.Add(d), topics: []topicReading{{topic: "orders", pending: n}}}
}

// held returns the times (since t0) and orders' pending of g's readings.
func held(g *ring) string {
	s := ""
	for _, r := range g.readings() {
		t, _ := r.topic("orders")
		s += fmt.Sprintf("%s=%d ", r.at.Sub(t0), t.pending)
	}
	return s
}

func TestRingCapacity(t *testing.T) {
	g := newRing(10*time.Second, 40*time.Second) // 4 readings
	for i := range 7 {
		g.add(at(time.Duration(i)*10*time.Second, int64(i)))
	}
	// The ring is full after four; each one more overwrites the oldest.
	if got, want := held(g), "30s=3 40s=4 50s=5 1m0s=6 "; got != want {
		t.Fatalf("held %q, want %q", got, want)
	}
	if len(g.buf) != 4 {
		t.Fatalf("the buffer holds %d readings, want 4 (History/SampleEvery)", len(g.buf))
	}
}

func TestRingDropsOld(t *testing.T) {
	g := newRing(10*time.Second, time.Minute)
	g.add(at(0, 1))
	g.add(at(10*time.Second, 2))
	g.add(at(20*time.Second, 3))
	// A minute after the second: the first is older than History.
	g.add(at(70*time.Second, 4))
	if got, want := held(g), "10s=2 20s=3 1m10s=4 "; got != want {
		t.Fatalf("held %q, want %q", got, want)
	}
	// Long after: only the newest is left; the ring then grows again in
	// order, across the place it wrapped.
	g.add(at(10*time.Minute, 5))
	g.add(at(10*time.Minute+10*time.Second, 6))
	g.add(at(10*time.Minute+20*time.Second, 7))
	if got, want := held(g), "10m0s=5 10m10s=6 10m20s=7 "; got != want {
		t.Fatalf("held %q, want %q", got, want)
	}
	for i := range 5 {
		g.add(at(10*time.Minute+time.Duration(30+10*i)*time.Second, int64(8+i)))
	}
	if got, want := held(g), "10m20s=7 10m30s=8 10m40s=9 10m50s=10 11m0s=11 11m10s=12 "; got != want {
		t.Fatalf("held %q, want %q", got, want)
	}
	// The store's clock went back: the newer readings are dropped.
	g.add(at(10*time.Minute+45*time.Second, 13))
	if got, want := held(g), "10m20s=7 10m30s=8 10m40s=9 10m45s=13 "; got != want {
		t.Fatalf("after the clock went back, held %q, want %q", got, want)
	}
}

func TestRingReplacesCloseReadings(t *testing.T) {
	g := newRing(10*time.Second, time.Hour)
	g.add(at(0, 1))
	// A view 2s after Run's reading stands in for it, with the newer
	// value; Run's next reading, 10s after the first, is a point of its
	// own.
	g.add(at(2*time.Second, 2))
	g.add(at(10*time.Second, 3))
	if got, want := held(g), "2s=2 10s=3 "; got != want {
		t.Fatalf("held %q, want %q", got, want)
	}
	// Views every second replace the newest, but not beyond SampleEvery
	// from the first they replaced: the points stay SampleEvery apart.
	for s := 11; s <= 25; s++ {
		g.add(at(time.Duration(s)*time.Second, int64(s)))
	}
	if got, want := held(g), "2s=2 19s=19 25s=25 "; got != want {
		t.Fatalf("held %q, want %q", got, want)
	}
	// Exactly SampleEvery/2 after the newest is not closer than it.
	g.add(at(30*time.Second, 30))
	if got, want := held(g), "2s=2 19s=19 25s=25 30s=30 "; got != want {
		t.Fatalf("held %q, want %q", got, want)
	}
}

func TestReadingKeepsTheTopTopics(t *testing.T) {
	st := store.Status{Now: t0, Published: store.Count{N: 7}, Outbox: store.Stats{DeadLetters: 3},
		Consumers: []store.ConsumerStatus{{Consumer: "a", Parked: 2}, {Consumer: "b", Parked: 5}}}
	// Topics t00…t29, t<i> with i+1 pending, its oldest i minutes old;
	// and one with dead letters only.
	for i := range 30 {
		st.Topics = append(st.Topics, store.TopicStatus{Topic: fmt.Sprintf("t%02d", i), Pending: int64(i + 1), OldestPending: t0.Add(-time.Duration(i) * time.Minute)})
	}
	st.Topics = append(st.Topics, store.TopicStatus{Topic: "dead-only", DeadLetters: 4})
	r := readingOf(st)
	if len(r.topics) != trendTopics || r.topics[0].topic != "t29" || r.topics[trendTopics-1].topic != "t10" {
		t.Fatalf("kept %d topics, from %v to %v; want %d, from t29 to t10", len(r.topics), r.topics[0], r.topics[len(r.topics)-1], trendTopics)
	}
	// t00…t09 are summed: 1+…+10 pending, the oldest 9 minutes old.
	if r.other.pending != 55 || r.other.oldest != 9*time.Minute || !r.capped() {
		t.Fatalf("the others sum %d pending, their oldest %s; want 55 and 9m0s", r.other.pending, r.other.oldest)
	}
	if r.topics[0].oldest != 29*time.Minute || r.topics[0].pending != 30 {
		t.Fatalf("t29 read as %+v, want 30 pending, oldest 29m0s", r.topics[0])
	}
	if r.parked != 7 || r.dead != 3 || r.published.N != 7 {
		t.Fatalf("parked %d, dead %d, published %d; want 7, 3, 7", r.parked, r.dead, r.published.N)
	}
	// A topic it does not name is unknown in a capped reading, and has
	// nothing pending in one that is not.
	if _, ok := r.topic("t05"); ok {
		t.Fatal("t05, summed with the others, read as known")
	}
	if tr, ok := readingOf(store.Status{Now: t0}).topic("t05"); !ok || tr.pending != 0 {
		t.Fatalf("t05 in a reading of an empty outbox: %+v, %v; want 0 pending, known", tr, ok)
	}
}
