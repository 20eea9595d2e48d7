package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// scheduler returns the harness's Inserter as the store.Scheduler every
// dialect's inserter is.
func (db *relayDB[TTx]) scheduler(t *testing.T) store.Scheduler[TTx] {
	t.Helper()
	s, ok := db.Inserter.(store.Scheduler[TTx])
	if !ok {
		t.Fatalf("storetest: the harness's Inserter (%T) is not a store.Scheduler", db.Inserter)
	}
	return s
}

// schedule commits msgs due at due.
func (db *relayDB[TTx]) schedule(t *testing.T, due store.Due, msgs ...courier.Message) {
	t.Helper()
	s, ctx := db.scheduler(t), context.Background()
	err := db.InTx(ctx, func(tx TTx) error {
		for i := range msgs {
			if err := msgs[i].Validate(courier.Limits{}); err != nil {
				return err
			}
		}
		return s.Schedule(ctx, tx, due, msgs)
	})
	if err != nil {
		t.Fatalf("schedule %d messages: %v", len(msgs), err)
	}
}

// cancel cancels id in a transaction it commits, and returns Cancel's
// error.
func (db *relayDB[TTx]) cancel(t *testing.T, id uuid.UUID) error {
	t.Helper()
	s, ctx := db.scheduler(t), context.Background()
	var cerr error
	err := db.InTx(ctx, func(tx TTx) error {
		cerr = s.Cancel(ctx, tx, id)
		return nil
	})
	if err != nil {
		t.Fatalf("cancel %s: the transaction failed: %v", id, err)
	}
	return cerr
}

// release runs one Release and fails the test on an error.
func release(t *testing.T, st store.RelayStore, limit int) store.Released {
	t.Helper()
	r, err := st.Release(context.Background(), limit)
	if err != nil {
		t.Fatalf("release: %v", err)
	}
	return r
}

// A scheduled message is released when the store's clock reaches its due
// time, not a microsecond before, with every field it was written with but
// its time, which is its due time (it occurs then); a relative due time
// counts from the scheduling statement. Until then a
// release reports when the next one is due, and a claim finds nothing.
func testScheduledDueOnTime[TTx any](t *testing.T, db *relayDB[TTx]) {
	t0 := db.stopClock()
	st := db.newStore(t, false)
	if r := release(t, st, 100); r.Count != 0 || r.Waiting {
		t.Fatalf("release with nothing scheduled: %+v", r)
	}
	later := courier.NewMessage("events", "k", "Later", []byte("later"), courier.WithHeader("h", "v"),
		courier.WithVersion(3), courier.WithContentType(courier.ContentTypeJSON))
	later.Payload = []byte(`{"n":1}`)
	sooner := courier.NewMessage("events", "j", "Sooner", []byte{})
	db.schedule(t, store.Due{After: 10 * time.Second}, later)
	db.schedule(t, store.Due{At: t0.Add(5 * time.Second)}, sooner)
	if r := release(t, st, 100); r.Count != 0 || !r.Waiting || r.Next != 5*time.Second {
		t.Fatalf("release at the start: %+v; want nothing moved, the next due in 5s", r)
	}
	if b := claim(t, st, "a", 10, time.Minute); len(b.Records) != 0 {
		t.Fatalf("claimed %d rows before anything was due", len(b.Records))
	}
	db.clock.Set(t0.Add(5*time.Second - tick))
	if r := release(t, st, 100); r.Count != 0 || r.Next != tick {
		t.Fatalf("release a microsecond early: %+v", r)
	}
	db.clock.Set(t0.Add(5 * time.Second))
	if r := release(t, st, 100); r.Count != 1 || !r.Waiting || r.Next != 5*time.Second {
		t.Fatalf("release when the first is due: %+v; want 1 moved, the next due in 5s", r)
	}
	b := claim(t, st, "a", 10, time.Minute)
	checkRows(t, "the first release", b.Records, []courier.Message{sooner}, nil)
	complete(t, st, "a", b, store.Outcome{Published: seqs(b.Records)})
	db.clock.Set(t0.Add(10 * time.Second))
	if r := release(t, st, 100); r.Count != 1 || r.Waiting {
		t.Fatalf("release when the second is due: %+v; want 1 moved, none waiting", r)
	}
	b = claim(t, st, "a", 10, time.Minute)
	checkRows(t, "the second release", b.Records, []courier.Message{later}, nil)
	if got := b.Records[0].Message; got.Version != 3 || got.Headers["h"] != "v" || string(got.Payload) != `{"n":1}` ||
		got.ContentType != courier.ContentTypeJSON || !got.OccurredAt.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("released message %+v differs from the one scheduled, %+v", got, later)
	}
}

