package storetest

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// tick is the clock's resolution in the stores: one microsecond.
const tick = time.Microsecond

// stopClock stops db's clock an hour ahead of the real time and returns
// the time it reads: a statement that still reads the database's clock
// instead of the store's sees every lease and delay as long over, and fails
// the checks.
func (db *relayDB[TTx]) stopClock() time.Time {
	db.clock.Set(time.Now().Add(time.Hour))
	return db.clock.Now()
}

// Another owner takes a lease's rows over once the clock reaches the
// lease's end, not a microsecond before; the first owner's late completion
// then changes nothing, and Stats reads the store's clock.
func testLeaseEndsOnTime[TTx any](t *testing.T, db *relayDB[TTx]) {
	t0 := db.stopClock()
	st := db.newStore(t, false)
	db.write(t, courier.NewMessage("orders", "k", "T", []byte("1")))
	const lease = 30 * time.Second
	a := claim(t, st, "a", 10, lease)
	if len(a.Records) != 1 {
		t.Fatalf("a claimed %d rows, want 1", len(a.Records))
	}
	if s := stats(t, st); s.Leased != 1 || !s.Now.Equal(t0) {
		t.Fatalf("stats during the lease: leased %d, now %s; want 1, %s (the store's clock)", s.Leased, s.Now, t0)
	}
	db.clock.Set(t0.Add(lease - tick))
	if b := claim(t, st, "b", 10, lease); len(b.Records) != 0 {
		t.Fatalf("b claimed %d rows a microsecond before a's lease ended", len(b.Records))
	}
	db.clock.Set(t0.Add(lease))
	if s := stats(t, st); s.Leased != 0 || s.Pending != 1 {
		t.Fatalf("stats once the lease ended: leased %d, pending %d; want 0, 1", s.Leased, s.Pending)
	}
	b := claim(t, st, "b", 10, lease)
	if len(b.Records) != 1 || b.Records[0].Seq != a.Records[0].Seq {
		t.Fatalf("b claimed %v once a's lease ended, want a's row %d", seqs(b.Records), a.Records[0].Seq)
	}
	complete(t, st, "a", a, store.Outcome{Published: seqs(a.Records)}) // too late: ignored
	if s := stats(t, st); s.Pending != 1 || s.Leased != 1 {
		t.Fatalf("after a's late completion: pending %d, leased %d; want 1, 1 (b's)", s.Pending, s.Leased)
	}
	db.clock.Advance(lease)
	complete(t, st, "b", b, store.Outcome{Published: seqs(b.Records)}) // its lease has just ended: ignored
	if s := stats(t, st); s.Pending != 1 || s.Leased != 0 {
		t.Fatalf("after a completion as its lease ended: pending %d, leased %d; want 1, 0", s.Pending, s.Leased)
	}
	c := claim(t, st, "c", 10, lease)
	complete(t, st, "c", c, store.Outcome{Published: seqs(c.Records)})
	if s := stats(t, st); s.Pending != 0 {
		t.Fatalf("after c's completion: pending %d, want 0", s.Pending)
	}
}

// A row handed back for a retry, and the rows of its key, are claimable
// when the clock reaches the retry time, not a microsecond before; by then
// no row backs off.
func testRetryDueOnTime[TTx any](t *testing.T, db *relayDB[TTx]) {
	t0 := db.stopClock()
	st := db.newStore(t, false)
	first, second := firstAndSecond("k")
	db.write(t, first)
	b := claim(t, st, "a", 10, time.Minute)
	if len(b.Records) != 1 {
		t.Fatalf("claimed %d rows, want 1", len(b.Records))
	}
	const delay = 5 * time.Second
	complete(t, st, "a", b, store.Outcome{Retry: []store.Failure{{Seq: b.Records[0].Seq, Error: "broker said no", Delay: delay, Counted: true}}})
	db.write(t, second) // a later row of the key waits too
	if s := stats(t, st); s.InBackoff != 1 {
		t.Fatalf("in backoff: %d, want 1", s.InBackoff)
	}
	db.clock.Set(t0.Add(delay - tick))
	if b := claim(t, st, "a", 10, time.Minute); len(b.Records) != 0 {
		t.Fatalf("claimed %d rows a microsecond before the retry time", len(b.Records))
	}
	db.clock.Set(t0.Add(delay))
	if s := stats(t, st); s.InBackoff != 0 {
		t.Fatalf("in backoff at the retry time: %d, want 0", s.InBackoff)
	}
	checkRows(t, "at the retry time", claim(t, st, "a", 10, time.Minute).Records, []courier.Message{first}, map[uuid.UUID]int{first.ID: 1})
}
