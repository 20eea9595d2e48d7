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
	st, err := postgres.NewStore(ctx, pg.Pool)
	testenv.Must(t, err, "store")
	var mu sync.Mutex
	seen := map[int64]string{}
	lastSeq := map[string]int64{}
	var wg sync.WaitGroup
	for w := range 8 {
		owner := fmt.Sprintf("claimer-%d", w)
		wg.Go(func() {
			for idle := 0; idle < 20; {
				recs, err := st.Claim(ctx, owner, 1+w*13, time.Minute)
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
				if err := st.Complete(ctx, owner, store.Outcome{Published: ids}); err != nil {
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
	st, err := postgres.NewStore(ctx, pg.Pool)
	testenv.Must(t, err, "store")
	recs, err := st.Claim(ctx, "dead", 100, time.Second)
	testenv.Must(t, err, "claim")
	if len(recs) != 10 {
		t.Fatalf("claimed %d, want 10", len(recs))
	}
	if again, _ := st.Claim(ctx, "alive", 100, time.Minute); len(again) != 0 {
		t.Fatalf("claimed %d leased rows before the lease ended", len(again))
	}
	time.Sleep(1100 * time.Millisecond)
	taken, err := st.Claim(ctx, "alive", 100, time.Minute)
	testenv.Must(t, err, "claim after expiry")
	if len(taken) != 10 {
		t.Fatalf("took over %d rows after the lease ended, want 10", len(taken))
	}
	// The dead owner's late outcome changes nothing.
	testenv.Must(t, st.Complete(ctx, "dead", store.Outcome{Published: []int64{recs[0].Seq}}), "late complete")
	if s, _ := st.Stats(ctx); s.Pending != 10 || s.Leased != 10 {
		t.Fatalf("after a stale owner's outcome: %+v, want 10 pending, all leased", s)
	}
}

func TestFailedRowHoldsBackItsKeyOnly(t *testing.T) {
	pg := testenv.Postgres(t, true)
	ctx := context.Background()
	fill(t, pg, 6, 2) // keys κλειδί-0: rows 1,3,5; κλειδί-1: rows 2,4,6
	st, err := postgres.NewStore(ctx, pg.Pool)
	testenv.Must(t, err, "store")
	recs, err := st.Claim(ctx, "r", 2, time.Minute) // rows 1 and 2
	testenv.Must(t, err, "claim")
	testenv.Must(t, st.Complete(ctx, "r", store.Outcome{
		Published: []int64{recs[1].Seq},
		Retry:     []store.Failure{{Seq: recs[0].Seq, Error: "boom", Delay: time.Hour, Counted: true}},
	}), "complete")
	next, err := st.Claim(ctx, "r", 100, time.Minute)
	testenv.Must(t, err, "claim")
	for _, r := range next {
		if r.Message.Key == recs[0].Message.Key {
			t.Fatalf("row %d of the failed key was claimed while row %d backs off", r.Seq, recs[0].Seq)
		}
	}
	if len(next) != 2 {
		t.Fatalf("claimed %d rows of the other key, want 2", len(next))
	}
	s, err := st.Stats(ctx)
	testenv.Must(t, err, "stats")
	if s.InBackoff != 3 { // the failed row and the two parked behind it
		t.Fatalf("stats %+v: want 3 in backoff", s)
	}
}
