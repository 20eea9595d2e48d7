package postgres

import (
	"testing"
	"time"
)

// floorClaims drives a scanFloor with claims one after another, a
// millisecond apart on both clocks.
type floorClaims struct {
	f   scanFloor
	now time.Time
}

// claim runs a claim that returns minPending under a snapshot of xmin and
// its own xid (0: it wrote nothing), and returns the floor it scanned from.
func (c *floorClaims) claim(xmin, xid, minPending int64) int64 {
	floor, _ := c.f.floor(c.now)
	began := c.now
	c.now = c.now.Add(time.Millisecond)
	c.f.note(floor, claimMark{began: began, ended: c.now, at: began, xmin: xmin, xid: xid, minPending: minPending})
	c.now = c.now.Add(time.Millisecond)
	return floor
}

func TestScanFloorWaitsForTheTransactionsOpenBeforeIt(t *testing.T) {
	c := &floorClaims{now: time.Unix(1_000_000, 0)}
	if got := c.claim(100, 101, 500); got != fullPass {
		t.Fatalf("first claim scans from %d, want a full pass", got)
	}
	c.f.nextFull = c.now.Add(time.Hour) // no more full passes for now
	// Transaction 100 stays open: it may hold rows below 500.
	for range 5 {
		if got := c.claim(100, 105, 600); got != fullPass {
			t.Fatalf("floor %d while the transaction open at every claim runs, want a full pass", got)
		}
	}
	// It ended before the next claim's snapshot: that claim (a full pass,
	// which would have seen its rows) raises the floor to the smallest
	// pending id it and the claim before the last one saw.
	if got := c.claim(105, 106, 600); got != fullPass {
		t.Fatalf("floor %d, want a full pass still", got)
	}
	c.f.nextFull = c.now.Add(time.Hour)
	for _, want := range []struct{ xmin, floor, minPending int64 }{{106, 600, 700}, {107, 600, 700}, {108, 600, 800}, {109, 700, 800}} {
		if got := c.claim(want.xmin, want.xmin+1, want.minPending); got != want.floor {
			t.Fatalf("claim with xmin %d: floor %d, want %d", want.xmin, got, want.floor)
		}
	}
	// A full pass that finds a row below the floor (a replayed dead letter)
	// lowers it at once.
	c.f.nextFull = c.now
	if got := c.claim(110, 111, 50); got != fullPass {
		t.Fatalf("floor %d when the full pass is due, want 0", got)
	}
	c.f.nextFull = c.now.Add(time.Hour)
	if got := c.claim(111, 112, 50); got != 50 {
		t.Fatalf("floor %d after a full pass found id 50, want 50", got)
	}
}

// A transaction that stays open holds the floor for maxHold; past that the
// floor rises as if it had ended (rows it commits then may be published
// after later rows of their keys).
func TestScanFloorHoldsForAnOpenTransactionAtMostMaxHold(t *testing.T) {
	c := &floorClaims{now: time.Unix(1_000_000, 0)}
	c.claim(100, 101, 500)
	c.claim(100, 102, 600)
	c.claim(100, 103, 700)
	c.now = c.now.Add(maxHold / 2)
	c.claim(100, 104, 800)
	if c.f.safe != 0 {
		t.Fatalf("floor raised to %d while transaction 100, open at every claim, is open for less than maxHold", c.f.safe)
	}
	c.now = c.now.Add(maxHold)
	c.claim(100, 105, 900)
	if c.f.safe != 700 {
		t.Fatalf("floor %d once the claims transaction 100 held are older than maxHold, want 700", c.f.safe)
	}
}

