// Package clocktest checks a dialect's stores against a clock the test
// controls (store.Clock): lease ends, retry delays, Idempotency-Key locks
// and expiries pass when the clock passes them, and not a microsecond
// before, without the test sleeping; inbox markers carry the clock's time.
//
// A dialect's test builds a clocked Driver with its WithClock and hands it
// to Run:
//
//	clocktest.Run(t, func(t *testing.T, c store.Clock) store.Driver[*sql.Tx] {
//		return sqlite.NewDriver(db).WithClock(c)
//	})
//
// Code that builds stores without a Driver sets the dialect's
// StoreConfig.Clock for the relay's store; the Driver hands out every other
// clocked store.
package clocktest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
)

// Clock is a clock that moves only when told to. Its Now is a store.Clock.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock at start, truncated to the microsecond (the
// precision every dialect stores).
func NewClock(start time.Time) *Clock {
	return &Clock{now: start.UTC().Truncate(time.Microsecond)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t.UTC()
}

// Add moves the clock forward by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Run runs the clock's checks, each on a fresh database: open returns a
// Driver on it, migrated, whose stores use c.
func Run[TTx any](t *testing.T, open func(t *testing.T, c store.Clock) store.Driver[TTx]) {
	t.Run("LeaseExpires", func(t *testing.T) { leaseExpires(t, open) })
	t.Run("RetryWaitsForItsDelay", func(t *testing.T) { retryWaits(t, open) })
	t.Run("KeyLockTimesOut", func(t *testing.T) { keyLockTimesOut(t, open) })
	t.Run("KeyExpires", func(t *testing.T) { keyExpires(t, open) })
	t.Run("MarkersAtTheClock", func(t *testing.T) { markersAtTheClock(t, open) })
}

// start is where the tests' clocks begin: an hour ahead of the real clock,
// so that a statement still reading the database's clock instead of the
// store's sees every lease and delay as long over, and fails the checks.
func start() time.Time { return time.Now().Add(time.Hour) }

// tick is the clock's resolution in the stores: one microsecond.
const tick = time.Microsecond

func write[TTx any](t *testing.T, d store.Driver[TTx], key string) {
	t.Helper()
	msg, err := courier.NewJSON("orders", key, map[string]string{"key": key})
	must(t, err, "message")
	w := outbox.New(d.Inserter(), outbox.Config{})
	must(t, d.InTx(context.Background(), func(tx TTx) error {
		return w.Write(context.Background(), tx, msg)
	}), "write")
}

// relayAt opens a database whose stores use a new Clock, writes a message
// of key "k" and returns the clock, the database's Driver and its relay
// store.
func relayAt[TTx any](t *testing.T, open func(*testing.T, store.Clock) store.Driver[TTx]) (*Clock, store.Driver[TTx], store.RelayStore) {
	t.Helper()
	clock := NewClock(start())
	d := open(t, clock.Now)
	s, err := d.RelayStore(context.Background(), store.RelayConfig{})
	must(t, err, "relay store")
	write(t, d, "k")
	return clock, d, s
}

func claim(t *testing.T, s store.RelayStore, owner string, lease time.Duration) store.Batch {
	t.Helper()
	b, err := s.Claim(context.Background(), owner, 10, lease)
	must(t, err, "claim by "+owner)
	return b
}

func stats(t *testing.T, s store.RelayStore) store.Stats {
	t.Helper()
	st, err := s.Stats(context.Background())
	must(t, err, "stats")
	return st
}

// leaseExpires: another owner takes a lease's rows over once the clock
// reaches the lease's end, not before; the first owner's late completion
// then changes nothing.
func leaseExpires[TTx any](t *testing.T, open func(*testing.T, store.Clock) store.Driver[TTx]) {
	ctx := context.Background()
	clock, _, s := relayAt(t, open)
	const lease = 30 * time.Second
	t0 := clock.Now()
	a := claim(t, s, "a", lease)
	if len(a.Records) != 1 {
		t.Fatalf("a claimed %d rows, want 1", len(a.Records))
	}
	if st := stats(t, s); st.Leased != 1 || !st.Now.Equal(t0) {
		t.Fatalf("stats during the lease: leased %d, now %s; want 1, %s", st.Leased, st.Now, t0)
	}
	clock.Set(t0.Add(lease - tick))
	if b := claim(t, s, "b", lease); len(b.Records) != 0 {
		t.Fatalf("b claimed %d rows a microsecond before a's lease ended", len(b.Records))
	}
	clock.Set(t0.Add(lease))
	if st := stats(t, s); st.Leased != 0 || st.Pending != 1 {
		t.Fatalf("stats once the lease ended: leased %d, pending %d; want 0, 1", st.Leased, st.Pending)
	}
	b := claim(t, s, "b", lease)
	if len(b.Records) != 1 || b.Records[0].Seq != a.Records[0].Seq {
		t.Fatalf("b claimed %+v once a's lease ended, want a's row", b.Records)
	}
	// a comes back late: its lease is over, so its outcome is ignored.
	must(t, s.Complete(ctx, "a", a.Lease, store.Outcome{Published: []int64{a.Records[0].Seq}}), "a's late completion")
	if st := stats(t, s); st.Pending != 1 || st.Leased != 1 {
		t.Fatalf("after a's late completion: pending %d, leased %d; want 1, 1 (b's)", st.Pending, st.Leased)
	}
	must(t, s.Complete(ctx, "b", b.Lease, store.Outcome{Published: []int64{b.Records[0].Seq}}), "b's completion")
	if st := stats(t, s); st.Pending != 0 {
		t.Fatalf("after b's completion: pending %d, want 0", st.Pending)
	}
}

// retryWaits: a row handed back for a retry, and the rows of its key, are
// claimable when the clock reaches the retry time, not before.
func retryWaits[TTx any](t *testing.T, open func(*testing.T, store.Clock) store.Driver[TTx]) {
	ctx := context.Background()
	clock, d, s := relayAt(t, open)
	b := claim(t, s, "a", time.Minute)
	if len(b.Records) != 1 {
		t.Fatalf("claimed %d rows, want 1", len(b.Records))
	}
	const delay = 5 * time.Second
	seq := b.Records[0].Seq
	t0 := clock.Now()
	must(t, s.Complete(ctx, "a", b.Lease, store.Outcome{Retry: []store.Failure{
		{Seq: seq, Error: "broker said no", Delay: delay, Counted: true},
	}}), "complete with a retry")
	write(t, d, "k") // a later row of the key waits too
	if st := stats(t, s); st.InBackoff != 1 {
		t.Fatalf("in backoff: %d, want 1", st.InBackoff)
	}
	if b := claim(t, s, "a", time.Minute); len(b.Records) != 0 {
		t.Fatalf("claimed %d rows right after the failure", len(b.Records))
	}
	clock.Set(t0.Add(delay - tick))
	if b := claim(t, s, "a", time.Minute); len(b.Records) != 0 {
		t.Fatalf("claimed %d rows a microsecond before the retry time", len(b.Records))
	}
	clock.Set(t0.Add(delay))
	if st := stats(t, s); st.InBackoff != 0 {
		t.Fatalf("in backoff at the retry time: %d, want 0", st.InBackoff)
	}
	b = claim(t, s, "a", time.Minute)
	if len(b.Records) != 1 || b.Records[0].Seq != seq || b.Records[0].Attempts != 1 {
		t.Fatalf("at the retry time claimed %+v, want row %d alone with 1 attempt", b.Records, seq)
	}
}

// lockFor and retain are the key checks' lock timeout and retention.
const lockFor, retain = 10 * time.Second, time.Hour

// keysAt opens a database whose stores use a new Clock and returns the
// clock, the database's Driver and its key store.
func keysAt[TTx any](t *testing.T, open func(*testing.T, store.Clock) store.Driver[TTx]) (*Clock, store.Driver[TTx], store.Idempotency[TTx]) {
	t.Helper()
	clock := NewClock(start())
	d := open(t, clock.Now)
	return clock, d, d.Idempotency()
}

// keyLockTimesOut: a request takes over an in-flight key when the clock
// reaches the first owner's lock end, not before, and the first owner can
// no longer complete it.
func keyLockTimesOut[TTx any](t *testing.T, open func(*testing.T, store.Clock) store.Driver[TTx]) {
	ctx := context.Background()
	clock, d, keys := keysAt(t, open)
	claimAs := func(owner uuid.UUID) (store.KeyRecord, bool) {
		t.Helper()
		rec, mine, err := keys.Claim(ctx, store.KeyClaim{Scope: "s", Key: "k", Fingerprint: []byte("f"),
			Owner: owner, LockFor: lockFor, Retain: retain})
		must(t, err, "claim key")
		return rec, mine
	}
	first, second := uuid.New(), uuid.New()
	t0 := clock.Now()
	if _, mine := claimAs(first); !mine {
		t.Fatal("the first claim did not get the key")
	}
	clock.Set(t0.Add(lockFor - tick))
	rec, mine := claimAs(second)
	if mine || rec.Done {
		t.Fatalf("a microsecond before the lock's end: mine %v, done %v; want the key in flight", mine, rec.Done)
	}
	if !rec.LockedUntil.Equal(t0.Add(lockFor)) {
		t.Fatalf("locked until %s, want %s", rec.LockedUntil, t0.Add(lockFor))
	}
	clock.Set(t0.Add(lockFor))
	if _, mine := claimAs(second); !mine {
		t.Fatal("the lock ended and the second request did not take the key over")
	}
	complete := func(owner uuid.UUID) bool {
		t.Helper()
		var ok bool
		must(t, d.InTx(ctx, func(tx TTx) error {
			var err error
			ok, err = keys.Complete(ctx, tx, "s", "k", owner, store.StoredResponse{Status: 201, Body: []byte("ok")})
			return err
		}), "complete key")
		return ok
	}
	if complete(first) {
		t.Fatal("the first owner completed a key taken over from it")
	}
	if !complete(second) {
		t.Fatal("the second owner could not complete its key")
	}
	if rec, mine := claimAs(uuid.New()); mine || !rec.Done || rec.Response.Status != 201 {
		t.Fatalf("after completion: %+v, mine %v; want the stored response", rec, mine)
	}
}

// keyExpires: a completed key is replayed until the clock reaches its
// expiry; then a request runs anew, and DeleteExpired removes it.
func keyExpires[TTx any](t *testing.T, open func(*testing.T, store.Clock) store.Driver[TTx]) {
	ctx := context.Background()
	clock, d, keys := keysAt(t, open)
	// run claims key and, when it gets it, completes it; it reports whether
	// it got the key.
	run := func(key string) bool {
		t.Helper()
		owner := uuid.New()
		rec, mine, err := keys.Claim(ctx, store.KeyClaim{Scope: "s", Key: key, Fingerprint: []byte("f"),
			Owner: owner, LockFor: lockFor, Retain: retain})
		must(t, err, "claim key")
		if !mine {
			if !rec.Done {
				t.Fatalf("%s: in flight, want done", key)
			}
			return false
		}
		must(t, d.InTx(ctx, func(tx TTx) error {
			ok, err := keys.Complete(ctx, tx, "s", key, owner, store.StoredResponse{Status: 200})
			if err == nil && !ok {
				err = errors.New("lost the key")
			}
			return err
		}), "complete key")
		return true
	}
	t0 := clock.Now()
	for _, key := range []string{"replaced", "deleted"} {
		if !run(key) {
			t.Fatalf("%s: the first request did not get the key", key)
		}
	}
	clock.Set(t0.Add(retain - tick))
	if run("replaced") {
		t.Fatal("a microsecond before expiry, a request ran anew")
	}
	if n, err := keys.DeleteExpired(ctx, 10); err != nil || n != 0 {
		t.Fatalf("a microsecond before expiry, DeleteExpired removed %d, %v; want 0", n, err)
	}
	clock.Set(t0.Add(retain))
	if !run("replaced") {
		t.Fatal("at expiry, a request did not run anew")
	}
	if n, err := keys.DeleteExpired(ctx, 10); err != nil || n != 1 {
		t.Fatalf("at expiry, DeleteExpired removed %d, %v; want 1 (the key not run anew)", n, err)
	}
	if !run("deleted") {
		t.Fatal("after DeleteExpired, a request did not run anew")
	}
}

// markersAtTheClock: inbox markers are recorded at the clock's time, so
// retention (DeleteMarkers) removes the ones from before a cut on the
// clock and keeps the others.
func markersAtTheClock[TTx any](t *testing.T, open func(*testing.T, store.Clock) store.Driver[TTx]) {
	ctx := context.Background()
	clock := NewClock(start())
	d := open(t, clock.Now)
	ib := d.Inbox()
	mark := func(id uuid.UUID) bool {
		t.Helper()
		var fresh bool
		must(t, ib.InTx(ctx, func(tx TTx) error {
			var err error
			fresh, err = ib.Mark(ctx, tx, "c", id)
			return err
		}), "mark")
		return fresh
	}
	old, recent := uuid.New(), uuid.New()
	mark(old)
	clock.Add(time.Second)
	mark(recent)
	n, err := d.ConsumerStore().DeleteMarkers(ctx, clock.Now(), 10)
	must(t, err, "delete markers")
	if n != 1 {
		t.Fatalf("DeleteMarkers before the clock's time removed %d markers, want 1 (the older one)", n)
	}
	if !mark(old) || mark(recent) {
		t.Fatal("retention removed the wrong marker")
	}
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
