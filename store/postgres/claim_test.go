package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

func fill(t *testing.T, pg *testenv.PG, n, keys int) {
	t.Helper()
	ctx := context.Background()
	w := outbox.New(postgres.Pgx(), outbox.Config{})
	msgs := make([]courier.Message, n)
	for i := range msgs {
		msgs[i] = courier.NewMessage("t", fmt.Sprintf("κλειδί-%d", i%keys), "T", []byte{byte(i)})
	}
	tx, err := pg.Pool.Begin(ctx)
	testenv.Must(t, err, "begin")
	testenv.Must(t, w.Write(ctx, tx, msgs...), "write")
	testenv.Must(t, tx.Commit(ctx), "commit")
}

// Eight claimers race; each key's rows must be handed out in order, one run
// at a time, and every row exactly once.
func TestConcurrentClaimsKeepKeysInOrder(t *testing.T) {
	pg := testenv.Postgres(t, true)
	ctx := context.Background()
	fill(t, pg, 5000, 37)
	st, err := postgres.NewStore(ctx, pg.Pool, postgres.StoreConfig{})
	testenv.Must(t, err, "store")
	var mu sync.Mutex
	seen := map[int64]string{}
	lastSeq := map[string]int64{}
	var wg sync.WaitGroup
	for w := range 8 {
		owner := fmt.Sprintf("claimer-%d", w)
		wg.Go(func() {
			for idle := 0; idle < 20; {
				batch, err := st.Claim(ctx, owner, 1+w*13, time.Minute)
				recs := batch.Records
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if len(recs) == 0 {
					idle++
					time.Sleep(5 * time.Millisecond)
					continue
				}
				idle = 0
				ids := make([]int64, len(recs))
				mu.Lock()
				for i, r := range recs {
					if prev, ok := seen[r.Seq]; ok {
						t.Errorf("row %d claimed by %s and %s", r.Seq, prev, owner)
					}
					seen[r.Seq] = owner
					if r.Seq < lastSeq[r.Message.Key] {
						t.Errorf("key %s: row %d claimed after row %d", r.Message.Key, r.Seq, lastSeq[r.Message.Key])
					}
					lastSeq[r.Message.Key] = r.Seq
					ids[i] = r.Seq
				}
				mu.Unlock()
				if err := st.Complete(ctx, owner, batch.Lease, store.Outcome{Published: ids}); err != nil {
					t.Errorf("complete: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != 5000 {
		t.Fatalf("%d rows claimed, want 5000", len(seen))
	}
}

func TestExpiredLeaseIsTakenOver(t *testing.T) {
	pg := testenv.Postgres(t, true)
	ctx := context.Background()
	fill(t, pg, 10, 2)
	st, err := postgres.NewStore(ctx, pg.Pool, postgres.StoreConfig{})
	testenv.Must(t, err, "store")
	dead, err := st.Claim(ctx, "dead", 100, time.Second)
	testenv.Must(t, err, "claim")
	if len(dead.Records) != 10 {
		t.Fatalf("claimed %d, want 10", len(dead.Records))
	}
	if again, _ := st.Claim(ctx, "alive", 100, time.Minute); len(again.Records) != 0 {
		t.Fatalf("claimed %d leased rows before the lease ended", len(again.Records))
	}
	if s, _ := st.Stats(ctx); s.Pending != 10 || s.Leased != 10 {
		t.Fatalf("stats %+v, want 10 pending, all leased", s)
	}
	time.Sleep(1100 * time.Millisecond)
	taken, err := st.Claim(ctx, "alive", 100, time.Minute)
	testenv.Must(t, err, "claim after expiry")
	if len(taken.Records) != 10 {
		t.Fatalf("took over %d rows after the lease ended, want 10", len(taken.Records))
	}
	// The dead owner's late outcome changes nothing.
	testenv.Must(t, st.Complete(ctx, "dead", dead.Lease, store.Outcome{Published: []int64{dead.Records[0].Seq}}), "late complete")
	if s, _ := st.Stats(ctx); s.Pending != 10 || s.Leased != 10 {
		t.Fatalf("after a stale owner's outcome: %+v, want 10 pending, all leased", s)
	}
	testenv.Must(t, st.Complete(ctx, "alive", taken.Lease, store.Outcome{Published: []int64{taken.Records[0].Seq}}), "complete")
	if s, _ := st.Stats(ctx); s.Pending != 9 || s.Leased != 0 {
		t.Fatalf("after the live owner's outcome: %+v, want 9 pending (released), none leased", s)
	}
}

func TestFailedRowHoldsBackItsKeyOnly(t *testing.T) {
	pg := testenv.Postgres(t, true)
	ctx := context.Background()
	fill(t, pg, 6, 2) // keys κλειδί-0: rows 1,3,5; κλειδί-1: rows 2,4,6
	st, err := postgres.NewStore(ctx, pg.Pool, postgres.StoreConfig{KeepPublished: true})
	testenv.Must(t, err, "store")
	b, err := st.Claim(ctx, "r", 2, time.Minute) // rows 1 and 2
	testenv.Must(t, err, "claim")
	recs := b.Records
	testenv.Must(t, st.Complete(ctx, "r", b.Lease, store.Outcome{
		Published: []int64{recs[1].Seq},
		Retry:     []store.Failure{{Seq: recs[0].Seq, Error: "boom", Delay: time.Hour, Counted: true}},
	}), "complete")
	next, err := st.Claim(ctx, "r", 100, time.Minute)
	testenv.Must(t, err, "claim")
	for _, r := range next.Records {
		if r.Message.Key == recs[0].Message.Key {
			t.Fatalf("row %d of the failed key was claimed while row %d backs off", r.Seq, recs[0].Seq)
		}
	}
	if len(next.Records) != 2 {
		t.Fatalf("claimed %d rows of the other key, want 2", len(next.Records))
	}
	s, err := st.Stats(ctx)
	testenv.Must(t, err, "stats")
	if s.InBackoff != 1 || s.Pending != 5 {
		t.Fatalf("stats %+v: want 5 pending, 1 in backoff", s)
	}
	var attempts int
	var lastErr string
	testenv.Must(t, pg.Pool.QueryRow(ctx, "SELECT attempts, last_error FROM courier_outbox WHERE id = $1", recs[0].Seq).Scan(&attempts, &lastErr), "read")
	if attempts != 1 || lastErr != "boom" {
		t.Fatalf("failed row: attempts %d, last error %q", attempts, lastErr)
	}
	var archived int
	testenv.Must(t, pg.Pool.QueryRow(ctx, "SELECT count(*) FROM courier_outbox_published WHERE id = $1 AND published_at IS NOT NULL", recs[1].Seq).Scan(&archived), "archive")
	if archived != 1 {
		t.Fatal("published row not kept with KeepPublished")
	}
}

// A claimed run of one key is its oldest rows, and no other claim gets
// any row of that key until the lease ends.
func TestHotKeyClaimedInWholeRuns(t *testing.T) {
	pg := testenv.Postgres(t, true)
	ctx := context.Background()
	fill(t, pg, 3000, 1)
	st, err := postgres.NewStore(ctx, pg.Pool, postgres.StoreConfig{})
	testenv.Must(t, err, "store")
	a, err := st.Claim(ctx, "a", 1000, time.Minute)
	testenv.Must(t, err, "claim")
	if len(a.Records) != 1000 || a.Records[0].Seq != 1 || a.Records[999].Seq != 1000 {
		t.Fatalf("first claim: %d rows from %d", len(a.Records), a.Records[0].Seq)
	}
	if b, _ := st.Claim(ctx, "b", 1000, time.Minute); len(b.Records) != 0 {
		t.Fatalf("second claimer got %d rows of a leased key", len(b.Records))
	}
	ids := make([]int64, len(a.Records))
	for i, r := range a.Records {
		ids[i] = r.Seq
	}
	testenv.Must(t, st.Complete(ctx, "a", a.Lease, store.Outcome{Published: ids}), "complete")
	b, err := st.Claim(ctx, "b", 1000, time.Minute)
	testenv.Must(t, err, "claim")
	if len(b.Records) != 1000 || b.Records[0].Seq != 1001 {
		t.Fatalf("after the first run: %d rows from %d", len(b.Records), b.Records[0].Seq)
	}
}