// A scheduled message that waits holds nothing back: its key's messages
// written meanwhile are claimed at once. Once due it is released behind
// what its key wrote before its release, in due order, equal due times in
// scheduling order; what its key writes afterwards comes after it.
func testScheduledOrder[TTx any](t *testing.T, db *relayDB[TTx]) {
	t0 := db.stopClock()
	st := db.newStore(t, false)
	x := courier.NewMessage("events", "k", "T", []byte("x due 2s"))
	y := courier.NewMessage("events", "k", "T", []byte("y due 1s"))
	z := courier.NewMessage("events", "k", "T", []byte("z due 1s, after y"))
	db.schedule(t, store.Due{At: t0.Add(2 * time.Second)}, x)
	db.schedule(t, store.Due{At: t0.Add(time.Second)}, y, z)
	now := courier.NewMessage("events", "k", "T", []byte("written now"))
	db.write(t, now)
	b := claim(t, st, "a", 10, time.Minute)
	checkRows(t, "a claim while three of the key wait", b.Records, []courier.Message{now}, nil)
	before := courier.NewMessage("events", "k", "T", []byte("before the release"))
	db.write(t, before)
	db.clock.Set(t0.Add(2 * time.Second))
	if r := release(t, st, 2); r.Count != 2 || !r.Waiting || r.Next > 0 {
		t.Fatalf("release of at most 2 of 3 due: %+v; want 2 moved, one due", r)
	}
	if r := release(t, st, 100); r.Count != 1 || r.Waiting {
		t.Fatalf("second release: %+v; want the last one moved", r)
	}
	after := courier.NewMessage("events", "k", "T", []byte("after the release"))
	db.write(t, after)
	complete(t, st, "a", b, store.Outcome{Published: seqs(b.Records)})
	b = claim(t, st, "a", 10, time.Minute)
	checkRows(t, "after the release", b.Records, []courier.Message{before, y, z, x, after}, nil)
}

// Cancel removes a waiting message for good when its transaction commits,
// and not when it rolls back; it tells a message released already
// (ErrAlreadyDue) from one it does not know (ErrNotScheduled).
func testScheduledCancel[TTx any](t *testing.T, db *relayDB[TTx]) {
	t0 := db.stopClock()
	st := db.newStore(t, false)
	kept, dropped, due := msgPair("kept", "cancelled")
	db.schedule(t, store.Due{At: t0.Add(time.Minute)}, kept, dropped, due)
	s, ctx := db.scheduler(t), context.Background()
	rolledBack := errors.New("rolled back")
	if err := db.InTx(ctx, func(tx TTx) error {
		if err := s.Cancel(ctx, tx, kept.ID); err != nil {
			t.Errorf("cancel in a transaction that rolls back: %v", err)
		}
		return rolledBack
	}); !errors.Is(err, rolledBack) {
		t.Fatalf("the rolled-back transaction: %v", err)
	}
	if err := db.cancel(t, dropped.ID); err != nil {
		t.Fatalf("cancel a waiting message: %v", err)
	}
	if err := db.cancel(t, dropped.ID); !errors.Is(err, store.ErrNotScheduled) {
		t.Fatalf("cancel it again: %v; want ErrNotScheduled", err)
	}
	if err := db.cancel(t, uuid.New()); !errors.Is(err, store.ErrNotScheduled) {
		t.Fatalf("cancel an unknown id: %v; want ErrNotScheduled", err)
	}
	db.clock.Set(t0.Add(time.Minute))
	if r := release(t, st, 100); r.Count != 2 || r.Waiting {
		t.Fatalf("release: %+v; want the two not cancelled", r)
	}
	if err := db.cancel(t, due.ID); !errors.Is(err, store.ErrAlreadyDue) {
		t.Fatalf("cancel a released message: %v; want ErrAlreadyDue", err)
	}
	b := claim(t, st, "a", 10, time.Minute)
	checkRows(t, "after the cancel", b.Records, []courier.Message{kept, due}, nil)
}

