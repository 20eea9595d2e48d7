package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
)

// A relay frozen while it records a batch (between its statements, so its
// transaction holds the rows it deletes) must not stop another relay that
// claimed those rows after the frozen one's lease ran out from recording
// the rest of its batch: the other's Complete leaves the held rows to
// their holder, records the others at once, and keeps its lease on the
// rows left until it runs out; after it, what the holder rolled back is
// claimed again.
func TestCompleteLeavesRowsAFrozenRelayHolds(t *testing.T) {
	for _, holder := range []string{"commits", "rolls back"} {
		t.Run("holder "+holder, func(t *testing.T) {
			ctx := context.Background()
			my := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
			d := mysql.NewDriver(my.DB)
			w := outbox.New(d.Inserter(), outbox.Config{})
			var msgs []courier.Message
			for i := range 10 {
				msgs = append(msgs, courier.NewMessage("events", fmt.Sprintf("k%d", i), "T", []byte("x")))
			}
			testenv.Must(t, d.InTx(ctx, func(tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) }), "write")

			frozen, err := d.RelayStore(ctx, store.RelayConfig{})
			testenv.Must(t, err, "store")
			fb, err := frozen.Claim(ctx, "frozen", 5, time.Second)
			testenv.Must(t, err, "the frozen relay's claim")
			if len(fb.Records) != 5 {
				t.Fatalf("the frozen relay claimed %d rows, want 5", len(fb.Records))
			}
			var held []string
			for _, r := range fb.Records {
				held = append(held, fmt.Sprint(r.Seq))
			}
			// What its Complete (READ COMMITTED) holds when it freezes
			// after deleting its published rows.
			tx, err := my.DB.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			testenv.Must(t, err, "begin")
			defer tx.Rollback() //nolint:errcheck // ended below
			_, err = tx.ExecContext(ctx, "DELETE FROM courier_outbox WHERE id IN ("+strings.Join(held, ",")+")")
			testenv.Must(t, err, "the frozen relay's delete")

			// The other relay's clock is past the frozen one's lease.
			later := d.WithClock(func() time.Time { return time.Now().Add(time.Minute) })
			other, err := later.RelayStore(ctx, store.RelayConfig{})
			testenv.Must(t, err, "store")
			ob, err := other.Claim(ctx, "other", 100, 10*time.Second)
			testenv.Must(t, err, "the other relay's claim")
			if len(ob.Records) != 10 {
				t.Fatalf("after the frozen relay's lease the other claimed %d rows, want all 10", len(ob.Records))
			}
			// Published but two, which fail for good: one of the frozen
			// relay's rows and one of its own become dead letters.
			var out store.Outcome
			for i, r := range ob.Records {
				if i == 0 || i == 9 {
					out.Dead = append(out.Dead, store.Failure{Seq: r.Seq, Error: "rejected", Counted: true})
					continue
				}
				out.Published = append(out.Published, r.Seq)
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			testenv.Must(t, other.Complete(cctx, "other", ob.Lease, out), "the other relay's Complete while the frozen one holds its rows")

			st, err := other.Stats(ctx)
			testenv.Must(t, err, "stats")
			if st.Pending != 5 || st.DeadLetters != 1 {
				t.Fatalf("while the frozen relay holds its 5 rows: %d pending and %d dead letters, want 5 and 1", st.Pending, st.DeadLetters)
			}
			// The rows left to the frozen relay stay leased to the other
			// until its lease runs out: not published again meanwhile.
			again, err := other.Claim(ctx, "other", 100, 10*time.Second)
			testenv.Must(t, err, "claim again")
			if len(again.Records) != 0 {
				t.Fatalf("claimed %d rows again while the other relay's lease on them runs", len(again.Records))
			}
			if holder == "commits" {
				testenv.Must(t, tx.Commit(), "the frozen relay's commit")
			} else {
				testenv.Must(t, tx.Rollback(), "the frozen relay's rollback")
			}
			// After both leases, what the frozen relay rolled back is
			// claimed again: duplicates, never a loss.
			want := 0
			if holder == "rolls back" {
				want = 5
			}
			last, err := d.WithClock(func() time.Time { return time.Now().Add(time.Hour) }).RelayStore(ctx, store.RelayConfig{})
			testenv.Must(t, err, "store")
			lb, err := last.Claim(ctx, "last", 100, time.Minute)
			testenv.Must(t, err, "the last claim")
			if len(lb.Records) != want {
				t.Fatalf("after the frozen relay %s, %d rows were claimed again, want %d", holder, len(lb.Records), want)
			}
			if st, err = other.Stats(ctx); err != nil || st.DeadLetters != 1 {
				t.Fatalf("after the frozen relay %s: %+v (%v), want 1 dead letter", holder, st, err)
			}
		})
	}
}

// The move of a held key's rows runs with a wait_timeout of a turn, so a
// relay frozen in it holds the turn's row no longer; the connection goes
// back to the pool with its own wait_timeout.
func TestMoveOfHeldRowsRestoresWaitTimeout(t *testing.T) {
	ctx := context.Background()
	my := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
	my.DB.SetMaxOpenConns(1) // every statement on the one connection
	conn, err := my.DB.Conn(ctx)
	testenv.Must(t, err, "conn")
	_, err = conn.ExecContext(ctx, "SET SESSION wait_timeout = 4321")
	testenv.Must(t, err, "set wait_timeout")
	testenv.Must(t, conn.Close(), "back to the pool")

	d := mysql.NewDriver(my.DB)
	w := outbox.New(d.Inserter(), outbox.Config{})
	msgs := []courier.Message{
		courier.NewMessage("events", "held", "T", []byte("1")),
		courier.NewMessage("events", "held", "T", []byte("2")),
	}
	testenv.Must(t, d.InTx(ctx, func(tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) }), "write")
	st, err := d.RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "store")
	b, err := st.Claim(ctx, "relay", 1, time.Minute)
	testenv.Must(t, err, "claim")
	dead := store.Failure{Seq: b.Records[0].Seq, Error: "rejected", Counted: true, Hold: true}
	testenv.Must(t, st.Complete(ctx, "relay", b.Lease, store.Outcome{Dead: []store.Failure{dead}}), "dead letter that holds its key")
	if b, err = st.Claim(ctx, "relay", 10, time.Minute); err != nil || len(b.Records) != 0 {
		t.Fatalf("claim behind the held key: %d rows (%v), want none", len(b.Records), err)
	}
	s, err := st.Stats(ctx)
	testenv.Must(t, err, "stats")
	if s.Held != 1 {
		t.Fatalf("%d rows held behind the dead letter, want 1 (the claim moves it)", s.Held)
	}
	var timeout int
	testenv.Must(t, my.DB.QueryRowContext(ctx, "SELECT @@SESSION.wait_timeout").Scan(&timeout), "read wait_timeout")
	if timeout != 4321 {
		t.Fatalf("after the move the connection's wait_timeout is %d, want its own 4321", timeout)
	}
}
