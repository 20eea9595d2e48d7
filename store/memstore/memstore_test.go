package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/memstore"
)

// The cases of the dialects' conformance suite (store/storetest: claims,
// isolation, order) that concern the relay's store, run against the store
// in memory with a clock the tests move instead of sleeping.
func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, f *fixture)
	}{
		{"AtomicWrite", testAtomicWrite},
		{"EmptyPayload", testEmptyPayload},
		{"ClaimOrder", testClaimOrder},
		{"HotKey", testHotKey},
		{"Leases", testLeases},
		{"Retries", testRetries},
		{"HistoryLimit", testHistoryLimit},
		{"DeadLetters", testDeadLetters},
		{"ConcurrentClaimers", testConcurrentClaimers},
		{"KeepPublished", testKeepPublished},
		{"Stats", testStats},
		{"HeldKeyBacklog", testHeldKeyBacklog},
		{"OrderUnserialised", testOrderUnserialised},
		{"EndedContext", testEndedContext},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := memstore.NewClock()
			tc.test(t, &fixture{t: t, clock: clock, st: memstore.New(memstore.Config{Now: clock.Now})})
		})
	}
}

// fixture is one test's store and clock.
type fixture struct {
	t     *testing.T
	clock *memstore.Clock
	st    *memstore.Store
}

// write commits msgs in one transaction through an outbox writer.
func (f *fixture) write(msgs ...courier.Message) {
	f.t.Helper()
	w := outbox.New(f.st, outbox.Config{})
	ctx := context.Background()
	if err := f.st.InTx(ctx, func(tx *memstore.Tx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
		f.t.Fatalf("write %d messages: %v", len(msgs), err)
	}
}

func (f *fixture) claim(owner string, limit int, lease time.Duration) store.Batch {
	f.t.Helper()
	b, err := f.st.Claim(context.Background(), owner, limit, lease)
	if err != nil {
		f.t.Fatalf("claim by %s: %v", owner, err)
	}
	for i := 1; i < len(b.Records); i++ {
		if b.Records[i].Seq <= b.Records[i-1].Seq {
			f.t.Fatalf("claim by %s: records not in Seq order: %d after %d", owner, b.Records[i].Seq, b.Records[i-1].Seq)
		}
	}
	return b
}

func (f *fixture) complete(owner string, b store.Batch, o store.Outcome) {
	f.t.Helper()
	if err := f.st.Complete(context.Background(), owner, b.Lease, o); err != nil {
		f.t.Fatalf("complete lease %d of %s: %v", b.Lease, owner, err)
	}
}

func (f *fixture) stats() store.Stats {
	f.t.Helper()
	s, err := f.st.Stats(context.Background())
	if err != nil {
		f.t.Fatalf("stats: %v", err)
	}
	return s
}

// row returns the pending row seq.
func (f *fixture) row(seq int64) memstore.Row {
	f.t.Helper()
	for _, r := range f.st.Pending() {
		if r.Record.Seq == seq {
			return r
		}
	}
	f.t.Fatalf("row %d is not pending", seq)
	return memstore.Row{}
}

// numbered returns n messages whose keys cycle through keys distinct keys
// named prefix0, prefix1, …
func numbered(n, keys int, prefix string) []courier.Message {
	msgs := make([]courier.Message, n)
	for i := range msgs {
		msgs[i] = courier.NewMessage("events", fmt.Sprintf("%s%d", prefix, i%keys), "Numbered", fmt.Appendf(nil, `{"n":%d}`, i))
	}
	return msgs
}

func seqs(recs []store.Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Seq
	}
	return out
}

func keysOf(recs []store.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Message.Key
	}
	return out
}

// checkIDs fails unless recs are want's messages, in order.
func checkIDs(t *testing.T, when string, recs []store.Record, want ...courier.Message) {
	t.Helper()
	if len(recs) != len(want) {
		t.Fatalf("%s: claimed %d rows (keys %v), want %d", when, len(recs), keysOf(recs), len(want))
	}
	for i, r := range recs {
		if r.Message.ID != want[i].ID {
			t.Fatalf("%s: row %d is %s (key %s), want %s (key %s)", when, i, r.Message.ID, r.Message.Key, want[i].ID, want[i].Key)
		}
	}
}

