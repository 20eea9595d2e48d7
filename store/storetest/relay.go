package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// Commit ⇒ rows, rollback ⇒ none; what was committed comes back from a
// claim field for field, in write order.
func testAtomicWrite[TTx any](t *testing.T, db *relayDB[TTx]) {
	ctx := context.Background()
	st := db.newStore(t, false)
	one := courier.NewMessage("orders", "order-1", "OrderPlaced", []byte("commit"),
		courier.WithVersion(3), courier.WithContentType(courier.ContentTypeJSON),
		courier.WithOccurredAt(time.Date(2024, 2, 29, 23, 59, 58, 123456789, time.FixedZone("X", 5*3600))),
		courier.WithHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
		courier.WithCorrelationID("saga-7"))
	if err := db.writeTx(ctx, []courier.Message{one}, true); err != nil {
		t.Fatalf("write and commit: %v", err)
	}
	if n := stats(t, st).Pending; n != 1 {
		t.Fatalf("%d rows after a committed write, want 1", n)
	}
	if err := db.writeTx(ctx, []courier.Message{courier.NewMessage("orders", "order-2", "OrderPlaced", []byte("rolled back"))}, false); err != nil {
		t.Fatalf("write and roll back: %v", err)
	}
	if n := stats(t, st).Pending; n != 1 {
		t.Fatalf("%d rows after a rolled-back write, want 1", n)
	}

	// More messages than one statement of any dialect takes.
	many := numbered(2500, 7, "k")
	for i := range many {
		if i%2 == 0 {
			many[i].SetHeader("traceparent", fmt.Sprintf("00-%032x-00f067aa0ba902b7-01", i))
		}
	}
	if err := db.writeTx(ctx, many, true); err != nil {
		t.Fatalf("write 2500 messages: %v", err)
	}
	committed := append([]courier.Message{one}, many...)
	if err := db.writeTx(ctx, numbered(1200, 3, "rolled-back-"), false); err != nil {
		t.Fatalf("write 1200 messages and roll back: %v", err)
	}
	if n := stats(t, st).Pending; n != 2501 {
		t.Fatalf("%d rows, want 2501: a rolled-back batch left rows or a committed one lost some", n)
	}

	b := claim(t, st, "reader", 10000, time.Minute)
	if len(b.Records) != len(committed) {
		t.Fatalf("claimed %d rows, want the %d committed", len(b.Records), len(committed))
	}
	for i, r := range b.Records {
		sameMessage(t, r.Message, committed[i])
		if r.Attempts != 0 {
			t.Errorf("row %d: %d attempts before any publish", r.Seq, r.Attempts)
		}
		if t.Failed() {
			t.Fatalf("row %d of %d (seq %d) differs; Seq order must be write order", i, len(committed), r.Seq)
		}
	}
}

// A nil or empty payload is stored as an empty payload; no headers stay no
// headers.
func testEmptyPayload[TTx any](t *testing.T, db *relayDB[TTx]) {
	msgs := []courier.Message{
		courier.NewMessage("t", "k", "Empty", nil),
		courier.NewMessage("t", "k", "Empty", []byte{}),
	}
	db.write(t, msgs...)
	b := claim(t, db.newStore(t, false), "r", 100, time.Minute)
	if len(b.Records) != 2 {
		t.Fatalf("claimed %d rows, want 2", len(b.Records))
	}
	for _, r := range b.Records {
		if len(r.Message.Payload) != 0 || len(r.Message.Headers) != 0 {
			t.Errorf("row %d: payload %q, headers %v; want both empty", r.Seq, r.Message.Payload, r.Message.Headers)
		}
	}
}

// Claims hand out the oldest claimable rows in Seq order; a leased key's
// rows, even ones written after the claim, wait for the lease.
func testClaimOrder[TTx any](t *testing.T, db *relayDB[TTx]) {
	st := db.newStore(t, false)
	if b := claim(t, st, "a", 10, time.Minute); len(b.Records) != 0 {
		t.Fatalf("an empty outbox gave %d rows", len(b.Records))
	}
	msgs := numbered(30, 3, "k")
	db.write(t, msgs...)
	a := claim(t, st, "a", 10, time.Minute)
	if len(a.Records) != 10 {
		t.Fatalf("claimed %d rows with limit 10 out of 30", len(a.Records))
	}
	for i, r := range a.Records {
		if r.Message.ID != msgs[i].ID {
			t.Fatalf("claimed row %d is message %s (key %s), want the %d-th oldest %s", i, r.Message.ID, r.Message.Key, i, msgs[i].ID)
		}
	}
	if b := claim(t, st, "b", 10, time.Minute); len(b.Records) != 0 {
		t.Fatalf("claimed %d rows of keys %v leased to another owner", len(b.Records), keysOf(b.Records))
	}
	late := courier.NewMessage("events", "k0", "Numbered", []byte("late"))
	fresh := courier.NewMessage("events", "fresh", "Numbered", []byte("fresh"))
	db.write(t, late, fresh)
	b := claim(t, st, "b", 10, time.Minute)
	if len(b.Records) != 1 || b.Records[0].Message.ID != fresh.ID {
		t.Fatalf("claimed keys %v; want only the new key (k0 is leased, even for rows written after the claim)", keysOf(b.Records))
	}
	complete(t, st, "a", a, store.Outcome{Published: seqs(a.Records)})
	c := claim(t, st, "c", 100, time.Minute)
	want := append(slices.Clone(msgs[10:]), late)
	if len(c.Records) != len(want) {
		t.Fatalf("after the lease ended: claimed %d rows, want %d", len(c.Records), len(want))
	}
	for i, r := range c.Records {
		if r.Message.ID != want[i].ID {
			t.Fatalf("after the lease ended: row %d is %s (key %s), want %s (key %s)", i, r.Message.ID, r.Message.Key, want[i].ID, want[i].Key)
		}
	}
}