// msgPair returns three messages of three keys, named by payload.
func msgPair(a, b string) (courier.Message, courier.Message, courier.Message) {
	return courier.NewMessage("events", a, "T", []byte(a)), courier.NewMessage("events", b, "T", []byte(b)),
		courier.NewMessage("events", "due", "T", []byte("due"))
}

// A release passes over a message whose cancel has not committed yet
// (its transaction holds it); the cancel then wins, or, rolled back,
// leaves it to the next release.
func testScheduledCancelRace[TTx any](t *testing.T, db *relayDB[TTx]) {
	if db.SerialWrites {
		t.Skip("one writer at a time: a release waits for the cancelling transaction instead")
	}
	t0 := db.stopClock()
	st := db.newStore(t, false)
	m := courier.NewMessage("events", "k", "T", []byte("m"))
	n := courier.NewMessage("events", "k2", "T", []byte("n"))
	db.schedule(t, store.Due{At: t0}, m, n)
	if r := db.releaseDuringCancel(t, st, m.ID, false); r.Count != 1 {
		t.Fatalf("release while m's cancel is open: %+v; want n alone moved", r)
	}
	if r := release(t, st, 100); r.Count != 1 || r.Waiting {
		t.Fatalf("release once the cancel rolled back: %+v; want m moved", r)
	}
	b := claim(t, st, "a", 10, time.Minute)
	checkRows(t, "after the rolled-back cancel", b.Records, []courier.Message{n, m}, nil)

	p := courier.NewMessage("events", "k3", "T", []byte("p"))
	db.schedule(t, store.Due{At: t0}, p)
	if r := db.releaseDuringCancel(t, st, p.ID, true); r.Count != 0 {
		t.Fatalf("release while p's cancel is open: %+v; want nothing moved", r)
	}
	if r := release(t, st, 100); r.Count != 0 || r.Waiting {
		t.Fatalf("release once the cancel committed: %+v; want nothing left", r)
	}
	if err := db.cancel(t, p.ID); !errors.Is(err, store.ErrNotScheduled) {
		t.Fatalf("cancel p again: %v; want ErrNotScheduled", err)
	}
}

// releaseDuringCancel cancels id in a transaction that it commits (or
// rolls back) once a release on st has run while the transaction was
// open, and returns what that release did.
func (db *relayDB[TTx]) releaseDuringCancel(t *testing.T, st store.RelayStore, id uuid.UUID, commit bool) store.Released {
	t.Helper()
	s, ctx := db.scheduler(t), context.Background()
	var r store.Released
	err := inTx(db.InTx, commit, func(tx TTx) error {
		if err := s.Cancel(ctx, tx, id); err != nil {
			return fmt.Errorf("cancel: %w", err)
		}
		var err error
		r, err = st.Release(ctx, 100)
		return err
	})
	if err != nil {
		t.Fatalf("release during a cancel: %v", err)
	}
	return r
}

