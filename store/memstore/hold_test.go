package memstore_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/memstore"
)

// insert commits one message per payload on key k.
func insert(t *testing.T, st *memstore.Store, k string, payloads ...string) {
	t.Helper()
	err := st.InTx(context.Background(), func(tx *memstore.Tx) error {
		for _, p := range payloads {
			if err := st.Insert(context.Background(), tx, []courier.Message{courier.NewMessage("orders", k, "T", []byte(p))}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// payloads returns the payloads of recs, or of rows, of key k.
func payloads(recs []store.Record, k string) []string {
	var out []string
	for _, r := range recs {
		if k == "" || r.Message.Key == k {
			out = append(out, string(r.Message.Payload))
		}
	}
	return out
}

func pendingRecords(st *memstore.Store) []store.Record {
	var recs []store.Record
	for _, r := range st.Pending() {
		recs = append(recs, r.Record)
	}
	return recs
}

// holding makes key a's head a dead letter that holds (hold) or does not
// hold the key, with b and c behind it and key x beside it, and returns the
// dead letter's id.
func holding(t *testing.T, st *memstore.Store, hold bool) int64 {
	t.Helper()
	ctx := context.Background()
	insert(t, st, "a", "a1", "a2", "a3")
	insert(t, st, "x", "x1")
	b, err := st.Claim(ctx, "r", 10, time.Minute)
	if err != nil || len(b.Records) != 4 {
		t.Fatalf("claim: %v, %d records", err, len(b.Records))
	}
	cause := b.Records[0].Seq
	if err := st.Complete(ctx, "r", b.Lease, store.Outcome{Published: []int64{b.Records[3].Seq},
		Dead: []store.Failure{{Seq: cause, Error: "refused", Counted: true, Hold: hold}}}); err != nil {
		t.Fatal(err)
	}
	return cause
}

// A dead letter that holds its key keeps the key's rows, present and later,
// behind it, apart from the pending ones; other keys go on; Stats counts
// them; Trim keeps it.
func TestHoldKeepsTheKey(t *testing.T) {
	clock := memstore.NewClock()
	clock.Set(time.Unix(1000, 0))
	st := memstore.New(memstore.Config{Clock: clock.Now})
	ctx := context.Background()
	cause := holding(t, st, true)
	insert(t, st, "a", "a4")
	insert(t, st, "y", "y1")
	b, err := st.Claim(ctx, "r", 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := payloads(b.Records, ""); !slices.Equal(got, []string{"y1"}) {
		t.Fatalf("claimed %q, want y1 alone: key a is held", got)
	}
	if got := payloads(pendingRecords(st), "a"); len(got) != 0 {
		t.Fatalf("pending rows of a: %q, want none (held)", got)
	}
	st.Complete(ctx, "r", b.Lease, store.Outcome{Published: []int64{b.Records[0].Seq}})
	stats, _ := st.Stats(ctx)
	if stats.HeldKeys != 1 || stats.Held != 3 || stats.Pending != 0 || !stats.OldestHold.Equal(time.Unix(1000, 0).UTC()) {
		t.Fatalf("stats: %+v, want 1 held key, 3 held rows, none pending", stats)
	}
	d := st.DeadLetters()
	if len(d) != 1 || d[0].ID != cause || !d[0].Holds || d[0].Held != 3 {
		t.Fatalf("dead letters: %+v", d)
	}
	clock.Advance(time.Hour)
	if _, err := st.Operations().Trim(ctx, store.Trim{Table: store.TableDeadLetters, Before: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if len(st.DeadLetters()) != 1 {
		t.Fatal("Trim deleted a dead letter that holds its key")
	}
}

// Replaying a holding dead letter puts it back, then its held rows, then
// its key's pending ones, with new Seqs in that order, no attempts, and
// releases the key; discarding one puts back the rest the same way.
func TestHoldReplayAndDiscard(t *testing.T) {
	for _, c := range []struct {
		name string
		act  func(*memstore.Store, context.Context, int64) error
		want []string
	}{
		{"replay", (*memstore.Store).ReplayDeadLetter, []string{"a1", "a2", "a3", "a4"}},
		{"discard", (*memstore.Store).DiscardDeadLetter, []string{"a2", "a3", "a4"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := memstore.New(memstore.Config{})
			ctx := context.Background()
			cause := holding(t, st, true)
			b, _ := st.Claim(ctx, "r", 10, time.Minute) // moves a2, a3 behind the cause
			if len(b.Records) != 0 {
				t.Fatalf("claimed %d records of a held key", len(b.Records))
			}
			insert(t, st, "a", "a4") // pending, not yet met by a claim
			if err := c.act(st, ctx, cause); err != nil {
				t.Fatal(err)
			}
			recs := pendingRecords(st)
			if got := payloads(recs, "a"); !slices.Equal(got, c.want) {
				t.Fatalf("pending after %s: %q, want %q", c.name, got, c.want)
			}
			for i, r := range recs {
				if r.Seq <= cause+3 || r.Attempts != 0 || (i > 0 && r.Seq <= recs[i-1].Seq) {
					t.Fatalf("pending row %d: %+v, want a new Seq, ascending, no attempts", i, r)
				}
			}
			if stats, _ := st.Stats(ctx); stats.HeldKeys != 0 || stats.Held != 0 || !stats.OldestHold.IsZero() || stats.DeadLetters != 0 {
				t.Fatalf("stats: %+v, want nothing held", stats)
			}
			b, _ = st.Claim(ctx, "r", 10, time.Minute)
			if got := payloads(b.Records, ""); !slices.Equal(got, c.want) {
				t.Fatalf("claimed %q, want %q", got, c.want)
			}
			if err := c.act(st, ctx, cause); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("again: %v, want ErrNotFound", err)
			}
		})
	}
}

// A dead letter that does not hold its key lets the key move on; replaying
// it puts it back with its own Seq.
func TestNoHold(t *testing.T) {
	st := memstore.New(memstore.Config{})
	ctx := context.Background()
	cause := holding(t, st, false)
	b, _ := st.Claim(ctx, "r", 10, time.Minute)
	if got := payloads(b.Records, ""); !slices.Equal(got, []string{"a2", "a3"}) {
		t.Fatalf("claimed %q, want a2 a3: the key moves on", got)
	}
	st.Complete(ctx, "r", b.Lease, store.Outcome{})
	if d := st.DeadLetters(); len(d) != 1 || d[0].Holds {
		t.Fatalf("dead letters: %+v", d)
	}
	if err := st.ReplayDeadLetter(ctx, cause); err != nil {
		t.Fatal(err)
	}
	recs := pendingRecords(st)
	if got := payloads(recs, "a"); !slices.Equal(got, []string{"a1", "a2", "a3"}) || recs[0].Seq != cause {
		t.Fatalf("pending: %+v, want a1 back with its Seq, first", recs)
	}
	if err := st.DiscardDeadLetter(ctx, 999); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("discard of none: %v", err)
	}
}
