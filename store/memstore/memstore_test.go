package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/memstore"
	"github.com/courier-go/courier/store/storetest"
)

// The relay store's part of the dialects' conformance suite, on a fresh
// store per test whose clock is the suite's.
func TestConformance(t *testing.T) {
	storetest.ExerciseRelayStore(t, func(_ testing.TB, clock store.Clock) storetest.RelayHarness[*memstore.Tx] {
		st := memstore.New(memstore.Config{Clock: clock})
		return storetest.RelayHarness[*memstore.Tx]{
			Inserter: st, InTx: st.InTx, RelayStore: st.RelayStore, Operations: st.Operations, Inspect: inspector{st},
		}
	})
}

// inspector shows a Store's rows to the suite.
type inspector struct{ st *memstore.Store }

func (i inspector) Failures(_ context.Context, seq int64) (storetest.Failures, error) {
	for _, r := range i.st.Pending() {
		if r.Record.Seq == seq {
			return storetest.Failures{Attempts: r.Record.Attempts, LastError: r.LastError, History: r.History}, nil
		}
	}
	return storetest.Failures{}, errors.New("no such pending row")
}

func (i inspector) DeadLetters(context.Context) ([]store.DeadLetter, error) {
	return i.st.DeadLetters(), nil
}

func (i inspector) Published(_ context.Context, seq int64) (storetest.Published, bool, error) {
	for _, r := range i.st.Published() {
		if r.Record.Seq == seq {
			m := r.Record.Message
			return storetest.Published{MessageID: m.ID.String(), Attempts: r.Record.Attempts, Payload: m.Payload,
				Dated: !r.PublishedAt.IsZero()}, true, nil
		}
	}
	return storetest.Published{}, false, nil
}

// InTx returns fn's error and rolls back; a finished transaction refuses
// inserts and a second commit; a claimed message is a copy.
func TestTransactions(t *testing.T) {
	st := memstore.New(memstore.Config{})
	w := outbox.New(st, outbox.Config{})
	ctx := context.Background()
	one := courier.NewMessage("orders", "order-1", "OrderPlaced", []byte("commit"),
		courier.WithHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	if err := st.InTx(ctx, func(tx *memstore.Tx) error { return w.Write(ctx, tx, one) }); err != nil {
		t.Fatalf("write: %v", err)
	}
	errBoom := errors.New("boom")
	err := st.InTx(ctx, func(tx *memstore.Tx) error {
		if err := w.Write(ctx, tx, courier.NewMessage("orders", "order-2", "OrderPlaced", []byte("rolled back"))); err != nil {
			return err
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("InTx returned %v, want fn's error", err)
	}
	tx := st.Begin()
	tx.Rollback()
	if err := w.Write(ctx, tx, one); !errors.Is(err, memstore.ErrTxDone) {
		t.Fatalf("write in a rolled-back transaction: %v, want ErrTxDone", err)
	}
	tx = st.Begin()
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if err := tx.Commit(); !errors.Is(err, memstore.ErrTxDone) {
		t.Fatalf("second commit: %v, want ErrTxDone", err)
	}
	if err := st.Insert(ctx, memstore.New(memstore.Config{}).Begin(), []courier.Message{one}); !errors.Is(err, memstore.ErrTxDone) {
		t.Fatalf("insert in another store's transaction: %v, want ErrTxDone", err)
	}

	b, err := st.Claim(ctx, "r", 10, time.Minute)
	if err != nil || len(b.Records) != 1 || b.Records[0].Message.ID != one.ID {
		t.Fatalf("claim: %+v, %v; want the committed message alone", b, err)
	}
	b.Records[0].Message.Headers["traceparent"] = "changed"
	if again := st.Pending()[0].Record.Message; again.Headers["traceparent"] != one.Headers["traceparent"] {
		t.Fatal("changing a claimed message's headers changed the stored row")
	}
}

// Operations on an ended context fail as a database call would, and change
// nothing.
func TestEndedContext(t *testing.T) {
	st := memstore.New(memstore.Config{})
	ctx := context.Background()
	msgs := []courier.Message{
		courier.NewMessage("events", "k", "T", []byte("1")), courier.NewMessage("events", "k", "T", []byte("2")),
		courier.NewMessage("events", "k", "T", []byte("3")),
	}
	if err := st.InTx(ctx, func(tx *memstore.Tx) error { return st.Insert(ctx, tx, msgs) }); err != nil {
		t.Fatalf("write: %v", err)
	}
	b, err := st.Claim(ctx, "r", 10, time.Minute)
	if err != nil || len(b.Records) != 3 {
		t.Fatalf("claim: %d rows, %v; want 3", len(b.Records), err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := st.Claim(ended, "r", 10, time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("claim: %v, want context.Canceled", err)
	}
	if err := st.Complete(ended, "r", b.Lease, store.Outcome{Published: []int64{b.Records[0].Seq}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("complete: %v, want context.Canceled", err)
	}
	if _, err := st.Stats(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("stats: %v, want context.Canceled", err)
	}
	if err := st.InTx(ended, func(tx *memstore.Tx) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("InTx: %v, want context.Canceled", err)
	}
	if s, err := st.Stats(ctx); err != nil || s.Pending != 3 || s.Leased != 3 {
		t.Fatalf("after failed calls: %+v, %v; want 3 pending, all leased", s, err)
	}
}

// A Clock runs with the real time until set, then moves only when
// advanced.
func TestClock(t *testing.T) {
	c := memstore.NewClock()
	if d := time.Since(c.Now()); d < -time.Second || d > time.Second {
		t.Fatalf("a new clock is %s away from the real time", d)
	}
	c.Advance(time.Hour)
	if d := time.Until(c.Now()); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("advanced by an hour, the clock is %s ahead", d)
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 6789, time.FixedZone("X", 3600))
	c.Set(at)
	want := at.UTC().Truncate(time.Microsecond)
	if got := c.Now(); !got.Equal(want) || got.Location() != time.UTC {
		t.Fatalf("set clock reads %s, want %s", got, want)
	}
	time.Sleep(time.Millisecond)
	c.Advance(time.Second)
	if got := c.Now(); !got.Equal(want.Add(time.Second)) {
		t.Fatalf("stopped clock advanced by a second reads %s, want %s", got, want.Add(time.Second))
	}
}

// The store reads its time from Config.Clock.
func TestConfigClock(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	clock := memstore.NewClock()
	clock.Set(at)
	for _, c := range []struct {
		name string
		cfg  memstore.Config
		want time.Time
	}{
		{"Clock", memstore.Config{Clock: clock.Now}, at},
	} {
		s, err := memstore.New(c.cfg).Stats(ctx)
		if err != nil || !s.Now.Equal(c.want) {
			t.Errorf("%s: Stats.Now %s, %v; want %s", c.name, s.Now, err, c.want)
		}
	}
}
