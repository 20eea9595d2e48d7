package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/store"
)

// benchBatch is the relay's default claim size.
const benchBatch = 1000

// BenchmarkRelayStore measures a dialect's relay store alone, with no
// broker: a relay's claims of 1,000 rows, each followed by the Complete that
// records them all published, draining b.N messages (at least 10,000)
// written beforehand over 10,000 keys and over one key. It reports the
// drain in msg/s, and the time a claim and a complete take, which is the
// database's side of every relay's drain.
func BenchmarkRelayStore[TTx any](b *testing.B, open func(t testing.TB, clock store.Clock) Harness[TTx]) {
	for _, keys := range []int{10000, 1} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			db := openDB(b, open, nil, true)
			ctx := context.Background()
			n := max(b.N, 10*benchBatch)
			msgs := numbered(n, keys, "bench-")
			for i := 0; i < n; i += benchBatch {
				if err := db.writeTx(ctx, msgs[i:min(i+benchBatch, n)], true); err != nil {
					b.Fatalf("fill: %v", err)
				}
			}
			st, err := db.RelayStore(ctx, store.RelayConfig{})
			if err != nil {
				b.Fatalf("relay store: %v", err)
			}
			var claiming, completing time.Duration
			batches := 0
			b.ResetTimer()
			start := time.Now()
			for done := 0; done < n; {
				t0 := time.Now()
				batch, err := st.Claim(ctx, "bench", benchBatch, time.Minute)
				if err != nil {
					b.Fatalf("claim: %v", err)
				}
				if len(batch.Records) == 0 {
					b.Fatalf("claim: nothing after %d of %d messages", done, n)
				}
				t1 := time.Now()
				published := make([]int64, len(batch.Records))
				for i, r := range batch.Records {
					published[i] = r.Seq
				}
				if err := st.Complete(ctx, "bench", batch.Lease, store.Outcome{Published: published}); err != nil {
					b.Fatalf("complete: %v", err)
				}
				claiming, completing = claiming+t1.Sub(t0), completing+time.Since(t1)
				done += len(published)
				batches++
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(n)/elapsed.Seconds(), "msg/s")
			b.ReportMetric(float64(claiming.Microseconds())/float64(batches), "µs/claim")
			b.ReportMetric(float64(completing.Microseconds())/float64(batches), "µs/complete")
		})
	}
}

// BenchmarkInbox measures a dialect's inbox alone: the transaction that
// applies a message, with no work of a handler, marking it and deleting
// its recorded failures ([store.Inbox.Mark]). Its cases are a message that
// never failed (most messages) and one with 3 recorded failures, each
// beside 1,000 failures of 100 other messages, its transaction committed
// (what an application costs) or rolled back (what its statements cost,
// without the commit's flush to disk, which dominates the other and varies
// with the disk). It reports the time one application takes.
//
// Where the inbox marks groups ([store.GroupInbox]), its group cases apply
// messages that never failed in groups of 1, 10 and 100 a committed
// transaction: marked by one MarkGroup ("group=n/MarkGroup") and, to
// compare, by a Mark each ("group=n/Mark"). They report the time a message
// takes.
func BenchmarkInbox[TTx any](b *testing.B, open func(t testing.TB, clock store.Clock) Harness[TTx]) {
	for _, failures := range []int{0, 3} {
		for _, commit := range []bool{true, false} {
			name := fmt.Sprintf("failures=%d/committed", failures)
			if !commit {
				name = fmt.Sprintf("failures=%d/rolled-back", failures)
			}
			b.Run(name, func(b *testing.B) { benchmarkInbox(b, open, failures, commit) })
		}
	}
	for _, n := range []int{1, 10, 100} {
		for _, grouped := range []bool{true, false} {
			name := fmt.Sprintf("group=%d/MarkGroup", n)
			if !grouped {
				name = fmt.Sprintf("group=%d/Mark", n)
			}
			b.Run(name, func(b *testing.B) { benchmarkInboxGroups(b, open, n, grouped) })
		}
	}
}

// benchmarkInboxGroups applies b.N messages in committed groups of size
// messages, each group marked by MarkGroup when grouped, else by a Mark a
// message.
func benchmarkInboxGroups[TTx any](b *testing.B, open func(t testing.TB, clock store.Clock) Harness[TTx], size int, grouped bool) {
	db := openDB(b, open, nil, true)
	ctx := context.Background()
	gi, ok := db.Inbox().(store.GroupInbox[TTx])
	if !ok {
		b.Skipf("the inbox (%T) does not mark groups", db.Inbox())
	}
	ids := make([]uuid.UUID, b.N)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	sortIDs(ids)
	b.ResetTimer()
	start := time.Now()
	for group := range slices.Chunk(ids, size) {
		err := gi.InTx(ctx, func(tx TTx) error {
			if grouped {
				fresh, err := gi.MarkGroup(ctx, tx, "bench", group)
				if err == nil && slices.Contains(fresh, false) {
					err = fmt.Errorf("a marker of the group is a duplicate: %v", fresh)
				}
				return err
			}
			for _, id := range group {
				fresh, err := gi.Mark(ctx, tx, "bench", id)
				if err != nil {
					return err
				}
				if !fresh {
					return fmt.Errorf("the marker of %s is a duplicate", id)
				}
			}
			return nil
		})
		if err != nil {
			b.Fatalf("apply a group: %v", err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N), "ns/message")
}

func benchmarkInbox[TTx any](b *testing.B, open func(t testing.TB, clock store.Clock) Harness[TTx], failures int, commit bool) {
	db := openDB(b, open, nil, true)
	ctx := context.Background()
	ib, cs := db.Inbox(), db.ConsumerStore()
	record := func(id uuid.UUID, n int) {
		for i := range n {
			if _, err := cs.RecordFailure(ctx, "bench", id, store.Attempt{At: time.Now().UTC(), Error: fmt.Sprintf("run %d failed", i+1)}); err != nil {
				b.Fatalf("record failure: %v", err)
			}
		}
	}
	for range 100 {
		record(uuid.Must(uuid.NewV7()), 10)
	}
	ids := make([]uuid.UUID, b.N)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
		record(ids[i], failures)
	}
	b.ResetTimer()
	start := time.Now()
	for _, id := range ids {
		err := inTx(ib.InTx, commit, func(tx TTx) error {
			fresh, err := ib.Mark(ctx, tx, "bench", id)
			if err == nil && !fresh {
				err = fmt.Errorf("the marker of %s is a duplicate", id)
			}
			return err
		})
		if err != nil {
			b.Fatalf("apply: %v", err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(elapsed.Microseconds())/float64(b.N), "µs/apply")
}
