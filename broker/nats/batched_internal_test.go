package nats

import (
	"fmt"
	"testing"
	"time"
)

// batched splits a call's runs where batches (32 round trips each: a
// batch's 25.6 ms, weighed a quarter above, against a measured round trip
// of 1 ms) and
// rounds (the longest run left) cost least together: a few long runs as
// batches, many medium ones in rounds.
func TestBatchedSplitsWhereCostIsLeast(t *testing.T) {
	p := &Publisher{}
	p.batchTime.avg, p.rtt.avg = 25600*time.Microsecond, time.Millisecond // 32 round trips, weighed
	runsOf := func(lengths ...int) [][]int {
		var runs [][]int
		for _, n := range lengths {
			runs = append(runs, make([]int, n))
		}
		return runs
	}
	repeat := func(n, length int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = length
		}
		return out
	}
	for _, c := range []struct {
		candidates []int
		short      int // the longest run already going in rounds
		batched    int
	}{
		{[]int{1000}, 1, 1},     // one hot key: one batch, not 1,000 round trips
		{repeat(2, 500), 1, 2},  // 64 against 500
		{repeat(5, 200), 1, 5},  // 160 against 200
		{repeat(7, 140), 1, 0},  // 224 against 140
		{repeat(10, 100), 1, 0}, // 320 against 100
		{repeat(500, 2), 1, 0},  // two rounds, not 500 batches
		{[]int{600, 200, 40, 2}, 1, 3},
		{[]int{600, 200, 20, 2}, 1, 2},
		{[]int{40}, 1, 1},   // 32 + 1 against 40
		{[]int{30}, 1, 0},   // 32 + 1 against 30
		{[]int{100}, 90, 0}, // the rounds take 90 anyway
	} {
		t.Run(fmt.Sprint(c.candidates[:min(len(c.candidates), 4)], len(c.candidates), c.short), func(t *testing.T) {
			batch, rounds := p.batched(runsOf(c.candidates...), runsOf(c.short))
			if len(batch) != c.batched || len(batch)+len(rounds) != len(c.candidates)+1 {
				t.Fatalf("%d batched, %d in rounds; want %d batched", len(batch), len(rounds), c.batched)
			}
		})
	}
}

// The split follows the round trips and batch times the Publisher
// measures: 10 keys of 100 messages go in 100 rounds to a nearby server (a
// batch of 4 ms, weighed 5 ms, is worth 50 round trips of 0.1 ms) and as
// 10 batches to a distant one, or an R3 stream (5 against 1 ms: 50 round
// trips' worth of batches against 100), unless its batches take 12 ms.
func TestBatchedFollowsTheRoundTrip(t *testing.T) {
	p := &Publisher{}
	p.batching.init(DefaultMaxBatches, 4*time.Millisecond, false)
	runs := func() [][]int {
		out := make([][]int, 10)
		for i := range out {
			out[i] = make([]int, 100)
		}
		return out
	}
	for _, c := range []struct {
		rtt, batch time.Duration
		batched    int
	}{
		{100 * time.Microsecond, 4 * time.Millisecond, 0},
		{time.Millisecond, 4 * time.Millisecond, 10},
		{time.Millisecond, 12 * time.Millisecond, 0},
	} {
		for range 64 {
			p.rtt.note(c.rtt)
			p.batchTime.note(c.batch)
		}
		if got := p.rtt.get(); got < c.rtt*9/10 || got > c.rtt*11/10 {
			t.Fatalf("round trip measured as %v after 64 rounds of %v", got, c.rtt)
		}
		if batch, _ := p.batched(runs(), nil); len(batch) != c.batched {
			t.Errorf("round trip %v: %d of 10 runs of 100 batched, want %d", c.rtt, len(batch), c.batched)
		}
	}
}
