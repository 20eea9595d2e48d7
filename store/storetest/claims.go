package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// Commit ⇒ rows, rollback ⇒ none; what was committed comes back from a
// claim field for field, in write order.
func testAtomicWrite[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	ctx := context.Background()
	one := courier.NewMessage("orders", "order-1", "OrderPlaced", []byte("commit"),
		courier.WithVersion(3), courier.WithContentType(courier.ContentTypeJSON),
		courier.WithOccurredAt(time.Date(2024, 2, 29, 23, 59, 58, 123456789, time.FixedZone("X", 5*3600))),
		courier.WithHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
		courier.WithCorrelationID("saga-7"))
	if err := db.writeTx(ctx, []courier.Message{one}, true); err != nil {
		t.Fatalf("write and commit: %v", err)
	}
	if n := db.count(t, "courier_outbox"); n != 1 {
		t.Fatalf("%d rows after a committed write, want 1", n)
	}
	if err := db.writeTx(ctx, []courier.Message{courier.NewMessage("orders", "order-2", "OrderPlaced", []byte("rolled back"))}, false); err != nil {
		t.Fatalf("write and roll back: %v", err)
	}
	if n := db.count(t, "courier_outbox"); n != 1 {
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
	if n := db.count(t, "courier_outbox"); n != 2501 {
		t.Fatalf("%d rows, want 2501: a rolled-back batch left rows or a committed one lost some", n)
	}

	st := db.newStore(t, false)
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
func testEmptyPayload[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
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
func testClaimOrder[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
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
func testHotKey[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
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
func testLeases[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	st := db.newStore(t, false)
	db.write(t, numbered(10, 2, "k")...)
	const lease = 3 * time.Second // ample for the checks before it ends, on a loaded machine too
	dead := claim(t, st, "dead", 100, lease)
	leaseEnd := time.Now().Add(lease) // no earlier than the store's
	if len(dead.Records) != 10 {
		t.Fatalf("claimed %d rows, want 10", len(dead.Records))
	}
	if b := claim(t, st, "alive", 100, time.Minute); len(b.Records) != 0 {
		t.Fatalf("claimed %d leased rows before the lease ended", len(b.Records))
	}
	if s := stats(t, st); s.Pending != 10 || s.Leased != 10 {
		t.Fatalf("stats %+v, want 10 pending, all leased", s)
	}
	other := courier.NewMessage("events", "other", "Numbered", []byte("other"))
	db.write(t, other)
	o := claim(t, st, "alive", 100, time.Minute)
	if len(o.Records) != 1 || o.Records[0].Message.ID != other.ID {
		t.Fatalf("claimed keys %v, want just the unleased key", keysOf(o.Records))
	}
	complete(t, st, "alive", o, store.Outcome{Published: seqs(o.Records)})

	time.Sleep(time.Until(leaseEnd.Add(300 * time.Millisecond)))
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
func testRetries[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	st := db.newStore(t, false)
	msgs := numbered(6, 2, "k") // k0: 0, 2, 4; k1: 1, 3, 5
	db.write(t, msgs...)
	const backoff = 3 * time.Second // ample for the checks before it ends, on a loaded machine too
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
	attempts, lastErr, hist := db.failedRow(t, b.Records[0].Seq)
	if attempts != 1 || lastErr != "boom" || len(hist) != 1 || hist[0].Error != "boom" || !hist[0].Counted {
		t.Fatalf("failed row: attempts %d, last error %q, history %+v; want 1, boom, one counted entry", attempts, lastErr, hist)
	}

	// An uncounted failure (broker down): retried later, attempts unchanged.
	complete(t, st, "r", next, store.Outcome{
		Retry: []store.Failure{{Seq: next.Records[0].Seq, Error: "broker unavailable", Delay: backoff, Counted: false}},
	})
	attempts, lastErr, hist = db.failedRow(t, next.Records[0].Seq)
	if attempts != 0 || lastErr != "broker unavailable" || len(hist) != 1 || hist[0].Counted {
		t.Fatalf("uncounted failure: attempts %d, last error %q, history %+v; want 0, the error, one uncounted entry", attempts, lastErr, hist)
	}
	if c := claim(t, st, "r", 100, time.Minute); len(c.Records) != 0 {
		t.Fatalf("claimed keys %v while both keys back off", keysOf(c.Records))
	}

	// Both failures are due by then. A retried row is claimed alone, without
	// the rows of its key behind it; they follow once it is published.
	time.Sleep(backoff + 200*time.Millisecond)
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
func testHistoryLimit[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	st := db.newStore(t, false)
	db.write(t, numbered(1, 1, "k")...)
	for i := 1; i <= 25; i++ {
		b := claim(t, st, "r", 1, time.Minute)
		if len(b.Records) != 1 {
			t.Fatalf("attempt %d: claimed %d rows right after a failure with no delay", i, len(b.Records))
		}
		if b.Records[0].Attempts != i-1 {
			t.Fatalf("attempt %d: record says %d attempts so far", i, b.Records[0].Attempts)
		}
		complete(t, st, "r", b, store.Outcome{Retry: []store.Failure{{Seq: b.Records[0].Seq, Error: fmt.Sprintf("fail %d", i), Counted: true}}})
	}
	var seq int64
	db.queryRow(t, []any{&seq}, "SELECT id FROM courier_outbox")
	attempts, lastErr, hist := db.failedRow(t, seq)
	if attempts != 25 || lastErr != "fail 25" || len(hist) != 20 {
		t.Fatalf("after 25 failures: attempts %d, last error %q, %d history entries; want 25, fail 25, 20", attempts, lastErr, len(hist))
	}
	if hist[0].Error != "fail 6" || hist[19].Error != "fail 25" {
		t.Fatalf("history runs from %q to %q, want the latest 20 oldest first (fail 6 … fail 25)", hist[0].Error, hist[19].Error)
	}
}

// After the last attempt a row moves to the dead letters with its history,
// and its key moves on.
func testDeadLetters[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
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
	var (
		id       string
		attempts int
		lastErr  string
		raw      []byte
		payload  []byte
	)
	db.queryRow(t, []any{&id, &attempts, &lastErr, &raw, &payload},
		"SELECT message_id, attempts, last_error, history, payload FROM courier_outbox_dead_letters WHERE id = ?", b.Records[0].Seq)
	hist := decodeHistory(t, raw)
	if id != poison.ID.String() || attempts != 3 || lastErr != lastError || string(payload) != string(poison.Payload) {
		t.Fatalf("dead letter: id %s, attempts %d, last error %q, payload %q; want %s, 3, %q, %q",
			id, attempts, lastErr, payload, poison.ID, lastError, poison.Payload)
	}
	if len(hist) != 3 || hist[0].Error != "poison 1" || hist[2].Error != lastError || !hist[2].Counted {
		t.Fatalf("dead letter history %+v, want the three failures oldest first", hist)
	}
	var dated int
	db.queryRow(t, []any{&dated}, "SELECT count(*) FROM courier_outbox_dead_letters WHERE id = ? AND dead_at IS NOT NULL", b.Records[0].Seq)
	if dated != 1 {
		t.Fatal("dead letter has no dead_at")
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
func testConcurrentClaimers[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
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

// KeepPublished copies published rows into courier_outbox_published; without
// it they are only deleted.
func testKeepPublished[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	plain, keep := db.newStore(t, false), db.newStore(t, true)
	msgs := []courier.Message{
		courier.NewMessage("events", "a", "T", []byte("dropped")),
		courier.NewMessage("events", "b", "T", []byte("kept"), courier.WithHeader("x-h", "v")),
	}
	db.write(t, msgs...)
	b := claim(t, plain, "p", 1, time.Minute)
	complete(t, plain, "p", b, store.Outcome{Published: seqs(b.Records)})
	if n := db.count(t, "courier_outbox_published"); n != 0 {
		t.Fatalf("%d rows archived without KeepPublished", n)
	}
	b = claim(t, keep, "k", 1, time.Minute)
	complete(t, keep, "k", b, store.Outcome{Retry: []store.Failure{{Seq: b.Records[0].Seq, Error: "once", Counted: true}}})
	b = claim(t, keep, "k", 1, time.Minute)
	complete(t, keep, "k", b, store.Outcome{Published: seqs(b.Records)})
	var (
		id       string
		attempts int
		payload  []byte
		dated    int
	)
	db.queryRow(t, []any{&id, &attempts, &payload}, "SELECT message_id, attempts, payload FROM courier_outbox_published WHERE id = ?", b.Records[0].Seq)
	if id != msgs[1].ID.String() || attempts != 1 || string(payload) != "kept" {
		t.Fatalf("archived row: id %s, attempts %d, payload %q; want %s, 1, kept", id, attempts, payload, msgs[1].ID)
	}
	db.queryRow(t, []any{&dated}, "SELECT count(*) FROM courier_outbox_published WHERE published_at IS NOT NULL")
	if dated != 1 || db.count(t, "courier_outbox") != 0 {
		t.Fatalf("%d archived rows with published_at, %d left in the outbox; want 1 and 0", dated, db.count(t, "courier_outbox"))
	}
}

// Stats counts pending, leased, backing-off and dead rows and dates the
// oldest pending one.
func testStats[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
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
}
