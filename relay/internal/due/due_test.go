package due_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay/internal/due"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/memstore"
	"github.com/courier-go/courier/store/sqlite"
)

// fixture is an outbox in memory on a stopped clock, and a writer.
type fixture struct {
	t     *testing.T
	clock *memstore.Clock
	st    *memstore.Store
	w     *outbox.Writer[*memstore.Tx]
}

func newFixture(t *testing.T) *fixture {
	clock := memstore.NewClock()
	clock.Set(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	st := memstore.New(memstore.Config{Clock: clock.Now})
	return &fixture{t: t, clock: clock, st: st, w: outbox.New(st, outbox.Config{})}
}

func (f *fixture) schedule(after time.Duration, n int) {
	f.t.Helper()
	ctx := context.Background()
	for range n {
		err := f.st.InTx(ctx, func(tx *memstore.Tx) error {
			return f.w.Schedule(ctx, tx, outbox.After(after), courier.NewMessage("t", "k", "T", nil))
		})
		if err != nil {
			f.t.Fatalf("schedule: %v", err)
		}
	}
}

func (f *fixture) timer(limit int) (*due.Timer, *int) {
	released := new(int)
	return due.New(f.st, due.Config{Limit: limit, Clock: f.clock.Now, Logger: slog.New(slog.DiscardHandler),
		Released: func(n int) { *released += n }}), released
}

// A new timer wants a release at once; with nothing scheduled it looks
// again after Recheck; with a message waiting, at its due time (at most
// Recheck away); a poke brings the next release to MinGap after the last.
func TestWhen(t *testing.T) {
	f := newFixture(t)
	tm, _ := f.timer(10)
	if w := tm.Wait(); w != 0 {
		t.Fatalf("a new timer waits %s", w)
	}
	if n := tm.Release(context.Background()); n != 0 {
		t.Fatalf("released %d with nothing scheduled", n)
	}
	if w := tm.Wait(); w != due.DefaultRecheck {
		t.Fatalf("with nothing scheduled the timer waits %s, want %s", w, due.DefaultRecheck)
	}
	if n := tm.Release(context.Background()); n != 0 || tm.Wait() != due.DefaultRecheck {
		t.Fatalf("an early Release moved %d and left the wait at %s", n, tm.Wait())
	}
	f.schedule(40*time.Millisecond, 1)
	tm.Poke()
	if w := tm.Wait(); w != due.MinGap {
		t.Fatalf("after a poke the timer waits %s, want MinGap (%s) from the last release", w, due.MinGap)
	}
	f.clock.Advance(due.MinGap)
	tm.Release(context.Background())
	if w := tm.Wait(); w != 30*time.Millisecond {
		t.Fatalf("with a message due in 30ms the timer waits %s", w)
	}
	f.schedule(time.Hour, 1)
	f.clock.Advance(30 * time.Millisecond)
	if n := tm.Release(context.Background()); n != 1 || tm.Wait() != due.DefaultRecheck {
		t.Fatalf("at the due time: released %d, wait %s; want 1, and Recheck with the next an hour away", n, tm.Wait())
	}
}

// A release that comes back full is followed by another at once, until
// one is not; every release that moved messages is reported.
func TestFullReleasesRepeat(t *testing.T) {
	f := newFixture(t)
	f.schedule(time.Second, 7)
	f.clock.Advance(time.Second)
	tm, reported := f.timer(2)
	if n := tm.Release(context.Background()); n != 7 || *reported != 7 {
		t.Fatalf("released %d (reported %d) of 7 due, with releases of 2", n, *reported)
	}
	if got := len(f.st.Pending()); got != 7 {
		t.Fatalf("%d messages in the outbox, want 7", got)
	}
}

// A failed release is logged and tried again after a backoff, not at once.
func TestFailedReleaseBacksOff(t *testing.T) {
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "o.db"))
	if err != nil {
		t.Fatal(err)
	}
	d := sqlite.NewDriver(db)
	if _, err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := d.RelayStore(context.Background(), store.RelayConfig{})
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Close() // every release fails from now on
	tm := due.New(st, due.Config{Limit: 10, Logger: slog.New(slog.DiscardHandler)})
	tm.Release(context.Background())
	if w := tm.Wait(); w < 50*time.Millisecond {
		t.Fatalf("after a failed release the timer waits %s, want a backoff", w)
	}
}
