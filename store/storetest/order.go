package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

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
func begin[TTx any](ctx context.Context, db *testDB[TTx], msgs ...courier.Message) *openTx {
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
func testOrderUnserialised[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
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
	if db.SerialWrites() {
		select {
		case err := <-t2.done:
			t.Fatalf("T2 ended (%v) while T1 was still writing; the harness says the database runs one writer at a time (Driver.SerialWrites)", err)
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
