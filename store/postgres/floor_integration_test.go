package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// Claims scan from a floor that has moved past published rows; a row whose
// transaction commits long after it was inserted, and a dead letter replayed
// under its old id, both sit below that floor and are still claimed (by the
// next full pass).
func TestRowsBelowTheFloorAreClaimed(t *testing.T) {
	pg := testenv.Postgres(t, true)
	ctx := context.Background()
	st, err := postgres.NewStore(ctx, pg.Pool, postgres.StoreConfig{})
	testenv.Must(t, err, "store")
	w := outbox.New(postgres.Pgx(), outbox.Config{})
	write := func(msgs ...courier.Message) {
		tx, err := pg.Pool.Begin(ctx)
		testenv.Must(t, err, "begin")
		testenv.Must(t, w.Write(ctx, tx, msgs...), "write")
		testenv.Must(t, tx.Commit(ctx), "commit")
	}
	msg := func(key string) courier.Message { return courier.NewMessage("events", key, "T", []byte(key)) }
	// drain claims and publishes until want is claimed or the time is up,
	// reporting whether it was.
	drain := func(want courier.Message, within time.Duration) bool {
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			b, err := st.Claim(ctx, "r", 100, time.Minute)
			testenv.Must(t, err, "claim")
			found := false
			for _, r := range b.Records {
				found = found || r.Message.ID == want.ID
			}
			if len(b.Records) > 0 {
				testenv.Must(t, st.Complete(ctx, "r", b.Lease, store.Outcome{Published: seqsOf(b.Records)}), "complete")
			}
			if found {
				return true
			}
			time.Sleep(20 * time.Millisecond)
		}
		return false
	}

	// A transaction inserts a row and stays open past lateCommit while other
	// rows are written and published, so the floor moves past its id.
	late := msg("late")
	tx, err := pg.Pool.Begin(ctx)
	testenv.Must(t, err, "begin the long transaction")
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
	testenv.Must(t, w.Write(ctx, tx, late), "write in the long transaction")
	for i := range 8 {
		last := msg("steady")
		write(last)
		if !drain(last, 5*time.Second) {
			t.Fatalf("round %d: a committed row was not claimed", i)
		}
		time.Sleep(400 * time.Millisecond)
	}
	testenv.Must(t, tx.Commit(ctx), "commit the long transaction")
	if !drain(late, 10*time.Second) {
		t.Fatal("a row committed 3 s after its insert was never claimed")
	}

	// A dead letter replayed under its old id, below the floor.
	dead := msg("dead")
	write(dead)
	b, err := st.Claim(ctx, "r", 100, time.Minute)
	testenv.Must(t, err, "claim")
	if len(b.Records) != 1 || b.Records[0].Message.ID != dead.ID {
		t.Fatalf("claimed %d rows, want the one to park", len(b.Records))
	}
	testenv.Must(t, st.Complete(ctx, "r", b.Lease, store.Outcome{Dead: []store.Failure{{Seq: b.Records[0].Seq, Error: "parked", Counted: true}}}), "park")
	for range 6 {
		last := msg("steady")
		write(last)
		if !drain(last, 5*time.Second) {
			t.Fatal("a committed row was not claimed")
		}
		time.Sleep(400 * time.Millisecond)
	}
	testenv.Must(t, postgres.Admin(pg.Pool).ReplayDeadLetter(ctx, b.Records[0].Seq), "replay")
	if !drain(dead, 10*time.Second) {
		t.Fatal("a dead letter replayed under its old id was never claimed")
	}
}

func seqsOf(recs []store.Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Seq
	}
	return out
}
