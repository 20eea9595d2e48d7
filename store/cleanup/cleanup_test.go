package cleanup_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/cleanup"
	"github.com/courier-go/courier/store/memstore"
)

// published returns a store in memory holding n rows published at the
// clock's time, and the clock.
func published(t *testing.T, n int) (*memstore.Store, *memstore.Clock) {
	t.Helper()
	ctx := context.Background()
	clock := memstore.NewClock()
	st := memstore.New(memstore.Config{Clock: clock.Now, KeepPublished: true})
	for i := range n {
		err := st.InTx(ctx, func(tx *memstore.Tx) error {
			return st.Insert(ctx, tx, []courier.Message{courier.NewMessage("orders", "k", "T", []byte{byte(i)})})
		})
		if err != nil {
			t.Fatal(err)
		}
		b, err := st.Claim(ctx, "relay", 10, time.Minute)
		if err != nil || len(b.Records) != 1 {
			t.Fatalf("claim: %v, %d rows", err, len(b.Records))
		}
		if err := st.Complete(ctx, "relay", b.Lease, store.Outcome{Published: []int64{b.Records[0].Seq}}); err != nil {
			t.Fatal(err)
		}
	}
	return st, clock
}

// A pass deletes what is older than its retention, a batch at a time, and
// leaves the rest; a pass that finds the lock taken does nothing.
func TestRunOnce(t *testing.T) {
	st, clock := published(t, 5)
	var logs bytes.Buffer
	c := &cleanup.Cleaner{Ops: st.Operations(), Keep: map[store.Table]time.Duration{store.TablePublished: time.Hour},
		Batch: 2, Clock: clock.Now, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	ctx := context.Background()
	if r, err := c.RunOnce(ctx); err != nil || r.Deleted[store.TablePublished] != 0 || r.Locked {
		t.Fatalf("first pass: %+v, %v; want nothing deleted (the rows are fresh)", r, err)
	}
	clock.Advance(time.Hour + time.Second)
	release, ok, err := st.Operations().TryLock(ctx, cleanup.DefaultLock)
	if err != nil || !ok {
		t.Fatalf("TryLock: %v, %v", ok, err)
	}
	if r, err := c.RunOnce(ctx); err != nil || !r.Locked || len(st.Published()) != 5 {
		t.Fatalf("pass while another holds the lock: %+v, %v, %d published left; want Locked and nothing deleted", r, err, len(st.Published()))
	}
	release()
	if r, err := c.RunOnce(ctx); err != nil || r.Deleted[store.TablePublished] != 5 || len(st.Published()) != 0 {
		t.Fatalf("pass an hour later: %+v, %v, %d published left; want 5 deleted", r, err, len(st.Published()))
	}
	if !bytes.Contains(logs.Bytes(), []byte("table=published deleted=5")) {
		t.Fatalf("the pass did not log what it deleted:\n%s", &logs)
	}
}

// Bad configuration gets an error naming the field.
func TestConfigErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := (&cleanup.Cleaner{}).RunOnce(ctx); !errors.Is(err, cleanup.ErrNoOps) {
		t.Fatalf("no Ops: %v", err)
	}
	st := memstore.New(memstore.Config{})
	_, err := (&cleanup.Cleaner{Ops: st.Operations(), Keep: map[store.Table]time.Duration{"outbox": 0}}).RunOnce(ctx)
	if !errors.Is(err, store.ErrUnknownTable) {
		t.Fatalf("unknown table: %v", err)
	}
	if err := (&cleanup.Cleaner{Ops: st.Operations()}).Run(ctx, 0); err == nil {
		t.Fatal("Run with interval 0 succeeded")
	}
}

// Run returns once its context ends, leaving no goroutine behind.
func TestRunStops(t *testing.T) {
	defer goleak.VerifyNone(t)
	st, clock := published(t, 3)
	clock.Advance(2 * time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	c := &cleanup.Cleaner{Ops: st.Operations(), Keep: map[store.Table]time.Duration{store.TablePublished: time.Hour},
		Clock: clock.Now, Log: slog.New(slog.DiscardHandler)}
	go func() { done <- c.Run(ctx, time.Hour) }()
	deadline := time.Now().Add(10 * time.Second)
	for len(st.Published()) != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := len(st.Published()); n != 0 {
		t.Fatalf("Run's first pass left %d rows", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
