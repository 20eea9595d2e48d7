package postgres

import (
	"testing"
	"time"
)

func TestScanFloor(t *testing.T) {
	var f scanFloor
	t0 := time.Unix(1_000_000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	if got := f.floor(t0); got != fullPass {
		t.Fatalf("first claim scans from %d, want a full pass", got)
	}
	f.note(t0, fullPass, 500, 100*time.Millisecond) // the next full pass in 50 s
	if got := f.floor(at(500 * time.Millisecond)); got != fullPass {
		t.Fatalf("within lateCommit of the first claim: floor %d, want a full pass (rows inserted before it may still commit)", got)
	}
	f.note(at(500*time.Millisecond), fullPass, 600, time.Millisecond) // cheap: the next full pass in a second
	if got := f.floor(at(1600 * time.Millisecond)); got != fullPass {
		t.Fatalf("a second after a cheap full pass: floor %d, want the next full pass", got)
	}
	f.note(at(1600*time.Millisecond), fullPass, 700, 100*time.Millisecond) // dear again: next in 50 s
	f.note(at(1900*time.Millisecond), fullPass, 800, time.Millisecond)
	f.nextFull = at(time.Minute)
	if got := f.floor(at(2100 * time.Millisecond)); got != 500 {
		t.Fatalf("floor %d, want 500: the smallest since the newest claim older than lateCommit", got)
	}
	f.note(at(2100*time.Millisecond), 500, 900, time.Millisecond)
	if got := f.floor(at(3700 * time.Millisecond)); got != 700 {
		t.Fatalf("floor %d, want 700 once the claims that saw 500 and 600 are older than needed", got)
	}
	f.note(at(3700*time.Millisecond), 700, 650, time.Millisecond) // a row below the last minimum showed up
	if got := f.floor(at(3800 * time.Millisecond)); got != 650 {
		t.Fatalf("floor %d, want 650: a smaller pending id lowers the floor at once", got)
	}
	if got := f.floor(at(time.Minute)); got != fullPass {
		t.Fatalf("floor %d when the full pass is due, want 0", got)
	}

	// A dear full pass is made less often: 0.4 s → 200 s later.
	var g scanFloor
	g.note(t0, fullPass, 10, 400*time.Millisecond)
	g.note(at(3*time.Second), 10, 10, time.Millisecond)
	if got := g.floor(at(3100 * time.Millisecond)); got != 10 {
		t.Fatalf("floor %d after a dear full pass, want 10", got)
	}
	if got := g.floor(at(201 * time.Second)); got != fullPass {
		t.Fatalf("floor %d 201 s after a 0.4 s full pass, want the next full pass", got)
	}
}