// A claimed run of one key is its oldest rows, and no other claim gets any
// row of that key until the lease ends: a burst on one key drains a batch at
// a time, not a row per claim.
func testHotKey[TTx any](t *testing.T, db *relayDB[TTx]) {
	st := db.newStore(t, false)
	msgs := numbered(3000, 1, "hot")
	db.write(t, msgs...)
	a := claim(t, st, "a", 1000, time.Minute)
	if len(a.Records) != 1000 || a.Records[0].Message.ID != msgs[0].ID || a.Records[999].Message.ID != msgs[999].ID {
		t.Fatalf("first claim: %d rows, want the oldest 1000", len(a.Records))
	}
	if b := claim(t, st, "b", 1000, time.Minute); len(b.Records) != 0 {
		t.Fatalf("second claimer got %d rows of a leased key", len(b.Records))
	}
	complete(t, st, "a", a, store.Outcome{Published: seqs(a.Records)})
	b := claim(t, st, "b", 1000, time.Minute)
	if len(b.Records) != 1000 || b.Records[0].Message.ID != msgs[1000].ID {
		t.Fatalf("after the first run: %d rows, want the next 1000", len(b.Records))
	}
}

// A leased key is claimable by nobody else; an expired lease is taken over;
// a stale owner's Complete (or a stranger's) changes nothing; Complete
// releases the rows it does not mention.
func testLeases[TTx any](t *testing.T, db *relayDB[TTx]) {
	st := db.newStore(t, false)
	db.write(t, numbered(10, 2, "k")...)
	const lease = time.Minute // ends when the clock is moved on
	dead := claim(t, st, "dead", 100, lease)
	if len(dead.Records) != 10 {
		t.Fatalf("claimed %d rows, want 10", len(dead.Records))
	}
	if b := claim(t, st, "alive", 100, time.Minute); len(b.Records) != 0 {
		t.Fatalf("claimed %d leased rows before the lease ended", len(b.Records))
	}
	if s := stats(t, st); s.Pending != 10 || s.Leased != 10 {
		t.Fatalf("stats %+v, want 10 pending, all leased", s)
	}
	publishOnly(t, db, st, "alive", 100, courier.NewMessage("events", "other", "Numbered", []byte("other")), "the unleased key")

	db.clock.Advance(lease)
	taken := claim(t, st, "alive", 100, time.Minute)
	if !slices.Equal(seqs(taken.Records), seqs(dead.Records)) {
		t.Fatalf("after the lease ended took over rows %v, want %v", seqs(taken.Records), seqs(dead.Records))
	}
	complete(t, st, "dead", dead, store.Outcome{
		Published: seqs(dead.Records[:5]),
		Retry:     []store.Failure{{Seq: dead.Records[5].Seq, Error: "late", Delay: time.Hour, Counted: true}},
		Dead:      []store.Failure{{Seq: dead.Records[6].Seq, Error: "late", Counted: true}},
	})
	if s := stats(t, st); s.Pending != 10 || s.Leased != 10 || s.InBackoff != 0 || s.DeadLetters != 0 {
		t.Fatalf("after a stale owner's outcome: %+v, want 10 pending, all leased, nothing failed", s)
	}
	complete(t, st, "intruder", taken, store.Outcome{Published: seqs(taken.Records)})
	if s := stats(t, st); s.Pending != 10 || s.Leased != 10 {
		t.Fatalf("after another owner completed the lease: %+v, want 10 pending, all leased", s)
	}
	complete(t, st, "alive", taken, store.Outcome{Published: []int64{taken.Records[0].Seq}})
	if s := stats(t, st); s.Pending != 9 || s.Leased != 0 {
		t.Fatalf("after the live owner's outcome: %+v, want 9 pending (released), none leased", s)
	}
	again := claim(t, st, "third", 100, time.Minute)
	if !slices.Equal(seqs(again.Records), seqs(taken.Records[1:])) {
		t.Fatalf("released rows: claimed %v, want %v at once", seqs(again.Records), seqs(taken.Records[1:]))
	}
	for _, r := range again.Records {
		if r.Attempts != 0 {
			t.Fatalf("row %d released unattempted has %d attempts", r.Seq, r.Attempts)
		}
	}
}