func testAtomicWrite(t *testing.T, f *fixture) {
	one := courier.NewMessage("orders", "order-1", "OrderPlaced", []byte("commit"),
		courier.WithVersion(3), courier.WithContentType(courier.ContentTypeJSON),
		courier.WithOccurredAt(time.Date(2024, 2, 29, 23, 59, 58, 123456789, time.FixedZone("X", 5*3600))),
		courier.WithHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	f.write(one)
	w := outbox.New(f.st, outbox.Config{})
	ctx := context.Background()
	errBoom := errors.New("boom")
	err := f.st.InTx(ctx, func(tx *memstore.Tx) error {
		if err := w.Write(ctx, tx, courier.NewMessage("orders", "order-2", "OrderPlaced", []byte("rolled back"))); err != nil {
			return err
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("InTx returned %v, want fn's error", err)
	}
	tx := f.st.Begin()
	tx.Rollback()
	if err := w.Write(ctx, tx, one); !errors.Is(err, memstore.ErrTxDone) {
		t.Fatalf("write in a rolled-back transaction: %v, want ErrTxDone", err)
	}
	many := numbered(2500, 7, "k")
	f.write(many...)

	b := f.claim("reader", 10000, time.Minute)
	checkIDs(t, "after one committed and one rolled-back transaction", b.Records, append([]courier.Message{one}, many...)...)
	got := b.Records[0].Message
	want := one
	want.OccurredAt = want.OccurredAt.Truncate(time.Microsecond).UTC()
	if got.Topic != want.Topic || got.Key != want.Key || got.Type != want.Type || got.Version != want.Version ||
		got.ContentType != want.ContentType || string(got.Payload) != string(want.Payload) ||
		!maps.Equal(got.Headers, want.Headers) || !got.OccurredAt.Equal(want.OccurredAt) || got.OccurredAt.Location() != time.UTC {
		t.Fatalf("claimed %+v, want %+v", got, want)
	}
	got.Headers["traceparent"] = "changed"
	if again := f.st.Pending()[0].Record.Message; again.Headers["traceparent"] != one.Headers["traceparent"] {
		t.Fatal("changing a claimed message's headers changed the stored row")
	}
}

func testEmptyPayload(t *testing.T, f *fixture) {
	f.write(courier.NewMessage("t", "k", "Empty", nil), courier.NewMessage("t", "k", "Empty", []byte{}))
	b := f.claim("r", 100, time.Minute)
	if len(b.Records) != 2 {
		t.Fatalf("claimed %d rows, want 2", len(b.Records))
	}
	for _, r := range b.Records {
		if len(r.Message.Payload) != 0 || len(r.Message.Headers) != 0 {
			t.Errorf("row %d: payload %q, headers %v; want both empty", r.Seq, r.Message.Payload, r.Message.Headers)
		}
	}
}

func testClaimOrder(t *testing.T, f *fixture) {
	if b := f.claim("a", 10, time.Minute); len(b.Records) != 0 || b.Lease != 0 {
		t.Fatalf("an empty outbox gave %d rows, lease %d", len(b.Records), b.Lease)
	}
	msgs := numbered(30, 3, "k")
	f.write(msgs...)
	a := f.claim("a", 10, time.Minute)
	checkIDs(t, "first claim", a.Records, msgs[:10]...)
	if b := f.claim("b", 10, time.Minute); len(b.Records) != 0 {
		t.Fatalf("claimed %d rows of keys %v leased to another owner", len(b.Records), keysOf(b.Records))
	}
	late := courier.NewMessage("events", "k0", "Numbered", []byte("late"))
	fresh := courier.NewMessage("events", "fresh", "Numbered", []byte("fresh"))
	f.write(late, fresh)
	checkIDs(t, "with k0..k2 leased", f.claim("b", 10, time.Minute).Records, fresh)
	f.complete("a", a, store.Outcome{Published: seqs(a.Records)})
	checkIDs(t, "after the lease ended", f.claim("c", 100, time.Minute).Records, append(slices.Clone(msgs[10:]), late)...)
}

func testHotKey(t *testing.T, f *fixture) {
	msgs := numbered(3000, 1, "hot")
	f.write(msgs...)
	a := f.claim("a", 1000, time.Minute)
	checkIDs(t, "first claim", a.Records, msgs[:1000]...)
	if b := f.claim("b", 1000, time.Minute); len(b.Records) != 0 {
		t.Fatalf("second claimer got %d rows of a leased key", len(b.Records))
	}
	f.complete("a", a, store.Outcome{Published: seqs(a.Records)})
	checkIDs(t, "after the first run", f.claim("b", 1000, time.Minute).Records, msgs[1000:2000]...)
}

func testLeases(t *testing.T, f *fixture) {
	f.write(numbered(10, 2, "k")...)
	const lease = 3 * time.Second
	dead := f.claim("dead", 100, lease)
	if len(dead.Records) != 10 {
		t.Fatalf("claimed %d rows, want 10", len(dead.Records))
	}
	if b := f.claim("alive", 100, time.Minute); len(b.Records) != 0 {
		t.Fatalf("claimed %d leased rows before the lease ended", len(b.Records))
	}
	if s := f.stats(); s.Pending != 10 || s.Leased != 10 {
		t.Fatalf("stats %+v, want 10 pending, all leased", s)
	}
	other := courier.NewMessage("events", "other", "Numbered", []byte("other"))
	f.write(other)
	o := f.claim("alive", 100, time.Minute)
	checkIDs(t, "beside a live lease", o.Records, other)
	f.complete("alive", o, store.Outcome{Published: seqs(o.Records)})

	f.clock.Advance(lease)
	taken := f.claim("alive", 100, time.Minute)
	if !slices.Equal(seqs(taken.Records), seqs(dead.Records)) {
		t.Fatalf("after the lease ended took over rows %v, want %v", seqs(taken.Records), seqs(dead.Records))
	}
	f.complete("dead", dead, store.Outcome{
		Published: seqs(dead.Records[:5]),
		Retry:     []store.Failure{{Seq: dead.Records[5].Seq, Error: "late", Delay: time.Hour, Counted: true}},
		Dead:      []store.Failure{{Seq: dead.Records[6].Seq, Error: "late", Counted: true}},
	})
	if s := f.stats(); s.Pending != 10 || s.Leased != 10 || s.InBackoff != 0 || s.DeadLetters != 0 {
		t.Fatalf("after a stale owner's outcome: %+v, want 10 pending, all leased, nothing failed", s)
	}
	f.complete("intruder", taken, store.Outcome{Published: seqs(taken.Records)})
	if s := f.stats(); s.Pending != 10 || s.Leased != 10 {
		t.Fatalf("after another owner completed the lease: %+v, want 10 pending, all leased", s)
	}
	f.complete("alive", taken, store.Outcome{Published: []int64{taken.Records[0].Seq}})
	if s := f.stats(); s.Pending != 9 || s.Leased != 0 {
		t.Fatalf("after the live owner's outcome: %+v, want 9 pending (released), none leased", s)
	}
	again := f.claim("third", 100, time.Minute)
	if !slices.Equal(seqs(again.Records), seqs(taken.Records[1:])) {
		t.Fatalf("released rows: claimed %v, want %v at once", seqs(again.Records), seqs(taken.Records[1:]))
	}
	for _, r := range again.Records {
		if r.Attempts != 0 {
			t.Fatalf("row %d released unattempted has %d attempts", r.Seq, r.Attempts)
		}
	}
	// A lease that ends while its owner completes it: the outcome is lost.
	f.clock.Advance(time.Minute)
	f.complete("third", again, store.Outcome{Published: seqs(again.Records)})
	if s := f.stats(); s.Pending != 9 {
		t.Fatalf("an expired lease's outcome was applied: %+v", s)
	}
}

func testRetries(t *testing.T, f *fixture) {
	msgs := numbered(6, 2, "k") // k0: 0, 2, 4; k1: 1, 3, 5
	f.write(msgs...)
	const backoff = 3 * time.Second
	b := f.claim("r", 2, time.Minute)
	f.complete("r", b, store.Outcome{
		Published: []int64{b.Records[1].Seq},
		Retry:     []store.Failure{{Seq: b.Records[0].Seq, Error: "boom", Delay: backoff, Counted: true}},
	})
	next := f.claim("r", 100, time.Minute)
	checkIDs(t, "while k0 backs off", next.Records, msgs[3], msgs[5])
	if s := f.stats(); s.InBackoff != 1 || s.Pending != 5 {
		t.Fatalf("stats %+v: want 5 pending, 1 in backoff", s)
	}
	r := f.row(b.Records[0].Seq)
	if r.Record.Attempts != 1 || r.LastError != "boom" || len(r.History) != 1 || r.History[0].Error != "boom" || !r.History[0].Counted {
		t.Fatalf("failed row: %+v; want 1 attempt, boom, one counted entry", r)
	}

	complete := next
	f.complete("r", complete, store.Outcome{
		Retry: []store.Failure{{Seq: next.Records[0].Seq, Error: "broker unavailable", Delay: backoff, Counted: false}},
	})
	r = f.row(next.Records[0].Seq)
	if r.Record.Attempts != 0 || r.LastError != "broker unavailable" || len(r.History) != 1 || r.History[0].Counted {
		t.Fatalf("uncounted failure: %+v; want 0 attempts, the error, one uncounted entry", r)
	}
	if c := f.claim("r", 100, time.Minute); len(c.Records) != 0 {
		t.Fatalf("claimed keys %v while both keys back off", keysOf(c.Records))
	}

	// Due: each retried row is claimed alone, the rows of its key follow it.
	f.clock.Advance(backoff)
	after := f.claim("r", 100, time.Minute)
	checkIDs(t, "after the backoff", after.Records, msgs[0], msgs[3])
	if after.Records[0].Attempts != 1 || after.Records[1].Attempts != 0 {
		t.Fatalf("retried rows have %d and %d attempts, want 1 and 0", after.Records[0].Attempts, after.Records[1].Attempts)
	}
	f.complete("r", after, store.Outcome{Published: seqs(after.Records)})
	checkIDs(t, "after the retried rows were published", f.claim("r", 100, time.Minute).Records, msgs[2], msgs[4], msgs[5])
}

func testHistoryLimit(t *testing.T, f *fixture) {
	f.write(numbered(1, 1, "k")...)
	var seq int64
	for i := 1; i <= 25; i++ {
		b := f.claim("r", 1, time.Minute)
		if len(b.Records) != 1 || b.Records[0].Attempts != i-1 {
			t.Fatalf("attempt %d: claimed %d rows right after a failure with no delay", i, len(b.Records))
		}
		seq = b.Records[0].Seq
		f.complete("r", b, store.Outcome{Retry: []store.Failure{{Seq: seq, Error: fmt.Sprintf("fail %d", i), Counted: true}}})
	}
	r := f.row(seq)
	if r.Record.Attempts != 25 || r.LastError != "fail 25" || len(r.History) != memstore.HistoryLimit {
		t.Fatalf("after 25 failures: %d attempts, last error %q, %d history entries; want 25, fail 25, 20", r.Record.Attempts, r.LastError, len(r.History))
	}
	if r.History[0].Error != "fail 6" || r.History[19].Error != "fail 25" {
		t.Fatalf("history runs from %q to %q, want fail 6 … fail 25", r.History[0].Error, r.History[19].Error)
	}
}

func testDeadLetters(t *testing.T, f *fixture) {
	poison := courier.NewMessage("events", "k0", "Poison", []byte("poison payload"), courier.WithHeader("x-trace", "1"))
	nextOfKey := courier.NewMessage("events", "k0", "Fine", []byte("after the poison"))
	other := courier.NewMessage("events", "k1", "Fine", []byte("other key"))
	f.write(poison, nextOfKey, other)
	for i := 1; i <= 2; i++ {
		b := f.claim("r", 1, time.Minute)
		f.complete("r", b, store.Outcome{Retry: []store.Failure{{Seq: b.Records[0].Seq, Error: fmt.Sprintf("poison %d", i), Counted: true}}})
	}
	b := f.claim("r", 10, time.Minute)
	checkIDs(t, "the retried poison message alone of its key", b.Records, poison, other)
	f.complete("r", b, store.Outcome{
		Dead:      []store.Failure{{Seq: b.Records[0].Seq, Error: "poison 3", Counted: true}},
		Published: []int64{b.Records[1].Seq},
	})
	dl := f.st.DeadLetters()
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dl))
	}
	d := dl[0]
	if d.ID != b.Records[0].Seq || d.MessageID != poison.ID.String() || d.Attempts != 3 || d.LastError != "poison 3" ||
		string(d.Payload) != "poison payload" || d.Headers["x-trace"] != "1" || d.DeadAt.IsZero() {
		t.Fatalf("dead letter %+v", d)
	}
	if len(d.History) != 3 || d.History[0].Error != "poison 1" || d.History[2].Error != "poison 3" || !d.History[2].Counted {
		t.Fatalf("dead letter history %+v, want the three failures oldest first", d.History)
	}
	if s := f.stats(); s.DeadLetters != 1 || s.Pending != 1 || s.InBackoff != 0 {
		t.Fatalf("stats %+v, want 1 dead letter, 1 pending, none backing off", s)
	}
	checkIDs(t, "after the dead letter", f.claim("r", 10, time.Minute).Records, nextOfKey)
}

