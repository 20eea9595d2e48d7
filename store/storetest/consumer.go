package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/memstore"
)

// mark inserts the marker of (consumer, id) in a transaction of ib and
// commits it (or rolls it back when commit is false); it returns what Mark
// said.
func mark[TTx any](t *testing.T, ib store.Inbox[TTx], consumer string, id uuid.UUID, commit bool) bool {
	t.Helper()
	return reportInTx(t, ib.InTx, commit, func(tx TTx) (bool, error) {
		return ib.Mark(context.Background(), tx, consumer, id)
	}, "mark %s for %q", id, consumer)
}

// A marker is fresh once per consumer and message; a rolled-back
// transaction leaves none behind. Consumer names are compared exactly.
func testInboxMarkers[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	ib := db.Inbox()
	id := uuid.New()
	if !mark(t, ib, "billing", id, true) {
		t.Fatal("the first marker of a message is a duplicate")
	}
	if mark(t, ib, "billing", id, true) {
		t.Fatal("the second marker of a message is fresh")
	}
	for _, other := range []string{"shipping", "Billing", "billing ", "billing-ß", "账单"} {
		if !mark(t, ib, other, id, true) {
			t.Fatalf("consumer %q found the marker of consumer \"billing\"", other)
		}
	}

	rolledBack := uuid.New()
	if !mark(t, ib, "billing", rolledBack, false) {
		t.Fatal("fresh marker reported as a duplicate")
	}
	if !mark(t, ib, "billing", rolledBack, true) {
		t.Fatal("a rolled-back marker was kept: the message would never be applied")
	}
	if mark(t, ib, "billing", rolledBack, true) {
		t.Fatal("the marker committed after a rollback is not kept")
	}

	// A handler that panics: the panic goes on, the transaction is
	// rolled back (not left open, holding locks).
	panicked := uuid.New()
	if !panics(func() {
		_ = ib.InTx(context.Background(), func(tx TTx) error {
			if _, err := ib.Mark(context.Background(), tx, "billing", panicked); err != nil {
				return err
			}
			panic("handler panics")
		})
	}) {
		t.Fatal("InTx swallowed its function's panic")
	}
	if !mark(t, ib, "billing", panicked, true) {
		t.Fatal("the marker of a transaction whose function panicked was kept")
	}
}