// A failed row holds back its key only, until its retry time; attempts,
// last_error and history are recorded; uncounted failures leave attempts
// alone.
func testRetries[TTx any](t *testing.T, db *relayDB[TTx]) {
	st := db.newStore(t, false)
	msgs := numbered(6, 2, "k") // k0: 0, 2, 4; k1: 1, 3, 5
	db.write(t, msgs...)
	const backoff = time.Minute // ends when the clock is moved on
	b := claim(t, st, "r", 2, time.Minute)
	if len(b.Records) != 2 {
		t.Fatalf("claimed %d rows, want 2", len(b.Records))
	}
	complete(t, st, "r", b, store.Outcome{
		Published: []int64{b.Records[1].Seq},
		Retry:     []store.Failure{{Seq: b.Records[0].Seq, Error: "boom", Delay: backoff, Counted: true}},
	})
	next := claim(t, st, "r", 100, time.Minute)
	if got := keysOf(next.Records); !slices.Equal(got, []string{"k1", "k1"}) {
		t.Fatalf("while k0 backs off claimed keys %v, want k1's two remaining rows", got)
	}
	if s := stats(t, st); s.InBackoff != 1 || s.Pending != 5 {
		t.Fatalf("stats %+v: want 5 pending, 1 in backoff", s)
	}
	if f, ok := db.failures(t, b.Records[0].Seq); ok &&
		(f.Attempts != 1 || f.LastError != "boom" || len(f.History) != 1 || f.History[0].Error != "boom" || !f.History[0].Counted) {
		t.Fatalf("failed row: %+v; want 1 attempt, boom, one counted entry", f)
	}

	// An uncounted failure (broker down): retried later, attempts unchanged.
	complete(t, st, "r", next, store.Outcome{
		Retry: []store.Failure{{Seq: next.Records[0].Seq, Error: "broker unavailable", Delay: backoff, Counted: false}},
	})
	if f, ok := db.failures(t, next.Records[0].Seq); ok &&
		(f.Attempts != 0 || f.LastError != "broker unavailable" || len(f.History) != 1 || f.History[0].Counted) {
		t.Fatalf("uncounted failure: %+v; want 0 attempts, the error, one uncounted entry", f)
	}
	if c := claim(t, st, "r", 100, time.Minute); len(c.Records) != 0 {
		t.Fatalf("claimed keys %v while both keys back off", keysOf(c.Records))
	}

	// Both failures are due by then. A retried row is claimed alone, without
	// the rows of its key behind it; they follow once it is published.
	db.clock.Advance(backoff)
	after := claim(t, st, "r", 100, time.Minute)
	checkRows(t, "after the backoff", after.Records, []courier.Message{msgs[0], msgs[3]}, map[uuid.UUID]int{msgs[0].ID: 1})
	complete(t, st, "r", after, store.Outcome{Published: seqs(after.Records)})
	rest := claim(t, st, "r", 100, time.Minute)
	checkRows(t, "after the retried rows were published", rest.Records, []courier.Message{msgs[2], msgs[4], msgs[5]}, nil)
}

// checkRows fails unless recs are want's messages in order, with the given
// attempts (0 when not listed).
func checkRows(t *testing.T, when string, recs []store.Record, want []courier.Message, attempts map[uuid.UUID]int) {
	t.Helper()
	if len(recs) != len(want) {
		t.Fatalf("%s claimed %d rows (keys %v), want %d", when, len(recs), keysOf(recs), len(want))
	}
	for i, r := range recs {
		if r.Message.ID != want[i].ID {
			t.Fatalf("%s row %d is %s, want %s", when, i, r.Message.ID, want[i].ID)
		}
		if r.Attempts != attempts[want[i].ID] {
			t.Fatalf("%s row %d (%s) has %d attempts, want %d", when, r.Seq, r.Message.Key, r.Attempts, attempts[want[i].ID])
		}
	}
}

// The history keeps the latest 20 failures; attempts counts them all.
func testHistoryLimit[TTx any](t *testing.T, db *relayDB[TTx]) {
	st := db.newStore(t, false)
	db.write(t, numbered(1, 1, "k")...)
	var seq int64
	for i := 1; i <= 26; i++ {
		b := claim(t, st, "r", 1, time.Minute)
		if len(b.Records) != 1 {
			t.Fatalf("attempt %d: claimed %d rows right after a failure with no delay", i, len(b.Records))
		}
		if b.Records[0].Attempts != i-1 {
			t.Fatalf("attempt %d: record says %d attempts so far", i, b.Records[0].Attempts)
		}
		seq = b.Records[0].Seq
		f := store.Failure{Seq: seq, Error: fmt.Sprintf("fail %d", i), Counted: true}
		if i < 26 {
			complete(t, st, "r", b, store.Outcome{Retry: []store.Failure{f}})
			continue
		}
		if f, ok := db.failures(t, seq); ok {
			checkHistory(t, "after 25 failures", f.Attempts, f.LastError, f.History, 25)
		}
		complete(t, st, "r", b, store.Outcome{Dead: []store.Failure{f}})
	}
	if dl, ok := db.deadLetters(t); ok {
		if len(dl) != 1 || dl[0].ID != seq {
			t.Fatalf("dead letters %v, want row %d", deadIDs(dl), seq)
		}
		checkHistory(t, "dead after 26 failures", dl[0].Attempts, dl[0].LastError, dl[0].History, 26)
	}
}

