package postgres

import (
	"sync"
	"time"
)

// A claim scans the outbox's primary key from a floor (see Claiming in the
// package documentation). The floor must stay at or below every row a claim
// may still have to take. Rows appear in id order except for two kinds:
//
//   - rows of a transaction that commits well after it inserted them (ids are
//     allocated at insert), and
//   - dead letters replayed under their old id.
//
// Each claim returns the smallest pending id at or above the floor it was
// given; the floor is the smallest of those returned over the last
// lateCommit and the one before, so a row whose transaction commits within
// lateCommit of its insert is always above it. A full pass (floor 0) now and
// then finds the others: every second while full passes are cheap, less
// often as they grow dear (dead rows that vacuum cannot remove yet), so that
// they take at most 1/fullPassShare of the time, but at least every
// maxFullPass.
const (
	lateCommit    = 2 * time.Second
	bucketWidth   = 100 * time.Millisecond
	minFullPass   = time.Second
	maxFullPass   = 5 * time.Minute
	fullPassShare = 500
	fullPass      = int64(0)
)

// scanFloor tracks the floor of one Store's claims.
type scanFloor struct {
	mu       sync.Mutex
	buckets  []floorBucket // oldest first
	nextFull time.Time     // zero: the next claim makes a full pass
}

// floorBucket is the smallest pending id the claims that started within
// bucketWidth after start returned.
type floorBucket struct {
	start      time.Time
	minPending int64
}

// floor returns the id a claim starting at now scans from: 0 for a full
// pass.
func (f *scanFloor) floor(now time.Time) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	horizon := now.Add(-lateCommit)
	for len(f.buckets) >= 2 && !f.buckets[1].start.After(horizon) {
		f.buckets = f.buckets[1:]
	}
	if !now.Before(f.nextFull) || len(f.buckets) == 0 || f.buckets[0].start.After(horizon) {
		return fullPass
	}
	low := f.buckets[0].minPending
	for _, b := range f.buckets[1:] {
		low = min(low, b.minPending)
	}
	return low
}

// note records what a claim that started at start with the given floor
// returned, and how long it took.
func (f *scanFloor) note(start time.Time, floor, minPending int64, took time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if floor == fullPass {
		f.nextFull = start.Add(min(max(took*fullPassShare, minFullPass), maxFullPass))
	}
	if n := len(f.buckets); n > 0 && start.Before(f.buckets[n-1].start.Add(bucketWidth)) {
		f.buckets[n-1].minPending = min(f.buckets[n-1].minPending, minPending)
		return
	}
	f.buckets = append(f.buckets, floorBucket{start: start, minPending: minPending})
}