// A delivery of a message whose first delivery's transaction is still open
// waits for it: it finds the marker once that one commits, and applies the
// message itself when that one rolls back. Of many concurrent deliveries one
// applies the message.
func testInboxConcurrent[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	ctx := context.Background()
	ib := db.Inbox()
	for _, commit := range []bool{true, false} {
		id := uuid.New()
		marked := make(chan struct{})
		finish := make(chan struct{})
		first := make(chan error, 1)
		go func() {
			first <- ib.InTx(ctx, func(tx TTx) error {
				fresh, err := ib.Mark(ctx, tx, "c", id)
				close(marked)
				if err != nil || !fresh {
					return errors.Join(err, errors.New("first delivery: marker not fresh"))
				}
				<-finish
				if !commit {
					return errRollback
				}
				return nil
			})
		}()
		<-marked
		type result struct {
			fresh bool
			err   error
		}
		second := make(chan result, 1)
		go func() {
			var r result
			r.err = ib.InTx(ctx, func(tx TTx) error {
				var err error
				r.fresh, err = ib.Mark(ctx, tx, "c", id)
				return err
			})
			second <- r
		}()
		select {
		case r := <-second:
			close(finish)
			t.Fatalf("a second delivery returned (fresh %v, %v) while the first one's transaction was open; it must wait", r.fresh, r.err)
		case <-time.After(300 * time.Millisecond):
		}
		close(finish)
		if err := <-first; err != nil && !(errors.Is(err, errRollback) && !commit) {
			t.Fatalf("first delivery: %v", err)
		}
		r := <-second
		if r.err != nil {
			t.Fatalf("second delivery: %v", r.err)
		}
		if r.fresh != !commit {
			t.Fatalf("after the first delivery's transaction %s, the second one's marker is fresh=%v, want %v",
				map[bool]string{true: "committed", false: "rolled back"}[commit], r.fresh, !commit)
		}
	}

	id := uuid.New()
	var wg sync.WaitGroup
	var mu sync.Mutex
	applied := 0
	for range 10 {
		wg.Go(func() {
			if mark(t, ib, "many", id, true) {
				mu.Lock()
				applied++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if applied != 1 {
		t.Fatalf("10 concurrent deliveries of one message: %d found their marker fresh, want 1", applied)
	}
}

// DeleteMarkers removes markers older than its cut-off, at most limit at a
// time, and nothing newer; a message whose marker was removed is fresh again.
// Markers carry the store's clock's time.
func testMarkerRetention[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	ctx := context.Background()
	ib := db.Inbox()
	old := make([]uuid.UUID, 5)
	for i := range old {
		old[i] = uuid.New()
		mark(t, ib, "c", old[i], true)
	}
	db.clock.Advance(time.Second)
	cut := db.clock.Now().Add(-100 * time.Millisecond)
	recent := uuid.New()
	mark(t, ib, "c", recent, true)
	var deleted []int64
	for range 4 {
		n, err := db.ConsumerStore().DeleteMarkers(ctx, cut, 2)
		if err != nil {
			t.Fatalf("delete markers: %v", err)
		}
		deleted = append(deleted, n)
	}
	if !slices.Equal(deleted, []int64{2, 2, 1, 0}) {
		t.Fatalf("DeleteMarkers(limit 2) of 5 old markers deleted %v, want [2 2 1 0]", deleted)
	}
	if mark(t, ib, "c", recent, true) {
		t.Fatal("a marker newer than the cut-off was deleted")
	}
	if !mark(t, ib, "c", old[0], true) {
		t.Fatal("a deleted marker still makes its message a duplicate")
	}
	if n, err := db.ConsumerStore().DeleteMarkers(ctx, db.clock.Now().Add(time.Hour), 100); err != nil || n != 2 {
		t.Fatalf("DeleteMarkers(an hour from now) = %d, %v; want the 2 left", n, err)
	}
}

// sameParked fails unless got is want as a store keeps it.
func sameParked(t *testing.T, got, want store.Parked) {
	t.Helper()
	sameHistory := len(got.History) == len(want.History)
	for i := 0; sameHistory && i < len(got.History); i++ {
		sameHistory = got.History[i].Error == want.History[i].Error && got.History[i].At.Equal(want.History[i].At)
	}
	switch {
	case got.Consumer != want.Consumer || got.MessageID != want.MessageID || got.Subject != want.Subject:
		t.Errorf("parked %d: consumer/message id/subject %q/%q/%q, want %q/%q/%q", got.ID,
			got.Consumer, got.MessageID, got.Subject, want.Consumer, want.MessageID, want.Subject)
	case !maps.EqualFunc(got.Headers, want.Headers, slices.Equal[[]string]):
		t.Errorf("parked %d: headers %v, want %v", got.ID, got.Headers, want.Headers)
	case !bytes.Equal(got.Payload, want.Payload) || got.Payload == nil:
		t.Errorf("parked %d: payload %q, want %q (never nil)", got.ID, got.Payload, want.Payload)
	case got.Reason != want.Reason || got.Error != want.Error || got.Attempts != want.Attempts:
		t.Errorf("parked %d: reason/error/attempts %q/%q/%d, want %q/%q/%d", got.ID,
			got.Reason, got.Error, got.Attempts, want.Reason, want.Error, want.Attempts)
	case !sameHistory:
		t.Errorf("parked %d: history %v, want %v", got.ID, got.History, want.History)
	}
}

// Parked deliveries come back as parked, listed by consumer in parking
// order; an operator's replay request is served to the consumer, withdrawn
// with another attempt recorded when the replay fails, and the delivery is
// gone once unparked or discarded. The times recorded (parked, replay
// requested, replay failed) are the driver's clock's.
func testParkAndReplay[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	f := &parkedFixture{t: t, cs: db.ConsumerStore(), a: db.Admin(), clock: db.clock}
	f.park()
	f.checkListed()
	f.checkRepairs()
	f.checkReplayRequests()
	f.checkFailedReplays()
	f.checkUnparkAndDiscard()
}

// parkedFixture is testParkAndReplay's database: its consumer store and
// Admin, the suite's clock, the deliveries it parked and their ids.
type parkedFixture struct {
	t      *testing.T
	cs     store.ConsumerStore
	a      store.Admin
	clock  *memstore.Clock
	parked []store.Parked
	ids    []int64
}

// park parks three deliveries, an hour on the driver's clock from the
// database's (or this process's), and checks that they come back as
// parked, in parking order, at the clock's time.
func (f *parkedFixture) park() {
	t, ctx := f.t, context.Background()
	at := time.Now().UTC().Truncate(time.Microsecond)
	f.parked = []store.Parked{{
		Consumer: "billing", MessageID: uuid.NewString(), Subject: "courier.payments",
		Headers: map[string][]string{"Courier-Type": {"ChargeRequested"}, "X-Multi": {"a", "b"}},
		Payload: []byte("charge 42 €"), Reason: store.ReasonFailed, Error: "gateway timeout", Attempts: 5,
		History: []store.Attempt{{At: at.Add(-time.Second), Error: "connection refused"}, {At: at, Error: "gateway timeout"}},
	}, {
		Consumer: "shipping", Subject: "courier.raw", Payload: []byte{0, 1, 2, 255},
		Reason: store.ReasonMalformed, Error: "no Courier headers", Attempts: 1,
	}, {
		Consumer: "billing", MessageID: uuid.NewString(), Subject: "courier.payments", Payload: []byte{},
		Reason: store.ReasonMalformed, Error: "no handler for message type \"Refund\"", Attempts: 1,
		History: []store.Attempt{{At: at, Error: "no handler for message type \"Refund\""}},
	}}
	// The driver's stores take the time they record from its clock: moved
	// an hour on, it tells their times from the database's (or this
	// process's).
	f.clock.Advance(time.Hour)
	start := f.clock.Now()
	for _, p := range f.parked {
		if err := f.cs.Park(ctx, p); err != nil {
			t.Fatalf("park %+v: %v", p, err)
		}
	}
	all, err := f.a.Parked(ctx, "", 100)
	if err != nil || len(all) != 3 {
		t.Fatalf("Parked(all) = %d parked, %v; want 3", len(all), err)
	}
	for i, p := range all {
		sameParked(t, p, f.parked[i])
		near(t, "parked_at", p.ParkedAt, start, clockMargin)
		if p.ReplayRequested != nil {
			t.Errorf("parked %d: replay requested at %s before anyone asked", p.ID, p.ReplayRequested)
		}
		if i > 0 && p.ID <= all[i-1].ID {
			t.Fatalf("parked deliveries not listed in parking order: id %d after %d", p.ID, all[i-1].ID)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	f.ids = []int64{all[0].ID, all[1].ID, all[2].ID}
}

// listed returns the ids of Parked(consumer, limit).
func (f *parkedFixture) listed(consumer string, limit int) []int64 {
	f.t.Helper()
	ps, err := f.a.Parked(context.Background(), consumer, limit)
	must(f.t, err, "Parked(%q, %d)", consumer, limit)
	return parkedIDs(ps)
}

// toReplay returns the ids of ReplayRequested(consumer, limit), each of
// which must have its request's time.
func (f *parkedFixture) toReplay(consumer string, limit int) []int64 {
	f.t.Helper()
	ps, err := f.cs.ReplayRequested(context.Background(), consumer, limit)
	must(f.t, err, "ReplayRequested(%q, %d)", consumer, limit)
	for _, p := range ps {
		if p.ReplayRequested == nil {
			f.t.Errorf("parked %d served for replay without a request time", p.ID)
		}
	}
	return parkedIDs(ps)
}

// missing is an id no parked delivery has.
func (f *parkedFixture) missing() int64 { return f.ids[2] + 1000 }

// checkListed lists the deliveries by consumer and reads one, and a
// missing one.
func (f *parkedFixture) checkListed() {
	t, ctx, ids := f.t, context.Background(), f.ids
	for _, c := range []struct {
		consumer string
		limit    int
		want     []int64
	}{{"billing", 100, []int64{ids[0], ids[2]}}, {"shipping", 100, ids[1:2]}, {"", 2, ids[:2]}, {"nobody", 10, []int64{}}, {"Billing", 10, []int64{}}} {
		if got := f.listed(c.consumer, c.limit); !slices.Equal(got, c.want) {
			t.Errorf("Parked(%q, %d) = %v, want %v", c.consumer, c.limit, got, c.want)
		}
	}
	if p, err := f.a.ParkedMessage(ctx, ids[0]); err != nil {
		t.Fatalf("ParkedMessage(%d): %v", ids[0], err)
	} else {
		sameParked(t, p, f.parked[0])
	}
	if _, err := f.a.ParkedMessage(ctx, f.missing()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ParkedMessage(missing) = %v, want ErrNotFound", err)
	}
	if err := f.a.RequestReplay(ctx, f.missing()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("RequestReplay(missing) = %v, want ErrNotFound", err)
	}
}

// checkRepairs checks that repairs replace the message id and headers, and
// only those, and that a repair that changes nothing still finds the row.
func (f *parkedFixture) checkRepairs() {
	t, ctx, id, parked := f.t, context.Background(), f.ids[1], f.parked[1]
	repaired := map[string][]string{"Nats-Msg-Id": {"01939f3a-0000-7000-8000-0000000000aa"}, "Courier-Type": {"Fixed"}}
	for range 2 {
		if err := f.a.RepairParked(ctx, id, "01939f3a-0000-7000-8000-0000000000aa", repaired); err != nil {
			t.Fatalf("RepairParked(%d): %v", id, err)
		}
	}
	if p, err := f.a.ParkedMessage(ctx, id); err != nil || p.MessageID != "01939f3a-0000-7000-8000-0000000000aa" ||
		!maps.EqualFunc(p.Headers, repaired, slices.Equal) || p.Subject != parked.Subject || p.Error != parked.Error {
		t.Fatalf("ParkedMessage after RepairParked: %+v, %v; want the new id and headers, the rest unchanged", p, err)
	}
	if err := f.a.RepairParked(ctx, id, parked.MessageID, parked.Headers); err != nil {
		t.Fatalf("RepairParked(%d) back: %v", id, err)
	}
	if err := f.a.RepairParked(ctx, f.missing(), "x", nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("RepairParked(missing) = %v, want ErrNotFound", err)
	}
}

// checkReplayRequests asks for two replays of billing's deliveries (one
// twice) and checks that they are served to billing only, oldest first,
// with the request's time on the driver's clock.
func (f *parkedFixture) checkReplayRequests() {
	t, ctx, ids := f.t, context.Background(), f.ids
	if got := f.toReplay("billing", 10); len(got) != 0 {
		t.Fatalf("replays served before any request: %v", got)
	}
	for _, id := range []int64{ids[2], ids[0]} {
		if err := f.a.RequestReplay(ctx, id); err != nil {
			t.Fatalf("RequestReplay(%d): %v", id, err)
		}
	}
	if err := f.a.RequestReplay(ctx, ids[2]); err != nil {
		t.Fatalf("RequestReplay(%d) again: %v", ids[2], err)
	}
	if got := f.toReplay("billing", 10); !slices.Equal(got, []int64{ids[0], ids[2]}) {
		t.Fatalf("ReplayRequested(billing) = %v, want %v (oldest first)", got, []int64{ids[0], ids[2]})
	}
	if got := f.toReplay("billing", 1); !slices.Equal(got, ids[:1]) {
		t.Fatalf("ReplayRequested(billing, 1) = %v, want %v", got, ids[:1])
	}
	if got := f.toReplay("shipping", 10); len(got) != 0 {
		t.Fatalf("ReplayRequested(shipping) = %v: another consumer's requests", got)
	}
	p, err := f.a.ParkedMessage(ctx, ids[0])
	if err != nil || p.ReplayRequested == nil {
		t.Fatalf("ParkedMessage after RequestReplay: %+v, %v; want the request time", p, err)
	}
	near(t, "replay_requested", *p.ReplayRequested, f.clock.Now(), clockMargin)
}

// checkFailedReplays checks that a failed replay withdraws the request and
// counts an attempt, with an entry in the history at the driver's clock.
func (f *parkedFixture) checkFailedReplays() {
	t, ctx, ids := f.t, context.Background(), f.ids
	failedAt := f.clock.Now()
	if err := f.cs.ReplayFailed(ctx, ids[0], "still failing"); err != nil {
		t.Fatalf("ReplayFailed: %v", err)
	}
	if err := f.cs.ReplayFailed(ctx, ids[1], "still malformed"); err != nil {
		t.Fatalf("ReplayFailed without history: %v", err)
	}
	if got := f.toReplay("billing", 10); !slices.Equal(got, ids[2:]) {
		t.Fatalf("ReplayRequested(billing) after a failed replay = %v, want %v", got, ids[2:])
	}
	for i, wantErr := range []string{"still failing", "still malformed"} {
		p, err := f.a.ParkedMessage(ctx, ids[i])
		if err != nil {
			t.Fatalf("ParkedMessage(%d): %v", ids[i], err)
		}
		if len(p.History) != len(f.parked[i].History)+1 {
			t.Fatalf("parked %d after a failed replay: history %v, want one entry more than %v", p.ID, p.History, f.parked[i].History)
		}
		last := p.History[len(p.History)-1]
		near(t, "time of the failed replay", last.At, failedAt, clockMargin)
		want := f.parked[i]
		want.Error, want.Attempts = wantErr, want.Attempts+1
		want.History = append(slices.Clone(want.History), store.Attempt{At: last.At, Error: wantErr})
		sameParked(t, p, want)
		if p.ReplayRequested != nil {
			t.Errorf("parked %d: replay still requested after it failed", p.ID)
		}
	}
}

// checkUnparkAndDiscard unparks a delivery after a successful replay and
// has an operator discard another.
func (f *parkedFixture) checkUnparkAndDiscard() {
	t, ctx, ids := f.t, context.Background(), f.ids
	if err := f.cs.Unpark(ctx, ids[2]); err != nil {
		t.Fatalf("Unpark: %v", err)
	}
	if _, err := f.a.ParkedMessage(ctx, ids[2]); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ParkedMessage(unparked) = %v, want ErrNotFound", err)
	}
	if got := f.toReplay("billing", 10); len(got) != 0 {
		t.Fatalf("ReplayRequested after the unpark = %v, want none", got)
	}
	if err := f.a.DiscardParked(ctx, ids[1]); err != nil {
		t.Fatalf("DiscardParked: %v", err)
	}
	if err := f.a.DiscardParked(ctx, ids[1]); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DiscardParked twice = %v, want ErrNotFound", err)
	}
	if got := f.listed("", 10); !slices.Equal(got, ids[:1]) {
		t.Fatalf("parked after unpark and discard: %v, want %v", got, ids[:1])
	}
}

// parkedIDs returns the ids of ps, in order.
func parkedIDs(ps []store.Parked) []int64 {
	out := []int64{}
	for _, p := range ps {
		out = append(out, p.ID)
	}
	return out
}

// Failed handler runs are recorded per consumer and message, each in its
// own transaction, and read back whole, oldest first, with their times to
// the microsecond; ClearFailures forgets a message's failures and
// DeleteFailures removes old ones, at most limit at a time.
func testInboxFailures[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	ctx := context.Background()
	cs := db.ConsumerStore()
	var recordAttempt func(consumer string, id uuid.UUID, a store.Attempt) []store.Attempt
	record := func(consumer string, id uuid.UUID, at time.Time, msg string) []store.Attempt {
		t.Helper()
		return recordAttempt(consumer, id, store.Attempt{At: at, Error: msg})
	}
	recordAttempt = func(consumer string, id uuid.UUID, a store.Attempt) []store.Attempt {
		t.Helper()
		hist, err := cs.RecordFailure(ctx, consumer, id, a)
		if err != nil {
			t.Fatalf("record failure of %s for %q: %v", id, consumer, err)
		}
		return hist
	}
	same := func(what string, got, want []store.Attempt) {
		t.Helper()
		if !slices.EqualFunc(got, want, func(a, b store.Attempt) bool {
			return a.At.Equal(b.At) && a.Error == b.Error && a.Uncounted == b.Uncounted
		}) {
			t.Fatalf("%s: failures %v, want %v", what, got, want)
		}
	}

	id, other := uuid.New(), uuid.New()
	start := time.Now().UTC().Truncate(time.Microsecond).Add(-time.Hour)
	// A panic's stack runs to kilobytes; it is kept whole.
	stack := "handler panicked: boom\n\n" + strings.Repeat("goroutine 7 [running]:\nmain.handler(…)\n\t/app/handler.go:42 +0x1d\n", 400)
	var want []store.Attempt
	for i, msg := range []string{"first", "second: ünïcødé", stack} {
		at := start.Add(time.Duration(i) * time.Minute)
		want = append(want, store.Attempt{At: at, Error: msg})
		same("after failure "+string(rune('1'+i)), record("billing", id, at, msg), want)
	}
	// Counted per consumer (names compared exactly) and per message.
	for _, c := range []string{"shipping", "Billing", "billing ", "账单"} {
		same("consumer "+c, record(c, id, start, "x"), []store.Attempt{{At: start, Error: "x"}})
	}
	same("another message", record("billing", other, start, "y"), []store.Attempt{{At: start, Error: "y"}})
	// A run that does not count (a message newer than the consumer knows)
	// is kept as such, between counted ones.
	waiting := uuid.New()
	newer := store.Attempt{At: start, Error: "version 3 of OrderPlaced is newer than this consumer knows", Uncounted: true}
	same("an uncounted failure", recordAttempt("billing", waiting, newer), []store.Attempt{newer})
	later := store.Attempt{At: start.Add(time.Second), Error: "handler failed"}
	hist := recordAttempt("billing", waiting, later)
	same("a counted failure after it", hist, []store.Attempt{newer, later})
	if n, first := store.Counted(hist); n != 1 || !first.Equal(start) {
		t.Fatalf("Counted of %v: %d from %s, want 1 from %s", hist, n, first, start)
	}
	if err := cs.ClearFailures(ctx, "billing", waiting); err != nil {
		t.Fatalf("clear failures: %v", err)
	}

	if err := cs.ClearFailures(ctx, "billing", id); err != nil {
		t.Fatalf("clear failures: %v", err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	same("after ClearFailures", record("billing", id, now, "again"), []store.Attempt{{At: now, Error: "again"}})
	same("another message after ClearFailures of the first",
		record("billing", other, now, "z"), []store.Attempt{{At: start, Error: "y"}, {At: now, Error: "z"}})

	// Old failures: 4 consumers' of id and other's first; recent: id's and other's second.
	var deleted []int64
	for range 4 {
		n, err := cs.DeleteFailures(ctx, now.Add(-time.Minute), 2)
		if err != nil {
			t.Fatalf("delete failures: %v", err)
		}
		deleted = append(deleted, n)
	}
	if !slices.Equal(deleted, []int64{2, 2, 1, 0}) {
		t.Fatalf("DeleteFailures(limit 2) of 5 old failures deleted %v, want [2 2 1 0]", deleted)
	}
	same("recent failures after DeleteFailures", record("billing", other, now, "w"),
		[]store.Attempt{{At: now, Error: "z"}, {At: now, Error: "w"}})
}

// A message's recorded failures go when it is applied: Mark deletes them in
// the transaction that inserts its marker, counted or not, however many
// there are, and a rollback keeps them. A duplicate's Mark deletes those a
// run that failed meanwhile recorded after the message was applied. Other
// consumers' failures of the message, and the failures of other messages,
// stay. The operators' status then counts none of the applied ones.
func testInboxMarkClearsFailures[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	ctx := context.Background()
	ib, cs := db.Inbox(), db.ConsumerStore()
	at := time.Now().UTC().Truncate(time.Microsecond).Add(-time.Hour)
	record := func(consumer string, id uuid.UUID, n int, uncounted bool) {
		t.Helper()
		for i := range n {
			a := store.Attempt{At: at.Add(time.Duration(i) * time.Second), Error: fmt.Sprintf("run %d failed", i+1), Uncounted: uncounted}
			if _, err := cs.RecordFailure(ctx, consumer, id, a); err != nil {
				t.Fatalf("record failure of %s for %q: %v", id, consumer, err)
			}
		}
	}
	status := func(consumer string) (messages, failures int64) {
		t.Helper()
		st, err := db.Operations().Status(ctx)
		must(t, err, "status")
		for _, c := range st.Consumers {
			if c.Consumer == consumer {
				return c.FailingMessages, c.Failures
			}
		}
		return 0, 0
	}
	expect := func(what, consumer string, messages, failures int64) {
		t.Helper()
		if m, f := status(consumer); m != messages || f != failures {
			t.Fatalf("%s: status of %q counts %d failing messages and %d failures, want %d and %d", what, consumer, m, f, messages, failures)
		}
	}

	// A message newer than the consumer knew: uncounted runs, then applied.
	newer := uuid.Must(uuid.NewV7())
	record("billing", newer, 7, true)
	expect("after 7 uncounted runs", "billing", 1, 7)
	if !mark(t, ib, "billing", newer, true) {
		t.Fatal("the marker of a message with failures only is a duplicate")
	}
	expect("after the message newer than the consumer knew was applied", "billing", 0, 0)

	// A counted failure, then a rolled-back run: the failure stays; then a
	// run that commits.
	counted := uuid.Must(uuid.NewV7())
	record("billing", counted, 1, false)
	record("shipping", counted, 2, false)
	mark(t, ib, "billing", counted, false)
	expect("after a run that rolled back", "billing", 1, 1)
	if !mark(t, ib, "billing", counted, true) {
		t.Fatal("the marker of a message whose applying transaction rolled back is a duplicate")
	}
	expect("after the counted failure's message was applied", "billing", 0, 0)
	expect("another consumer of the applied message", "shipping", 1, 2)

	// A run that failed while another applied the message records its
	// failure after that one committed: the next delivery, a duplicate,
	// deletes it.
	late := uuid.Must(uuid.NewV7())
	if !mark(t, ib, "billing", late, true) {
		t.Fatal("a new message's marker is a duplicate")
	}
	record("billing", late, 1, false)
	expect("a failure recorded after the message was applied", "billing", 1, 1)
	if mark(t, ib, "billing", late, true) {
		t.Fatal("a second marker of a message is fresh")
	}
	expect("after a duplicate delivery of the applied message", "billing", 0, 0)

	// Failures of messages not applied stay.
	waiting := uuid.Must(uuid.NewV7())
	record("billing", waiting, 3, false)
	if !mark(t, ib, "billing", uuid.Must(uuid.NewV7()), true) {
		t.Fatal("a new message's marker is a duplicate")
	}
	expect("after another message was applied", "billing", 1, 3)
}

// A run's failure is recorded at once while another message's applying
// transaction is open: deleting that message's failures locks none of the
// others' (InnoDB's locks on the gaps of an index would). Skipped where one
// write transaction runs at a time.
func testRecordFailureBesideApply[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	if db.SerialWrites() {
		t.Skip("one write transaction at a time: a failure waits for the write lock")
	}
	ctx := context.Background()
	ib, cs := db.Inbox(), db.ConsumerStore()
	applying := uuid.Must(uuid.NewV7())
	marked, finish := make(chan error, 1), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- ib.InTx(ctx, func(tx TTx) error {
			_, err := ib.Mark(ctx, tx, "billing", applying)
			marked <- err
			<-finish
			return err
		})
	}()
	defer func() {
		close(finish)
		if err := <-done; err != nil {
			t.Errorf("applying transaction: %v", err)
		}
	}()
	must(t, <-marked, "mark %s", applying)
	for _, id := range []uuid.UUID{uuid.Must(uuid.NewV7()), uuid.New()} {
		// A guard against a wait that would last for the lock's timeout;
		// the statement returns at once unless it waits for the open
		// transaction.
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := cs.RecordFailure(rctx, "billing", id, store.Attempt{At: time.Now().UTC(), Error: "failed"})
		cancel()
		if err != nil {
			t.Fatalf("recording a failure of %s while the transaction applying %s is open: %v", id, applying, err)
		}
	}
}

// keyClaim is a claim of (scope, key) by a new owner.
func keyClaim(scope, key string, fingerprint []byte, lockFor, retain time.Duration) store.KeyClaim {
	return store.KeyClaim{Scope: scope, Key: key, Fingerprint: fingerprint, Owner: uuid.New(), LockFor: lockFor, Retain: retain}
}

func fingerprint(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

// claimKey claims c and fails the test on an error.
func claimKey[TTx any](t *testing.T, st store.Idempotency[TTx], c store.KeyClaim) (store.KeyRecord, bool) {
	t.Helper()
	rec, mine, err := st.Claim(context.Background(), c)
	if err != nil {
		t.Fatalf("claim (%q, %q): %v", c.Scope, c.Key, err)
	}
	if rec.Scope != c.Scope || rec.Key != c.Key {
		t.Fatalf("claim of (%q, %q) returned the record of (%q, %q)", c.Scope, c.Key, rec.Scope, rec.Key)
	}
	return rec, mine
}

// completeKey stores resp for owner in a transaction of st and commits it
// (or rolls it back when commit is false); it returns what Complete said.
func completeKey[TTx any](t *testing.T, st store.Idempotency[TTx], scope, key string, owner uuid.UUID, resp store.StoredResponse, commit bool) bool {
	t.Helper()
	return reportInTx(t, st.InTx, commit, func(tx TTx) (bool, error) {
		return st.Complete(context.Background(), tx, scope, key, owner, resp)
	}, "complete (%q, %q)", scope, key)
}

// A claim owns a fresh key and reports a claimed one as it stands; only the
// owner completes it, in its transaction, and the stored response comes back
// to later claims byte for byte; Release frees only an owner's in-flight
// key. Scopes and keys are compared exactly.
func testIdempotencyClaim[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	st := db.Idempotency()
	fp := fingerprint("POST /orders {\"item\":\"coffee\"}")
	c := claimFreshKey(t, st, fp)
	completeClaimedKey(t, st, c)
	releaseKeys(t, st, fp)
	storeEmptyResponse(t, st, fp)
}

// claimFreshKey claims ("alice", "order-42"), a fresh key, checks that a
// second claim reports it in flight and that claims of other scopes and
// keys are claims of other keys, and returns the first claim.
func claimFreshKey[TTx any](t *testing.T, st store.Idempotency[TTx], fp []byte) store.KeyClaim {
	key := "order-42"
	c := keyClaim("alice", key, fp, time.Minute, time.Hour)
	claimed := time.Now()
	rec, mine := claimKey(t, st, c)
	if !mine || rec.Done || !bytes.Equal(rec.Fingerprint, fp) {
		t.Fatalf("claim of a fresh key: mine %v, %+v; want it owned, in flight, with its fingerprint", mine, rec)
	}
	near(t, "locked_until", rec.LockedUntil, claimed.Add(time.Minute), clockMargin)
	if again, mine := claimKey(t, st, keyClaim("alice", key, fp, time.Minute, time.Hour)); mine || again.Done ||
		!bytes.Equal(again.Fingerprint, fp) || !again.LockedUntil.Equal(rec.LockedUntil) {
		t.Fatalf("second claim of an in-flight key: mine %v, %+v; want the first one's record", mine, again)
	}
	for _, other := range []struct{ scope, key string }{{"bob", key}, {"alice", key + " "}, {"alice", "Order-42"}, {"álice", key}} {
		if _, mine := claimKey(t, st, keyClaim(other.scope, other.key, fp, time.Minute, time.Hour)); !mine {
			t.Fatalf("(%q, %q) is another key than (%q, %q), yet its claim found a record", other.scope, other.key, "alice", key)
		}
	}
	return c
}

// completeClaimedKey checks that only c's owner completes its key, in a
// transaction that commits (not one rolled back or whose function
// panicked), once, and that later claims, whatever their request, get the
// stored response byte for byte, which Release leaves alone.
func completeClaimedKey[TTx any](t *testing.T, st store.Idempotency[TTx], c store.KeyClaim) {
	ctx, key, fp := context.Background(), c.Key, c.Fingerprint
	resp := store.StoredResponse{
		Status:  http.StatusCreated,
		Headers: http.Header{"Content-Type": {"application/json"}, "Link": {"</a>; rel=a", "</b>; rel=b"}},
		Body:    []byte(`{"id":1,"item":"coffee","note":"ünïcödé"}` + "\x00\xff"),
	}
	if completeKey(t, st, "alice", key, uuid.New(), resp, true) {
		t.Fatal("Complete by another owner succeeded")
	}
	if !completeKey(t, st, "alice", key, c.Owner, resp, false) {
		t.Fatal("Complete by the owner failed")
	}
	if rec, _ := claimKey(t, st, keyClaim("alice", key, fp, time.Minute, time.Hour)); rec.Done {
		t.Fatal("a rolled-back Complete left the key done")
	}
	if !panics(func() {
		_ = st.InTx(ctx, func(tx TTx) error {
			if _, err := st.Complete(ctx, tx, "alice", key, c.Owner, resp); err != nil {
				return err
			}
			panic("handler panics")
		})
	}) {
		t.Fatal("InTx swallowed its function's panic")
	}
	if !completeKey(t, st, "alice", key, c.Owner, resp, true) {
		t.Fatal("Complete by the owner failed after a transaction that panicked")
	}
	if completeKey(t, st, "alice", key, c.Owner, resp, true) {
		t.Fatal("a second Complete of a done key succeeded")
	}
	rec, mine := claimKey(t, st, keyClaim("alice", key, fp, time.Minute, time.Hour))
	if mine || !rec.Done || rec.Response.Status != resp.Status || !bytes.Equal(rec.Response.Body, resp.Body) ||
		!maps.EqualFunc(rec.Response.Headers, resp.Headers, slices.Equal[[]string]) || !bytes.Equal(rec.Fingerprint, fp) {
		t.Fatalf("claim of a done key: mine %v, %+v; want the stored response %+v", mine, rec, resp)
	}
	// A different request with the key gets the record; judging the
	// mismatch is the caller's business.
	if rec, mine := claimKey(t, st, keyClaim("alice", key, fingerprint("POST /orders {}"), time.Minute, time.Hour)); mine || !rec.Done || !bytes.Equal(rec.Fingerprint, fp) {
		t.Fatalf("claim with another fingerprint: mine %v, %+v; want the stored record untouched", mine, rec)
	}
	if err := st.Release(ctx, "alice", key, c.Owner); err != nil {
		t.Fatalf("release: %v", err)
	}
	if rec, _ := claimKey(t, st, keyClaim("alice", key, fp, time.Minute, time.Hour)); !rec.Done {
		t.Fatal("Release deleted a done key")
	}
}

// releaseKeys checks that Release frees an in-flight key for its owner
// only.
func releaseKeys[TTx any](t *testing.T, st store.Idempotency[TTx], fp []byte) {
	ctx := context.Background()
	r := keyClaim("alice", "release", fp, time.Minute, time.Hour)
	claimKey(t, st, r)
	if err := st.Release(ctx, r.Scope, r.Key, uuid.New()); err != nil {
		t.Fatalf("release by another owner: %v", err)
	}
	if _, mine := claimKey(t, st, keyClaim(r.Scope, r.Key, fp, time.Minute, time.Hour)); mine {
		t.Fatal("Release by another owner freed the key")
	}
	if err := st.Release(ctx, r.Scope, r.Key, r.Owner); err != nil {
		t.Fatalf("release: %v", err)
	}
	if _, mine := claimKey(t, st, keyClaim(r.Scope, r.Key, fp, time.Minute, time.Hour)); !mine {
		t.Fatal("a released key cannot be claimed again")
	}
}

// storeEmptyResponse checks that a response without headers nor body is
// stored and comes back as such.
func storeEmptyResponse[TTx any](t *testing.T, st store.Idempotency[TTx], fp []byte) {
	e := keyClaim("alice", "empty", fp, time.Minute, time.Hour)
	claimKey(t, st, e)
	if !completeKey(t, st, e.Scope, e.Key, e.Owner, store.StoredResponse{Status: http.StatusNoContent}, true) {
		t.Fatal("Complete with an empty response failed")
	}
	if rec, _ := claimKey(t, st, keyClaim(e.Scope, e.Key, fp, time.Minute, time.Hour)); !rec.Done ||
		rec.Response.Status != http.StatusNoContent || len(rec.Response.Body) != 0 || len(rec.Response.Headers) != 0 {
		t.Fatalf("empty response stored as %+v", rec)
	}
}

// An in-flight key whose lock expired goes to the next claim of the same
// request, when the clock reaches the lock's end and not a microsecond
// before, and the old owner can no longer complete it; a record counts as
// absent from its expiry on, not before; DeleteExpired removes expired
// records, limit at a time, and nothing live.
func testIdempotencyExpiry[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	ctx := context.Background()
	st := db.Idempotency()
	fp := fingerprint("POST /orders")
	key := "lock"
	const lockFor, retain = 10 * time.Second, 20 * time.Second
	t0 := db.stopClock()
	first := keyClaim("s", key, fp, lockFor, time.Hour)
	claimKey(t, st, first)
	expired := keyClaim("s", "expired", fp, lockFor, retain)
	claimKey(t, st, expired)
	if !completeKey(t, st, "s", expired.Key, expired.Owner, store.StoredResponse{Status: 200, Body: []byte("old")}, true) {
		t.Fatal("complete")
	}
	for i := range 3 {
		claimKey(t, st, keyClaim("s", "short-"+string(rune('a'+i)), fp, lockFor, lockFor))
	}

	db.clock.Set(t0.Add(lockFor - tick))
	if rec, mine := claimKey(t, st, keyClaim("s", key, fp, time.Minute, time.Hour)); mine || rec.Done || !rec.LockedUntil.Equal(t0.Add(lockFor)) {
		t.Fatalf("a microsecond before the lock's end: mine %v, %+v; want the key in flight until %s", mine, rec, t0.Add(lockFor))
	}
	if n, err := st.DeleteExpired(ctx, 10); err != nil || n != 0 {
		t.Fatalf("a microsecond before any expiry, DeleteExpired removed %d, %v; want 0", n, err)
	}
	db.clock.Set(t0.Add(lockFor))
	if rec, mine := claimKey(t, st, keyClaim("s", key, fingerprint("POST /other"), time.Minute, time.Hour)); mine || !bytes.Equal(rec.Fingerprint, fp) {
		t.Fatalf("a different request took over an expired lock: mine %v, %+v", mine, rec)
	}
	second := keyClaim("s", key, fp, time.Minute, time.Hour)
	if rec, mine := claimKey(t, st, second); !mine || rec.Done || !rec.LockedUntil.Equal(t0.Add(lockFor+time.Minute)) {
		t.Fatalf("the same request did not take over an expired lock: mine %v, %+v", mine, rec)
	}
	if completeKey(t, st, "s", key, first.Owner, store.StoredResponse{Status: 200}, true) {
		t.Fatal("the owner whose lock was taken over completed the key")
	}
	if !completeKey(t, st, "s", key, second.Owner, store.StoredResponse{Status: 200}, true) {
		t.Fatal("the new owner could not complete the key")
	}

	var deleted []int64
	for range 3 {
		n, err := st.DeleteExpired(ctx, 2)
		if err != nil {
			t.Fatalf("delete expired: %v", err)
		}
		deleted = append(deleted, n)
	}
	if !slices.Equal(deleted, []int64{2, 1, 0}) {
		t.Fatalf("DeleteExpired(limit 2) at the expiry of 3 keys deleted %v, want [2 1 0]", deleted)
	}

	// Past its expiry, a done record is replaced, whatever the request.
	db.clock.Set(t0.Add(retain - tick))
	if rec, mine := claimKey(t, st, keyClaim("s", expired.Key, fp, time.Minute, time.Hour)); mine || !rec.Done || string(rec.Response.Body) != "old" {
		t.Fatalf("a microsecond before its expiry: mine %v, %+v; want the stored response", mine, rec)
	}
	db.clock.Set(t0.Add(retain))
	rec, mine := claimKey(t, st, keyClaim("s", expired.Key, fingerprint("POST /new"), time.Minute, time.Hour))
	if !mine || rec.Done || !bytes.Equal(rec.Fingerprint, fingerprint("POST /new")) || len(rec.Response.Body) != 0 {
		t.Fatalf("claim of an expired key: mine %v, %+v; want a fresh record", mine, rec)
	}

	if _, mine := claimKey(t, st, keyClaim("s", key, fp, time.Minute, time.Hour)); mine {
		t.Fatal("DeleteExpired deleted a live key")
	}
	if n, err := st.DeleteExpired(ctx, 10); err != nil || n != 0 {
		t.Fatalf("with every key live, DeleteExpired removed %d, %v; want 0", n, err)
	}
}

// 50 concurrent claims of one key make exactly one owner, whether the key is
// fresh, its lock expired, or its record expired; the others see the
// winner's record.
func testIdempotencyConcurrent[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	st := db.Idempotency()
	fp := fingerprint("POST /pay")
	key := "pay"
	// A key whose lock, and a record that, will have expired by the
	// second and third rounds, once the clock has moved on.
	locked := keyClaim("s", "locked", fp, time.Minute, time.Hour)
	claimKey(t, st, locked)
	old := keyClaim("s", "old", fingerprint("POST /old"), time.Minute, time.Minute)
	claimKey(t, st, old)
	completeKey(t, st, old.Scope, old.Key, old.Owner, store.StoredResponse{Status: 200}, true)

	round := func(what string, key string) store.KeyClaim {
		t.Helper()
		claims := make([]store.KeyClaim, 50)
		mine := make([]bool, len(claims))
		recs := make([]store.KeyRecord, len(claims))
		errs := make([]error, len(claims))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range claims {
			claims[i] = keyClaim("s", key, fp, time.Minute, time.Hour)
			wg.Go(func() {
				<-start
				recs[i], mine[i], errs[i] = st.Claim(context.Background(), claims[i])
			})
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%s: concurrent claims failed: %v", what, err)
		}
		winner := slices.Index(mine, true)
		if n := len(slices.DeleteFunc(slices.Clone(mine), func(m bool) bool { return !m })); n != 1 {
			t.Fatalf("%s: 50 concurrent claims made %d owners, want exactly 1", what, n)
		}
		for i, rec := range recs {
			if rec.Done || !bytes.Equal(rec.Fingerprint, fp) || (!mine[i] && !rec.LockedUntil.Equal(recs[winner].LockedUntil)) {
				t.Fatalf("%s: claim %d saw %+v, not the winner's record %+v", what, i, rec, recs[winner])
			}
		}
		for i, c := range claims[:4] {
			if i != winner && completeKey(t, st, c.Scope, c.Key, c.Owner, store.StoredResponse{Status: 200}, false) {
				t.Fatalf("%s: a losing claim could complete the key", what)
			}
		}
		return claims[winner]
	}
	start := time.Now()
	round("fresh key", key)
	t.Logf("50 concurrent claims of a fresh key took %s", time.Since(start).Round(time.Millisecond))
	db.clock.Advance(time.Minute)
	winner := round("expired lock", locked.Key)
	round("expired record", old.Key)
	if !completeKey(t, st, winner.Scope, winner.Key, winner.Owner, store.StoredResponse{Status: 200}, true) {
		t.Fatal("the winner of the takeover could not complete the key")
	}
}