// checkHistory fails unless a row that failed n times ("fail 1" … "fail
// n") says so: n attempts, the last error, and the latest 20 failures
// oldest first.
func checkHistory(t *testing.T, when string, attempts int, lastError string, hist []store.PublishAttempt, n int) {
	t.Helper()
	last := fmt.Sprintf("fail %d", n)
	if attempts != n || lastError != last || len(hist) != 20 {
		t.Fatalf("%s: attempts %d, last error %q, %d history entries; want %d, %s, 20", when, attempts, lastError, len(hist), n, last)
	}
	if first := fmt.Sprintf("fail %d", n-19); hist[0].Error != first || hist[19].Error != last {
		t.Fatalf("%s: history runs from %q to %q, want the latest 20 oldest first (%s … %s)", when, hist[0].Error, hist[19].Error, first, last)
	}
}

// After the last attempt a row moves to the dead letters with its history,
// and its key moves on.
func testDeadLetters[TTx any](t *testing.T, db *relayDB[TTx]) {
	st := db.newStore(t, false)
	poison := courier.NewMessage("events", "k0", "Poison", []byte("poison payload"), courier.WithHeader("x-trace", "1"))
	nextOfKey := courier.NewMessage("events", "k0", "Fine", []byte("after the poison"))
	other := courier.NewMessage("events", "k1", "Fine", []byte("other key"))
	db.write(t, poison, nextOfKey, other)
	for i := 1; i <= 2; i++ {
		b := claim(t, st, "r", 1, time.Minute)
		complete(t, st, "r", b, store.Outcome{Retry: []store.Failure{{Seq: b.Records[0].Seq, Error: fmt.Sprintf("poison %d", i), Counted: true}}})
	}
	b := claim(t, st, "r", 10, time.Minute)
	if len(b.Records) != 2 || b.Records[0].Message.ID != poison.ID || b.Records[1].Message.ID != other.ID {
		t.Fatalf("claimed %d rows of keys %v, want the retried poison message alone of its key, and the other key's", len(b.Records), keysOf(b.Records))
	}
	const lastError = `poison 3: "quoted", back\slash, ключ 🔑, <tag> & 100%`
	complete(t, st, "r", b, store.Outcome{
		Dead:      []store.Failure{{Seq: b.Records[0].Seq, Error: lastError, Counted: true}},
		Published: []int64{b.Records[1].Seq},
	})
	if dl, ok := db.deadLetters(t); ok {
		if len(dl) != 1 || dl[0].ID != b.Records[0].Seq {
			t.Fatalf("dead letters %v, want row %d", deadIDs(dl), b.Records[0].Seq)
		}
		d := dl[0]
		if d.MessageID != poison.ID.String() || d.Attempts != 3 || d.LastError != lastError || string(d.Payload) != string(poison.Payload) ||
			d.Headers["x-trace"] != "1" {
			t.Fatalf("dead letter: id %s, attempts %d, last error %q, payload %q, headers %v; want %s, 3, %q, %q, x-trace",
				d.MessageID, d.Attempts, d.LastError, d.Payload, d.Headers, poison.ID, lastError, poison.Payload)
		}
		if h := d.History; len(h) != 3 || h[0].Error != "poison 1" || h[2].Error != lastError || !h[2].Counted {
			t.Fatalf("dead letter history %+v, want the three failures oldest first", h)
		}
		if d.DeadAt.IsZero() {
			t.Fatal("dead letter has no dead_at")
		}
	}
	if s := stats(t, st); s.DeadLetters != 1 || s.Pending != 1 || s.InBackoff != 0 {
		t.Fatalf("stats %+v, want 1 dead letter, 1 pending, none backing off", s)
	}
	next := claim(t, st, "r", 10, time.Minute)
	if len(next.Records) != 1 || next.Records[0].Message.ID != nextOfKey.ID {
		t.Fatalf("after the dead letter claimed %v, want the next message of its key", keysOf(next.Records))
	}
}