// Full passes come every second while cheap, less often as they grow dear.
func TestScanFloorFullPassSchedule(t *testing.T) {
	var f scanFloor
	t0 := time.Unix(1_000_000, 0)
	claim := func(floor int64, at time.Duration, took time.Duration) {
		began := t0.Add(at)
		f.note(floor, claimMark{began: began, ended: began.Add(took), at: began, xmin: 1, xid: 1, minPending: 10})
	}
	claim(fullPass, 0, time.Millisecond)
	claim(fullPass, 10*time.Millisecond, time.Millisecond)
	claim(fullPass, 20*time.Millisecond, time.Millisecond)
	if got, _ := f.floor(t0.Add(500 * time.Millisecond)); got != 10 {
		t.Fatalf("floor %d, want 10", got)
	}
	if got, _ := f.floor(t0.Add(1100 * time.Millisecond)); got != fullPass {
		t.Fatalf("floor %d a second after a cheap full pass, want the next one", got)
	}
	claim(fullPass, 1100*time.Millisecond, 400*time.Millisecond) // dear: the next in 200 s
	if got, _ := f.floor(t0.Add(100 * time.Second)); got != 10 {
		t.Fatalf("floor %d 99 s after a 0.4 s full pass, want 10", got)
	}
	if got, _ := f.floor(t0.Add(202 * time.Second)); got != fullPass {
		t.Fatalf("floor %d 201 s after a 0.4 s full pass, want the next full pass", got)
	}
}

// A store takes an xid with its claims until it has a floor, then at most
// every xidEvery.
func TestScanFloorAsksForAnXid(t *testing.T) {
	c := &floorClaims{now: time.Unix(1_000_000, 0)}
	if !c.f.needXid(c.now) {
		t.Fatal("a store without a floor does not ask for an xid")
	}
	c.claim(100, 101, 500)
	c.claim(101, 102, 500)
	c.claim(102, 103, 500)
	if c.f.safe != 500 {
		t.Fatalf("floor %d, want 500", c.f.safe)
	}
	if c.f.needXid(c.now) {
		t.Fatal("a claim right after one with an xid asks for another")
	}
	if !c.f.needXid(c.now.Add(xidEvery)) {
		t.Fatalf("no xid asked for %s after the last", xidEvery)
	}
}

// A claim on another server (a standby promoted in a failover) made a full
// pass there: the floor learned from the old server's ids and xids is
// dropped, and the floor rises again from the new server's claims alone.
func TestScanFloorStartsAfreshOnAnotherServer(t *testing.T) {
	c := &floorClaims{now: time.Unix(1_000_000, 0)}
	old := time.Unix(500, 0)
	c.f.server = old
	for _, xmin := range []int64{100, 101, 102, 103} {
		mark := claimMark{xmin: xmin, xid: xmin + 1, minPending: 900, server: old}
		floor, _ := c.f.floor(c.now)
		mark.began, mark.at, mark.ended = c.now, c.now, c.now.Add(time.Millisecond)
		c.f.note(floor, mark)
		c.now = c.now.Add(2 * time.Millisecond)
	}
	c.f.nextFull = c.now.Add(time.Hour)
	floor, server := c.f.floor(c.now)
	if floor != 900 || !server.Equal(old) {
		t.Fatalf("floor %d of the server started at %v, want 900 of %v", floor, server, old)
	}
	// The standby, promoted: its ids resume at 850, its xids at 90. The
	// claim sent with the old floor made a full pass there (claimSQL).
	promoted := time.Unix(600, 0)
	c.f.note(floor, claimMark{began: c.now, at: c.now, ended: c.now.Add(time.Millisecond), xmin: 90, xid: 91, minPending: 850, server: promoted})
	c.now = c.now.Add(2 * time.Millisecond)
	if floor, server := c.f.floor(c.now); floor != fullPass || !server.Equal(promoted) {
		t.Fatalf("floor %d of %v after the failover, want a full pass on %v", floor, server, promoted)
	}
	if len(c.f.marks) != 1 || !c.f.needXid(c.now) {
		t.Fatalf("%d marks kept, xid asked for: %v; want the new server's claim alone, and an xid", len(c.f.marks), c.f.needXid(c.now))
	}
}
