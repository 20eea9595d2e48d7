package nats

import (
	"fmt"
	"testing"
)

// batched splits a call's runs where batches (32 round trips each) and
// rounds (the longest run left) cost least together: a few long runs as
// batches, many medium ones in rounds.
func TestBatchedSplitsWhereCostIsLeast(t *testing.T) {
	p := &Publisher{}
	p.batchCost = DefaultBatchCost
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