func testConcurrentClaimers(t *testing.T, f *fixture) {
	const n = 2000
	f.write(numbered(n, 37, "κλειδί-")...)
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[int64]string{}
	lastSeq := map[string]int64{}
	var wg sync.WaitGroup
	for w := range 8 {
		owner := fmt.Sprintf("claimer-%d", w)
		wg.Go(func() {
			for idle := 0; idle < 20; {
				batch, err := f.st.Claim(ctx, owner, 1+w*13, time.Minute)
				if err != nil {
					t.Errorf("claim by %s: %v", owner, err)
					return
				}
				if len(batch.Records) == 0 {
					idle++
					time.Sleep(time.Millisecond)
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
				if err := f.st.Complete(ctx, owner, batch.Lease, store.Outcome{Published: seqs(batch.Records)}); err != nil {
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
	if s := f.stats(); s.Pending != 0 || s.Leased != 0 {
		t.Fatalf("after every row was published: %+v", s)
	}
}

func testKeepPublished(t *testing.T, f *fixture) {
	f.write(courier.NewMessage("events", "a", "T", []byte("dropped")))
	b := f.claim("p", 1, time.Minute)
	f.complete("p", b, store.Outcome{Published: seqs(b.Records)})
	if n := len(f.st.Published()); n != 0 {
		t.Fatalf("%d rows kept without KeepPublished", n)
	}

	keep := memstore.New(memstore.Config{Now: f.clock.Now, KeepPublished: true})
	f.st = keep
	kept := courier.NewMessage("events", "b", "T", []byte("kept"), courier.WithHeader("x-h", "v"))
	f.write(kept)
	b = f.claim("k", 1, time.Minute)
	f.complete("k", b, store.Outcome{Retry: []store.Failure{{Seq: b.Records[0].Seq, Error: "once", Counted: true}}})
	b = f.claim("k", 1, time.Minute)
	f.complete("k", b, store.Outcome{Published: seqs(b.Records)})
	p := keep.Published()
	if len(p) != 1 || p[0].Record.Message.ID != kept.ID || p[0].Record.Attempts != 1 || string(p[0].Record.Message.Payload) != "kept" ||
		p[0].PublishedAt.IsZero() || len(keep.Pending()) != 0 {
		t.Fatalf("kept rows %+v and %d pending; want the one published row with 1 attempt, and none pending", p, len(keep.Pending()))
	}
}

func testStats(t *testing.T, f *fixture) {
	s := f.stats()
	if s.Pending != 0 || s.Leased != 0 || s.InBackoff != 0 || s.DeadLetters != 0 || !s.OldestPending.IsZero() || s.OldestPendingAge() != 0 {
		t.Fatalf("empty outbox: %+v", s)
	}
	written := f.clock.Now()
	f.write(numbered(5, 5, "k")...)
	f.clock.Advance(time.Minute)
	s = f.stats()
	if s.Pending != 5 || s.Leased != 0 || s.InBackoff != 0 || s.DeadLetters != 0 {
		t.Fatalf("5 new rows: %+v", s)
	}
	if age := s.OldestPendingAge(); age < time.Minute || age > time.Minute+5*time.Second || s.OldestPending.Before(written) {
		t.Fatalf("oldest pending %s, age %s; want written at %s, a minute old", s.OldestPending, age, written)
	}
	b := f.claim("r", 3, time.Minute)
	if s := f.stats(); s.Leased != 3 || s.Pending != 5 {
		t.Fatalf("3 leased: %+v", s)
	}
	f.complete("r", b, store.Outcome{
		Retry: []store.Failure{{Seq: b.Records[0].Seq, Error: "later", Delay: time.Hour, Counted: true}},
		Dead:  []store.Failure{{Seq: b.Records[1].Seq, Error: "never", Counted: true}},
	})
	if s := f.stats(); s.Pending != 4 || s.Leased != 0 || s.InBackoff != 1 || s.DeadLetters != 1 {
		t.Fatalf("after a retry and a dead letter: %+v, want 4 pending, 1 backing off, 1 dead", s)
	}
	f.claim("r", 10, time.Minute)
	if s := f.stats(); s.Leased != 3 || s.Pending != 4 {
		t.Fatalf("after claiming the 3 claimable rows: %+v", s)
	}
	f.clock.Advance(2 * time.Hour)
	if s := f.stats(); s.Leased != 0 || s.InBackoff != 0 {
		t.Fatalf("after the lease and the backoff ended: %+v", s)
	}
}

func testHeldKeyBacklog(t *testing.T, f *fixture) {
	f.write(courier.NewMessage("events", "poisoned", "Poison", []byte("poison")))
	p := f.claim("r", 10, time.Minute)
	f.complete("r", p, store.Outcome{Retry: []store.Failure{{Seq: p.Records[0].Seq, Error: "rejected", Delay: time.Hour, Counted: true}}})
	backlog := make([]courier.Message, 5000)
	for i := range backlog {
		backlog[i] = courier.NewMessage("events", "poisoned", "Numbered", fmt.Appendf(nil, "%d", i))
	}
	f.write(backlog...)
	other := courier.NewMessage("events", "other", "Other", []byte("other"))
	f.write(other)
	b := f.claim("r", 10, time.Minute)
	checkIDs(t, "behind a held key's 5,000 rows", b.Records, other)
	f.complete("r", b, store.Outcome{Published: seqs(b.Records)})

	bulk := numbered(15000, 1, "bulk")
	f.write(bulk...)
	late := courier.NewMessage("events", "late", "Other", []byte("late"))
	f.write(late)
	checkIDs(t, "first claim of a bulk write", f.claim("a", 1000, time.Minute).Records, bulk[:1000]...)
	checkIDs(t, "while bulk0 is leased", f.claim("b", 1000, time.Minute).Records, late)
}

// T1 inserts first and commits last: a claim in between sees T2's row
// alone, and T1's row waits for T2's lease (package relay, Ordering).
func testOrderUnserialised(t *testing.T, f *fixture) {
	ctx := context.Background()
	w := outbox.New(f.st, outbox.Config{})
	m1 := courier.NewMessage("events", "aggregate", "First", []byte("written first, committed last"))
	m2 := courier.NewMessage("events", "aggregate", "Second", []byte("written second, committed first"))
	t1, t2 := f.st.Begin(), f.st.Begin()
	if err := w.Write(ctx, t1, m1); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, t2, m2); err != nil {
		t.Fatal(err)
	}
	if err := t2.Commit(); err != nil {
		t.Fatal(err)
	}
	b1 := f.claim("r1", 10, time.Minute)
	checkIDs(t, "with T1 open and T2 committed", b1.Records, m2)
	if err := t1.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := t1.Commit(); !errors.Is(err, memstore.ErrTxDone) {
		t.Fatalf("second commit: %v, want ErrTxDone", err)
	}
	if b := f.claim("r2", 10, time.Minute); len(b.Records) != 0 {
		t.Fatalf("claimed %v while T2's message of the same key is leased", keysOf(b.Records))
	}
	f.complete("r1", b1, store.Outcome{Published: seqs(b1.Records)})
	b2 := f.claim("r2", 10, time.Minute)
	checkIDs(t, "after T2's message was published", b2.Records, m1)
	if b2.Records[0].Seq >= b1.Records[0].Seq {
		t.Fatalf("T1's row has Seq %d, T2's %d: T1 inserted first", b2.Records[0].Seq, b1.Records[0].Seq)
	}
}

// Operations on an ended context fail as a database call would, and change
// nothing.
func testEndedContext(t *testing.T, f *fixture) {
	f.write(numbered(3, 1, "k")...)
	b := f.claim("r", 10, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.st.Claim(ctx, "r", 10, time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("claim: %v, want context.Canceled", err)
	}
	if err := f.st.Complete(ctx, "r", b.Lease, store.Outcome{Published: seqs(b.Records)}); !errors.Is(err, context.Canceled) {
		t.Fatalf("complete: %v, want context.Canceled", err)
	}
	if _, err := f.st.Stats(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("stats: %v, want context.Canceled", err)
	}
	if s := f.stats(); s.Pending != 3 || s.Leased != 3 {
		t.Fatalf("after failed calls: %+v, want 3 pending, all leased", s)
	}
}