// Releases take turns: many at once release each due message once, and a
// key's messages in due order.
func testScheduledConcurrentReleases[TTx any](t *testing.T, db *relayDB[TTx]) {
	t0 := db.stopClock()
	var want []courier.Message
	for i := range 200 {
		m := courier.NewMessage("events", fmt.Sprintf("k%d", i%3), "T", fmt.Appendf(nil, "%d", i))
		db.schedule(t, store.Due{At: t0.Add(time.Duration(200-i) * time.Millisecond)}, m)
		want = append(want, m)
	}
	slices.Reverse(want) // due order
	db.clock.Set(t0.Add(time.Second))
	var wg sync.WaitGroup
	var mu sync.Mutex
	moved := 0
	for range 4 {
		st := db.newStore(t, false)
		wg.Go(func() {
			for {
				r, err := st.Release(context.Background(), 7)
				if err != nil {
					t.Errorf("release: %v", err)
					return
				}
				mu.Lock()
				moved += r.Count
				mu.Unlock()
				if !r.Busy && !r.Waiting {
					return
				}
			}
		})
	}
	wg.Wait()
	if moved != len(want) {
		t.Fatalf("concurrent releases moved %d messages, want %d", moved, len(want))
	}
	b := claim(t, db.newStore(t, false), "a", 1000, time.Minute)
	checkRows(t, "after concurrent releases", b.Records, want, nil)
}

// Status counts the scheduled messages that wait, those due, and when the
// next falls due, at the store's clock; released ones leave the count and,
// once trimmed (store.TableReleased), a cancel no longer knows them.
func testScheduledStatus[TTx any](t *testing.T, db *relayDB[TTx]) {
	ops := db.ops(t)
	t0 := db.stopClock()
	st := db.newStore(t, false)
	if s := opsStatus(t, ops).Scheduled; s.Waiting.N != 0 || s.Due != 0 || !s.NextDue.IsZero() {
		t.Fatalf("status with nothing scheduled: %+v", s)
	}
	soon, later, last := msgPair("soon", "later")
	db.schedule(t, store.Due{At: t0.Add(time.Minute)}, soon)
	db.schedule(t, store.Due{At: t0.Add(2 * time.Minute)}, later)
	db.schedule(t, store.Due{At: t0.Add(time.Hour)}, last)
	if s := opsStatus(t, ops).Scheduled; s.Waiting.N != 3 || s.Due != 0 || !s.NextDue.Equal(t0.Add(time.Minute)) {
		t.Fatalf("status with three scheduled: %+v; want 3 waiting, none due, the next at %s", s, t0.Add(time.Minute))
	}
	db.clock.Set(t0.Add(2 * time.Minute))
	if s := opsStatus(t, ops).Scheduled; s.Waiting.N != 3 || s.Due != 2 {
		t.Fatalf("status with two due: %+v", s)
	}
	if r := release(t, st, 100); r.Count != 2 {
		t.Fatalf("release: %+v", r)
	}
	if s := opsStatus(t, ops).Scheduled; s.Waiting.N != 1 || s.Due != 0 || !s.NextDue.Equal(t0.Add(time.Hour)) {
		t.Fatalf("status after the release: %+v; want 1 waiting, the next at %s", s, t0.Add(time.Hour))
	}
	trimmed, err := ops.Trim(context.Background(), store.Trim{Table: store.TableReleased, Before: t0.Add(2 * time.Minute)})
	must(t, err, "trim released messages")
	if trimmed.Deleted != 0 {
		t.Fatalf("a trim before the release deleted %d", trimmed.Deleted)
	}
	trimmed, err = ops.Trim(context.Background(), store.Trim{Table: store.TableReleased, Before: t0.Add(2*time.Minute + tick)})
	must(t, err, "trim released messages")
	if trimmed.Deleted != 2 {
		t.Fatalf("the trim after the release deleted %d, want the 2 released", trimmed.Deleted)
	}
	if err := db.cancel(t, soon.ID); !errors.Is(err, store.ErrNotScheduled) {
		t.Fatalf("cancel a trimmed one: %v; want ErrNotScheduled", err)
	}
	if err := db.cancel(t, last.ID); err != nil {
		t.Fatalf("the waiting one survives the trim: cancel: %v", err)
	}
}