// Eight claimers race: every row is handed out exactly once, and each key's
// rows in order, one lease at a time. They share one store, as the relays of
// one process do; claimers in separate processes are the business of each
// dialect's own tests where the store is more than a connection pool.
func testConcurrentClaimers[TTx any](t *testing.T, db *relayDB[TTx]) {
	const n = 2000
	for i := 0; i < n; i += 1000 {
		db.write(t, numbered(1000, 37, fmt.Sprintf("κλειδί-%d-", i/1000%2))...)
	}
	st := db.newStore(t, false)
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[int64]string{}
	lastSeq := map[string]int64{}
	var wg sync.WaitGroup
	for w := range 8 {
		owner := fmt.Sprintf("claimer-%d", w)
		wg.Go(func() {
			for idle := 0; idle < 20; {
				batch, err := st.Claim(ctx, owner, 1+w*13, time.Minute)
				if err != nil {
					t.Errorf("claim by %s: %v", owner, err)
					return
				}
				if len(batch.Records) == 0 {
					idle++
					time.Sleep(5 * time.Millisecond)
					continue
				}
				idle = 0
				mu.Lock()
				for _, r := range batch.Records {
					if prev, ok := seen[r.Seq]; ok {
						t.Errorf("row %d claimed by %s and %s", r.Seq, prev, owner)
					}
					seen[r.Seq] = owner
					if r.Seq < lastSeq[r.Message.Key] {
						t.Errorf("key %s: row %d claimed after row %d", r.Message.Key, r.Seq, lastSeq[r.Message.Key])
					}
					lastSeq[r.Message.Key] = r.Seq
				}
				mu.Unlock()
				if err := st.Complete(ctx, owner, batch.Lease, store.Outcome{Published: seqs(batch.Records)}); err != nil {
					t.Errorf("complete by %s: %v", owner, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("%d rows claimed, want %d", len(seen), n)
	}
	if s := stats(t, st); s.Pending != 0 || s.Leased != 0 {
		t.Fatalf("after every row was published: %+v", s)
	}
}

// KeepPublished keeps a copy of each published row (the dialects: in
// courier_outbox_published), with its attempts and publication time;
// without it published rows are only deleted. Stores of both kinds work on
// the same rows.
func testKeepPublished[TTx any](t *testing.T, db *relayDB[TTx]) {
	plain, keep := db.newStore(t, false), db.newStore(t, true)
	msgs := []courier.Message{
		courier.NewMessage("events", "a", "T", []byte("dropped")),
		courier.NewMessage("events", "b", "T", []byte("kept"), courier.WithHeader("x-h", "v")),
	}
	db.write(t, msgs...)
	b := claim(t, plain, "p", 1, time.Minute)
	complete(t, plain, "p", b, store.Outcome{Published: seqs(b.Records)})
	if _, ok, _ := db.published(t, b.Records[0].Seq); ok {
		t.Fatal("a row was archived without KeepPublished")
	}
	b = claim(t, keep, "k", 1, time.Minute)
	complete(t, keep, "k", b, store.Outcome{Retry: []store.Failure{{Seq: b.Records[0].Seq, Error: "once", Counted: true}}})
	b = claim(t, keep, "k", 1, time.Minute)
	complete(t, keep, "k", b, store.Outcome{Published: seqs(b.Records)})
	if p, ok, inspected := db.published(t, b.Records[0].Seq); inspected &&
		(!ok || p.MessageID != msgs[1].ID.String() || p.Attempts != 1 || string(p.Payload) != "kept" || !p.Dated) {
		t.Fatalf("archived row: %+v (kept: %v); want %s with 1 attempt, payload kept, and its publication time", p, ok, msgs[1].ID)
	}
	if n := stats(t, keep).Pending; n != 0 {
		t.Fatalf("%d rows left in the outbox, want 0", n)
	}
}

// Stats counts pending, leased, backing-off and dead rows and dates the
// oldest pending one.
func testStats[TTx any](t *testing.T, db *relayDB[TTx]) {
	st := db.newStore(t, false)
	s := stats(t, st)
	if s.Pending != 0 || s.Leased != 0 || s.InBackoff != 0 || s.DeadLetters != 0 || !s.OldestPending.IsZero() || s.OldestPendingAge() != 0 {
		t.Fatalf("empty outbox: %+v", s)
	}
	if d := time.Since(s.Now); d < -5*time.Second || d > 5*time.Second {
		t.Fatalf("stats clock %s is %s away from this machine's", s.Now, d)
	}
	before := time.Now()
	db.write(t, numbered(5, 5, "k")...)
	after := time.Now()
	s = stats(t, st)
	if s.Pending != 5 || s.Leased != 0 || s.InBackoff != 0 || s.DeadLetters != 0 {
		t.Fatalf("5 new rows: %+v", s)
	}
	if s.OldestPending.Before(before.Add(-2*time.Second)) || s.OldestPending.After(after.Add(2*time.Second)) || s.OldestPendingAge() < 0 {
		t.Fatalf("oldest pending %s (age %s), want between %s and %s", s.OldestPending, s.OldestPendingAge(), before, after)
	}
	b := claim(t, st, "r", 3, time.Minute)
	if s := stats(t, st); s.Leased != 3 || s.Pending != 5 {
		t.Fatalf("3 leased: %+v", s)
	}
	complete(t, st, "r", b, store.Outcome{
		Retry: []store.Failure{{Seq: b.Records[0].Seq, Error: "later", Delay: time.Hour, Counted: true}},
		Dead:  []store.Failure{{Seq: b.Records[1].Seq, Error: "never", Counted: true}},
	})
	s = stats(t, st)
	if s.Pending != 4 || s.Leased != 0 || s.InBackoff != 1 || s.DeadLetters != 1 {
		t.Fatalf("after a retry and a dead letter: %+v, want 4 pending, 1 backing off, 1 dead", s)
	}
	claim(t, st, "r", 10, time.Minute)
	if s := stats(t, st); s.Leased != 3 || s.Pending != 4 {
		t.Fatalf("after claiming the 3 claimable rows: %+v", s)
	}
	db.clock.Advance(2 * time.Hour)
	if s := stats(t, st); s.Pending != 4 || s.Leased != 0 || s.InBackoff != 0 || s.OldestPendingAge() < 2*time.Hour-clockMargin {
		t.Fatalf("after the lease and the backoff ended: %+v, want 4 pending, none leased or backing off, the oldest 2 hours old", s)
	}
}

// publishOnly writes msg, claims up to limit rows as owner, which must be
// msg alone (what says why), and publishes it.
func publishOnly[TTx any](t *testing.T, db *relayDB[TTx], st store.RelayStore, owner string, limit int, msg courier.Message, what string) {
	t.Helper()
	db.write(t, msg)
	b := claim(t, st, owner, limit, time.Minute)
	if len(b.Records) != 1 || b.Records[0].Message.ID != msg.ID {
		t.Fatalf("claimed keys %v, want just the row of %s", keysOf(b.Records), what)
	}
	complete(t, st, owner, b, store.Outcome{Published: seqs(b.Records)})
}

// A key held by a failed row with a deep backlog behind it, or by a lease
// over the first run of a bulk write, does not keep other keys' rows from
// being claimed: the claim skips the held key's rows, however many fill what
// used to be its window.
func testHeldKeyBacklog[TTx any](t *testing.T, db *relayDB[TTx]) {
	st := db.newStore(t, false)
	db.write(t, courier.NewMessage("events", "poisoned", "Poison", []byte("poison")))
	p := claim(t, st, "r", 10, time.Minute)
	if len(p.Records) != 1 {
		t.Fatalf("claimed %d rows, want the poison message", len(p.Records))
	}
	complete(t, st, "r", p, store.Outcome{Retry: []store.Failure{{Seq: p.Records[0].Seq, Error: "rejected", Delay: time.Hour, Counted: true}}})
	backlog := make([]courier.Message, 5000)
	for i := range backlog {
		backlog[i] = courier.NewMessage("events", "poisoned", "Numbered", fmt.Appendf(nil, "%d", i))
	}
	db.write(t, backlog...)
	publishOnly(t, db, st, "r", 10, courier.NewMessage("events", "other", "Other", []byte("other")), "the other key, behind a held key's 5,000 rows")

	// A bulk write on one key: while its first run is leased, the rest of it
	// does not hide another key's row.
	bulk := numbered(15000, 1, "bulk")
	db.write(t, bulk...)
	late := courier.NewMessage("events", "late", "Other", []byte("late"))
	db.write(t, late)
	run := claim(t, st, "a", 1000, time.Minute)
	if len(run.Records) != 1000 || run.Records[0].Message.Key != "bulk0" {
		t.Fatalf("first claim: %d rows of %v, want 1,000 of bulk0", len(run.Records), keysOf(run.Records))
	}
	next := claim(t, st, "b", 1000, time.Minute)
	if len(next.Records) != 1 || next.Records[0].Message.ID != late.ID {
		t.Fatalf("while bulk0 is leased claimed keys %v, want just the other key's row", keysOf(next.Records))
	}
}

// raceRounds is how many times each race below is set up.
const raceRounds = 40

// A row's retry that comes due while a claim is running either counts as
// due for the whole claim or as pending for the whole claim: the key's
// later rows are never claimed ahead of it.
func testRetryDueDuringClaim[TTx any](t *testing.T, db *relayDB[TTx]) {
	st := slowClaims(t, db)
	for round := range raceRounds {
		first, second := firstAndSecond(fmt.Sprintf("due-%d", round))
		db.write(t, first, second)
		b := claim(t, st, "r", 1, time.Minute)
		if len(b.Records) != 1 || b.Records[0].Message.ID != first.ID {
			t.Fatalf("round %d: claimed %v, want the key's first row", round, keysOf(b.Records))
		}
		delay := time.Duration(rand.IntN(15)) * time.Millisecond
		complete(t, st, "r", b, store.Outcome{Retry: []store.Failure{{Seq: b.Records[0].Seq, Error: "once", Delay: delay, Counted: true}}})
		claimFirstAgain(t, st, "r", first, fmt.Sprintf("round %d: the retry came due during a claim and", round))
	}
}

// A Complete that releases a key's rows while another relay's claim is
// running: the claim either sees the key as held or claims it from its
// released first row, never from the row after it.
func testReleaseDuringClaim[TTx any](t *testing.T, db *relayDB[TTx]) {
	st := slowClaims(t, db)
	for round := range raceRounds {
		first, second := firstAndSecond(fmt.Sprintf("released-%d", round))
		db.write(t, first)
		a := claim(t, st, "a", 1, time.Minute)
		if len(a.Records) != 1 || a.Records[0].Message.ID != first.ID {
			t.Fatalf("round %d: claimed %v, want the key's first row", round, keysOf(a.Records))
		}
		db.write(t, second)
		var wg sync.WaitGroup
		wg.Go(func() {
			time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
			if err := st.Complete(context.Background(), "a", a.Lease, store.Outcome{}); err != nil { // releases the first row
				t.Errorf("round %d: complete: %v", round, err)
			}
		})
		claimFirstAgain(t, st, "b", first, fmt.Sprintf("round %d: a release during a claim", round))
		wg.Wait()
	}
}

// claimFirstAgain claims until rows come back, which must start with first,
// and publishes them. race says what happened before, for the failure.
func claimFirstAgain(t *testing.T, st store.RelayStore, owner string, first courier.Message, race string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		b := claim(t, st, owner, 100, time.Minute)
		if len(b.Records) == 0 {
			continue
		}
		if b.Records[0].Message.ID != first.ID {
			t.Fatalf("%s let the key's second row be claimed without its first (claimed %d rows)", race, len(b.Records))
		}
		complete(t, st, owner, b, store.Outcome{Published: seqs(b.Records)})
		for { // the rows behind a retried row follow it
			b := claim(t, st, owner, 100, time.Minute)
			if len(b.Records) == 0 {
				return
			}
			complete(t, st, owner, b, store.Outcome{Published: seqs(b.Records)})
		}
	}
	t.Fatalf("%s: the key's first row never came back", race)
}

// slowClaims returns a store on db on which every claim takes a while, so that the races above have a window to land in: 5,000
// rows of other keys held by a long lease, which each claim's scan has to
// look past.
func slowClaims[TTx any](t *testing.T, db *relayDB[TTx]) store.RelayStore {
	t.Helper()
	st := db.newStore(t, false)
	db.write(t, numbered(5000, 50, "filler")...)
	if b := claim(t, st, "filler", 5000, time.Hour); len(b.Records) != 5000 {
		t.Fatalf("filler lease holds %d rows, want 5,000", len(b.Records))
	}
	return st
}

// firstAndSecond returns two messages of key.
func firstAndSecond(key string) (first, second courier.Message) {
	return courier.NewMessage("events", key, "T", []byte("1")), courier.NewMessage("events", key, "T", []byte("2"))
}

// Payloads of 1 MiB (Courier's default limit) go in, come out and are
// archived byte for byte, several in one write.
func testLargePayload[TTx any](t *testing.T, db *relayDB[TTx]) {
	rng := rand.New(rand.NewPCG(1, 2))
	var msgs []courier.Message
	for i := range 3 {
		p := make([]byte, courier.DefaultMaxPayloadBytes)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		msgs = append(msgs, courier.NewMessage("blobs", "big-"+string(rune('a'+i)), "Blob", p, courier.WithHeader("x-size", "1MiB")))
	}
	if err := db.writeTx(context.Background(), msgs, true); err != nil {
		t.Fatalf("write three 1 MiB messages: %v", err)
	}
	st := db.newStore(t, true)
	b := claim(t, st, "r", 3, time.Minute)
	if len(b.Records) != 3 {
		t.Fatalf("claimed %d rows, want 3", len(b.Records))
	}
	for i, r := range b.Records {
		sameMessage(t, r.Message, msgs[i])
	}
	complete(t, st, "r", b, store.Outcome{Published: seqs(b.Records)})
	if p, ok, inspected := db.published(t, b.Records[2].Seq); inspected && (!ok || !bytes.Equal(p.Payload, msgs[2].Payload)) {
		t.Fatalf("archived payload of %d bytes (kept: %v) differs from the %d written", len(p.Payload), ok, len(msgs[2].Payload))
	}
}

// Keys are compared byte for byte: case, trailing spaces, normalisation
// forms and scripts all make different keys, which lease and back off
// independently, and every key comes back exactly as written.
func testUnicodeKeys[TTx any](t *testing.T, db *relayDB[TTx]) {
	st := db.newStore(t, false)
	keys := []string{
		"κλειδί", "ключ", "鍵", "🔑", "🔑🔑", "key", "Key", "KEY", "k", "k ",
		"\u00e9", "e\u0301", "ß", "ss", strings.Repeat("€", 341) + "x", // 1024 bytes, the longest key allowed
	}
	var first, second []courier.Message
	for _, k := range keys {
		first = append(first, courier.NewMessage("events", k, "T", []byte("1 "+k)))
	}
	for _, k := range keys {
		second = append(second, courier.NewMessage("events", k, "T", []byte("2 "+k)))
	}
	db.write(t, first...)
	db.write(t, second...)

	// One claim of one row per key: each must be the next key's first row,
	// never blocked by a lease on a key that merely looks alike.
	var leases []store.Batch
	for i, k := range keys {
		b := claim(t, st, "owner-"+k, 1, time.Minute)
		if len(b.Records) != 1 || b.Records[0].Message.ID != first[i].ID {
			t.Fatalf("claim %d: got keys %q, want the first row of %q", i, keysOf(b.Records), k)
		}
		sameMessage(t, b.Records[0].Message, first[i])
		leases = append(leases, b)
	}
	if b := claim(t, st, "late", 100, time.Minute); len(b.Records) != 0 {
		t.Fatalf("every key is leased, yet claimed %q", keysOf(b.Records))
	}
	for i, b := range leases {
		complete(t, st, "owner-"+keys[i], b, store.Outcome{Published: seqs(b.Records)})
	}
	b := claim(t, st, "r", 100, time.Minute)
	if len(b.Records) != len(keys) {
		t.Fatalf("claimed %d second rows, want %d", len(b.Records), len(keys))
	}
	for i, r := range b.Records {
		sameMessage(t, r.Message, second[i])
	}

	// "key" backs off; "Key", "KEY" and the rest do not.
	complete(t, st, "r", b, store.Outcome{Retry: []store.Failure{{Seq: b.Records[5].Seq, Error: "x", Delay: time.Hour, Counted: true}}})
	c := claim(t, st, "r", 100, time.Minute)
	if len(c.Records) != len(keys)-1 {
		t.Fatalf("with one key backing off claimed %d rows, want %d", len(c.Records), len(keys)-1)
	}
	for _, r := range c.Records {
		if r.Message.Key == "key" {
			t.Fatal("claimed a row of the key backing off")
		}
	}
}

// The per-key order contract is stated in package relay (section Ordering).
// The test below checks the half a store decides on its own: unserialised
// concurrent writers of one key are claimed in the order their rows become
// visible, which can differ from their outbox ids. The other half, writers
// serialised per key published in write order, runs end to end in
// test/e2e.

// openTx is a transaction running in a goroutine of its own: it writes its
// messages, reports that, and then waits to be told whether to commit.
type openTx struct {
	wrote  chan struct{}
	finish chan bool
	done   chan error
}

var errRolledBack = errors.New("rolled back on purpose")

// begin starts a transaction that writes msgs and stays open until end is
// called. wrote is closed once msgs are inserted; a database that
// runs one writer at a time may not get that far while another is open.
func begin[TTx any](ctx context.Context, db *relayDB[TTx], msgs ...courier.Message) *openTx {
	o := &openTx{wrote: make(chan struct{}), finish: make(chan bool, 1), done: make(chan error, 1)}
	go func() {
		o.done <- db.InTx(ctx, func(tx TTx) error {
			if err := db.insert(ctx, tx, msgs...); err != nil {
				return err
			}
			close(o.wrote)
			if !<-o.finish {
				return errRolledBack
			}
			return nil
		})
	}()
	return o
}

// end lets the transaction commit and returns the outcome.
func (o *openTx) end(t *testing.T, what string) {
	t.Helper()
	o.finish <- true
	o.wait(t, what)
}

// wait waits for the transaction to end on its own.
func (o *openTx) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case err := <-o.done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: did not commit within 20s", what)
	}
}

// Two transactions write the same key without serialising: T1 inserts its
// message first, so its row has the smaller id, and commits after T2. A
// claim made in between sees only T2's row and takes it; T1's row, once
// committed, waits for T2's lease and is published after it. That is the
// contract for unserialised writers: publication follows the order in which
// rows become visible, not their ids. On a database that runs one writer at
// a time (Driver.SerialWrites) T2 cannot write while T1 is open, so the two are
// serialised by the database itself and published in write order.
func testOrderUnserialised[TTx any](t *testing.T, db *relayDB[TTx]) {
	st := db.newStore(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := "aggregate"
	m1 := courier.NewMessage("events", key, "First", []byte("written first, committed last"))
	m2 := courier.NewMessage("events", key, "Second", []byte("written second, committed first"))
	t1 := begin(ctx, db, m1)
	select {
	case <-t1.wrote:
	case err := <-t1.done:
		t.Fatalf("T1: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("T1 did not write within 20s")
	}
	t2 := begin(ctx, db, m2)
	t2.finish <- true
	if db.SerialWrites {
		select {
		case err := <-t2.done:
			t.Fatalf("T2 ended (%v) while T1 was still writing; the driver says the database runs one writer at a time (SerialWrites)", err)
		case <-time.After(300 * time.Millisecond):
		}
		t1.end(t, "T1")
		t2.wait(t, "T2")
		b := claim(t, st, "r1", 10, time.Minute)
		if got := ids(b.Records); !slices.Equal(got, []string{m1.ID.String(), m2.ID.String()}) {
			t.Fatalf("claimed %v; want T1's message, then T2's %v", got, []string{m1.ID.String(), m2.ID.String()})
		}
		complete(t, st, "r1", b, store.Outcome{Published: seqs(b.Records)})
		return
	}
	t2.wait(t, "T2 (T1 still open)")
	b1 := claim(t, st, "r1", 10, time.Minute)
	if got := ids(b1.Records); !slices.Equal(got, []string{m2.ID.String()}) {
		t.Fatalf("with T1 open and T2 committed, claimed %v; want T2's message %s alone", got, m2.ID)
	}
	t1.end(t, "T1")
	if b := claim(t, st, "r2", 10, time.Minute); len(b.Records) != 0 {
		t.Fatalf("claimed %v while T2's message of the same key is leased", ids(b.Records))
	}
	complete(t, st, "r1", b1, store.Outcome{Published: seqs(b1.Records)})
	b2 := claim(t, st, "r2", 10, time.Minute)
	if got := ids(b2.Records); !slices.Equal(got, []string{m1.ID.String()}) {
		t.Fatalf("after T2's message was published, claimed %v; want T1's message %s", got, m1.ID)
	}
	if b2.Records[0].Seq >= b1.Records[0].Seq {
		t.Fatalf("T1's row has id %d, T2's %d: T1 inserted first, so its id should be the smaller one", b2.Records[0].Seq, b1.Records[0].Seq)
	}
	complete(t, st, "r2", b2, store.Outcome{Published: seqs(b2.Records)})
	t.Logf("published id %d before id %d: the order the rows became visible in", b1.Records[0].Seq, b2.Records[0].Seq)
}

func ids(recs []store.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Message.ID.String()
	}
	return out
}
