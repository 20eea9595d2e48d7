package postgres

import (
	"sync"
	"time"
)

// A claim scans the outbox's primary key from a floor (see Claiming in the
// package documentation). The floor must stay at or below every row a claim
// may still have to take, or a key's older row would be passed over while
// its newer one is claimed. Rows appear in id order except for two kinds:
//
//   - rows of a transaction still open (ids are allocated at insert, so a
//     row becomes pending at its commit, below rows committed meanwhile),
//     and
//   - dead letters replayed under their old id.
//
// Each claim returns the smallest pending id at or above its floor, the
// xmin of the snapshot of its statement (taken before the claim reads
// anything: every transaction with a smaller xid has ended), and its own
// xid when it wrote (a lease, or expired leases dropped), assigned after
// that snapshot. The floor rises from what a claim c returned only once
// the transactions that may have inserted rows below it have ended: c may
// raise it to the smaller of its own smallest pending id and that of an
// earlier claim m0, where m0 had returned before a claim m1 began whose
// xid is at or below c's xmin. A transaction open at c has an xid above
// m1's, so it got its xid after m1's snapshot and allocated its ids after
// m0 read its smallest pending id (or the sequence, when nothing was
// pending): above it. The transactions open at m1's snapshot have xids
// below m1's, so they have all ended by c, and their rows are pending rows
// that c saw (its own floor was safe), or gone.
//
// A claim that wrote nothing (an empty outbox, no lease to drop) has no
// xid; so that the floor can rise then too, a claim takes one (one write
// of the commit's record) when the store has had none for xidEvery, or
// has no floor yet.
//
// A transaction that writes and stays open for long anywhere on the server
// would hold the floor where it was, and claims would scan every row
// published since: a claim m1 older than maxHold counts as ended for the
// rule above, so a transaction open for more than maxHold after inserting
// rows may have them published after later rows of their keys. Read-only
// transactions have no xid and hold nothing.
//
// The floor, the marks' xids and the sequence they were read against are
// one server's. Another server (a standby promoted in a failover: its
// sequence resumes from what reached it, below ids the old primary gave
// to transactions it lost; its xids may repeat the old one's) starts the
// floor afresh: a claim that finds the server's start time changed has
// made a full pass (see claimSQL), and the marks before it are dropped.
//
// A full pass (floor 0) now and then finds replayed dead letters (and any
// row a floor held no longer than maxHold passed): every second while full
// passes are cheap, less often as they grow dear (dead rows that vacuum
// cannot remove yet), so that they take at most 1/fullPassShare of the
// time, but at least every maxFullPass.
const (
	maxHold       = 30 * time.Second
	minFullPass   = time.Second
	maxFullPass   = 5 * time.Minute
	fullPassShare = 500
	fullPass      = int64(0)
	maxMarks      = 4096
	xidEvery      = time.Second
)

// scanFloor tracks the floor of one Store's claims.
type scanFloor struct {
	mu       sync.Mutex
	marks    []claimMark // recent claims, in the order they returned
	safe     int64       // the floor: no row a claim may take is below it
	nextFull time.Time   // zero: the next claim makes a full pass
	lastXid  time.Time   // when the last claim with an xid began (real clock)
	server   time.Time   // the start time of the server the floor is of
}

// claimMark is what one claim returned, and when it ran: began and ended
// on the real clock (they order claims), at on the store's.
type claimMark struct {
	began, ended time.Time
	at           time.Time
	xmin         int64 // its statement's snapshot's
	xid          int64 // its own, if it wrote; else 0
	minPending   int64
	server       time.Time // the start time of the server it ran on
}

// floor returns the id a claim starting at now (the store's clock) scans
// from, 0 for a full pass, and the start time of the server it is of: on
// another server the claim makes a full pass.
func (f *scanFloor) floor(now time.Time) (int64, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.safe == 0 || !now.Before(f.nextFull) {
		return fullPass, f.server
	}
	return f.safe, f.server
}

// needXid reports whether a claim beginning at began (the real clock)
// should take an xid even if it writes nothing.
func (f *scanFloor) needXid(began time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.safe == 0 || began.Sub(f.lastXid) >= xidEvery
}

// note records a claim that scanned from floor and returned c, and how long
// it took, and raises the floor where the rule above allows.
func (f *scanFloor) note(floor int64, c claimMark) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !c.server.Equal(f.server) { // another server: c made a full pass there
		f.marks, f.safe, f.nextFull, f.lastXid, f.server = nil, 0, time.Time{}, time.Time{}, c.server
		floor = fullPass
	}
	if floor == fullPass {
		took := c.ended.Sub(c.began)
		f.nextFull = c.at.Add(min(max(took*fullPassShare, minFullPass), maxFullPass))
	}
	if c.xid != 0 && c.began.After(f.lastXid) {
		f.lastXid = c.began
	}
	if c.minPending < f.safe {
		f.safe = c.minPending // a full pass found a row below: a replayed dead letter
	}
	for i := len(f.marks) - 1; i > 0; i-- {
		m1 := f.marks[i]
		if (m1.xid == 0 || m1.xid > c.xmin) && m1.at.After(c.at.Add(-maxHold)) {
			continue // a transaction open at m1 may still commit rows below
		}
		for j := i - 1; j >= 0; j-- {
			if m0 := f.marks[j]; m0.ended.Before(m1.began) {
				f.safe = max(f.safe, min(c.minPending, m0.minPending))
				f.marks = f.marks[j:] // later claims pick this m0 or a newer one
				break
			}
		}
		break
	}
	if len(f.marks) == maxMarks { // thin out, keeping the span (and maxHold) in view
		kept := f.marks[:0]
		for i := 1; i < len(f.marks); i += 2 {
			kept = append(kept, f.marks[i])
		}
		f.marks = kept
	}
	f.marks = append(f.marks, c)
}