// Admin lists the scheduled messages that wait, in due order, filtered and
// a page at a time, and cancels them as Cancel does.
func testAdminScheduled[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	t0 := db.stopClock()
	a, ctx := db.Admin(), context.Background()
	var msgs []courier.Message
	for i, spec := range []struct{ topic, key string }{{"a", "k1"}, {"b", "k1"}, {"a", "k2"}, {"a", "k1"}, {"b", "k3"}} {
		m := courier.NewMessage(spec.topic, spec.key, "T", make([]byte, i))
		db.schedule(t, store.Due{At: t0.Add(time.Duration(5-i) * time.Minute)}, m)
		msgs = append(msgs, m)
	}
	slices.Reverse(msgs) // due order
	list := func(f store.ScheduleFilter) []store.ScheduledMessage {
		t.Helper()
		got, err := a.ListScheduled(ctx, f)
		must(t, err, "list scheduled %+v", f)
		return got
	}
	ids := func(ms []store.ScheduledMessage) []uuid.UUID {
		out := make([]uuid.UUID, len(ms))
		for i, m := range ms {
			out[i] = m.ID
		}
		return out
	}
	want := func(ms ...courier.Message) []uuid.UUID {
		out := make([]uuid.UUID, len(ms))
		for i, m := range ms {
			out[i] = m.ID
		}
		return out
	}
	all := list(store.ScheduleFilter{})
	if !slices.Equal(ids(all), want(msgs...)) || all[0].Size != 4 || all[0].Topic != "b" || all[0].Key != "k3" ||
		!all[0].Due.Equal(t0.Add(time.Minute)) || !all[0].Created.Equal(t0) {
		t.Fatalf("all scheduled: %+v", all)
	}
	for _, c := range []struct {
		f    store.ScheduleFilter
		want []uuid.UUID
	}{
		{store.ScheduleFilter{Topic: "a"}, want(msgs[1], msgs[2], msgs[4])},
		{store.ScheduleFilter{Key: "k1"}, want(msgs[1], msgs[3], msgs[4])},
		{store.ScheduleFilter{DueBefore: t0.Add(3 * time.Minute)}, want(msgs[0], msgs[1])},
		{store.ScheduleFilter{Limit: 2, After: msgs[1].ID}, want(msgs[2], msgs[3])},
		{store.ScheduleFilter{IDs: []uuid.UUID{msgs[3].ID, msgs[0].ID, uuid.New()}}, want(msgs[0], msgs[3])},
	} {
		if got := ids(list(c.f)); !slices.Equal(got, c.want) {
			t.Fatalf("scheduled %+v: %v, want %v", c.f, got, c.want)
		}
	}
	if _, err := a.ListScheduled(ctx, store.ScheduleFilter{Limit: store.MaxListLimit + 1}); err == nil {
		t.Fatal("a limit past MaxListLimit was taken")
	}
	must(t, a.CancelScheduled(ctx, msgs[0].ID), "cancel")
	if err := a.CancelScheduled(ctx, msgs[0].ID); !errors.Is(err, store.ErrNotScheduled) {
		t.Fatalf("cancel twice: %v; want ErrNotScheduled", err)
	}
	db.clock.Set(t0.Add(2 * time.Minute))
	st, err := db.RelayStore(ctx, store.RelayConfig{})
	must(t, err, "relay store")
	if r := release(t, st, 10); r.Count != 1 {
		t.Fatalf("release: %+v; want the one due", r)
	}
	if err := a.CancelScheduled(ctx, msgs[1].ID); !errors.Is(err, store.ErrAlreadyDue) {
		t.Fatalf("cancel a released one: %v; want ErrAlreadyDue", err)
	}
	if got := ids(list(store.ScheduleFilter{})); !slices.Equal(got, want(msgs[2:]...)) {
		t.Fatalf("after the cancel and the release: %v", got)
	}
}
