package storetest

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/store"
)

// errRollback makes a transaction of the suite roll back.
var errRollback = errors.New("storetest: roll back")

// mark inserts the marker of (consumer, id) in a transaction of ib and
// commits it (or rolls it back when commit is false); it returns what Mark
// said.
func mark[TTx any](t *testing.T, ib store.Inbox[TTx], consumer string, id uuid.UUID, commit bool) bool {
	t.Helper()
	var fresh bool
	err := ib.InTx(context.Background(), func(tx TTx) error {
		var err error
		if fresh, err = ib.Mark(context.Background(), tx, consumer, id); err != nil {
			return err
		}
		if !commit {
			return errRollback
		}
		return nil
	})
	if err != nil && !(errors.Is(err, errRollback) && !commit) {
		t.Fatalf("mark %s for %q: %v", id, consumer, err)
	}
	return fresh
}

// near fails unless got is within margin of want. The margin covers a
// database server's clock, which is not the test's.
func near(t *testing.T, what string, got, want time.Time, margin time.Duration) {
	t.Helper()
	if d := got.Sub(want); d < -margin || d > margin {
		t.Errorf("%s is %s, want %s ± %s", what, got, want, margin)
	}
}

// clockMargin is how far the database's clock may be from the test's.
const clockMargin = 10 * time.Second

// A marker is fresh once per consumer and message; a rolled-back transaction leaves none behind.
// Consumer names are compared exactly.
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

// panics reports whether fn panicked.
func panics(fn func()) (panicked bool) {
	defer func() { panicked = recover() != nil }()
	fn()
	return false
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
func testMarkerRetention[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	ctx := context.Background()
	ib := db.Inbox()
	old := make([]uuid.UUID, 5)
	for i := range old {
		old[i] = uuid.New()
		mark(t, ib, "c", old[i], true)
	}
	time.Sleep(200 * time.Millisecond)
	cut := time.Now().Add(-100 * time.Millisecond)
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
	if n, err := db.ConsumerStore().DeleteMarkers(ctx, time.Now().Add(time.Hour), 100); err != nil || n != 2 {
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
// gone once unparked or discarded.
func testParkAndReplay[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	ctx := context.Background()
	cs, a := db.ConsumerStore(), db.Admin()
	at := time.Now().UTC().Truncate(time.Microsecond)
	parked := []store.Parked{{
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
	start := time.Now()
	for _, p := range parked {
		if err := cs.Park(ctx, p); err != nil {
			t.Fatalf("park %+v: %v", p, err)
		}
	}
	all, err := a.Parked(ctx, "", 100)
	if err != nil || len(all) != 3 {
		t.Fatalf("Parked(all) = %d parked, %v; want 3", len(all), err)
	}
	for i, p := range all {
		sameParked(t, p, parked[i])
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
	ids := []int64{all[0].ID, all[1].ID, all[2].ID}
	listed := func(consumer string, limit int) []int64 {
		t.Helper()
		ps, err := a.Parked(ctx, consumer, limit)
		if err != nil {
			t.Fatalf("Parked(%q, %d): %v", consumer, limit, err)
		}
		out := []int64{}
		for _, p := range ps {
			out = append(out, p.ID)
		}
		return out
	}
	toReplay := func(consumer string, limit int) []int64 {
		t.Helper()
		ps, err := cs.ReplayRequested(ctx, consumer, limit)
		if err != nil {
			t.Fatalf("ReplayRequested(%q, %d): %v", consumer, limit, err)
		}
		out := []int64{}
		for _, p := range ps {
			if p.ReplayRequested == nil {
				t.Errorf("parked %d served for replay without a request time", p.ID)
			}
			out = append(out, p.ID)
		}
		return out
	}
	for _, c := range []struct {
		consumer string
		limit    int
		want     []int64
	}{{"billing", 100, []int64{ids[0], ids[2]}}, {"shipping", 100, ids[1:2]}, {"", 2, ids[:2]}, {"nobody", 10, []int64{}}, {"Billing", 10, []int64{}}} {
		if got := listed(c.consumer, c.limit); !slices.Equal(got, c.want) {
			t.Errorf("Parked(%q, %d) = %v, want %v", c.consumer, c.limit, got, c.want)
		}
	}
	if p, err := a.ParkedMessage(ctx, ids[0]); err != nil {
		t.Fatalf("ParkedMessage(%d): %v", ids[0], err)
	} else {
		sameParked(t, p, parked[0])
	}
	missing := ids[2] + 1000
	if _, err := a.ParkedMessage(ctx, missing); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ParkedMessage(missing) = %v, want ErrNotFound", err)
	}
	if err := a.RequestReplay(ctx, missing); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("RequestReplay(missing) = %v, want ErrNotFound", err)
	}

	// Repairs replace the message id and headers, and only those; a repair
	// that changes nothing still finds the row.
	repaired := map[string][]string{"Nats-Msg-Id": {"01939f3a-0000-7000-8000-0000000000aa"}, "Courier-Type": {"Fixed"}}
	for range 2 {
		if err := a.RepairParked(ctx, ids[1], "01939f3a-0000-7000-8000-0000000000aa", repaired); err != nil {
			t.Fatalf("RepairParked(%d): %v", ids[1], err)
		}
	}
	if p, err := a.ParkedMessage(ctx, ids[1]); err != nil || p.MessageID != "01939f3a-0000-7000-8000-0000000000aa" ||
		!maps.EqualFunc(p.Headers, repaired, slices.Equal) || p.Subject != parked[1].Subject || p.Error != parked[1].Error {
		t.Fatalf("ParkedMessage after RepairParked: %+v, %v; want the new id and headers, the rest unchanged", p, err)
	}
	if err := a.RepairParked(ctx, ids[1], parked[1].MessageID, parked[1].Headers); err != nil {
		t.Fatalf("RepairParked(%d) back: %v", ids[1], err)
	}
	if err := a.RepairParked(ctx, missing, "x", nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("RepairParked(missing) = %v, want ErrNotFound", err)
	}

	// Replay requests.
	if got := toReplay("billing", 10); len(got) != 0 {
		t.Fatalf("replays served before any request: %v", got)
	}
	for _, id := range []int64{ids[2], ids[0]} {
		if err := a.RequestReplay(ctx, id); err != nil {
			t.Fatalf("RequestReplay(%d): %v", id, err)
		}
	}
	if err := a.RequestReplay(ctx, ids[2]); err != nil {
		t.Fatalf("RequestReplay(%d) again: %v", ids[2], err)
	}
	if got := toReplay("billing", 10); !slices.Equal(got, []int64{ids[0], ids[2]}) {
		t.Fatalf("ReplayRequested(billing) = %v, want %v (oldest first)", got, []int64{ids[0], ids[2]})
	}
	if got := toReplay("billing", 1); !slices.Equal(got, ids[:1]) {
		t.Fatalf("ReplayRequested(billing, 1) = %v, want %v", got, ids[:1])
	}
	if got := toReplay("shipping", 10); len(got) != 0 {
		t.Fatalf("ReplayRequested(shipping) = %v: another consumer's requests", got)
	}
	p, err := a.ParkedMessage(ctx, ids[0])
	if err != nil || p.ReplayRequested == nil {
		t.Fatalf("ParkedMessage after RequestReplay: %+v, %v; want the request time", p, err)
	}
	near(t, "replay_requested", *p.ReplayRequested, time.Now(), clockMargin)

	// A failed replay withdraws the request and counts an attempt.
	failedAt := time.Now()
	if err := cs.ReplayFailed(ctx, ids[0], "still failing"); err != nil {
		t.Fatalf("ReplayFailed: %v", err)
	}
	if err := cs.ReplayFailed(ctx, ids[1], "still malformed"); err != nil {
		t.Fatalf("ReplayFailed without history: %v", err)
	}
	if got := toReplay("billing", 10); !slices.Equal(got, ids[2:]) {
		t.Fatalf("ReplayRequested(billing) after a failed replay = %v, want %v", got, ids[2:])
	}
	for i, wantErr := range []string{"still failing", "still malformed"} {
		p, err := a.ParkedMessage(ctx, ids[i])
		if err != nil {
			t.Fatalf("ParkedMessage(%d): %v", ids[i], err)
		}
		if len(p.History) != len(parked[i].History)+1 {
			t.Fatalf("parked %d after a failed replay: history %v, want one entry more than %v", p.ID, p.History, parked[i].History)
		}
		last := p.History[len(p.History)-1]
		near(t, "time of the failed replay", last.At, failedAt, clockMargin)
		want := parked[i]
		want.Error, want.Attempts = wantErr, want.Attempts+1
		want.History = append(slices.Clone(want.History), store.Attempt{At: last.At, Error: wantErr})
		sameParked(t, p, want)
		if p.ReplayRequested != nil {
			t.Errorf("parked %d: replay still requested after it failed", p.ID)
		}
	}

	// Unparked after a successful replay; discarded by an operator.
	if err := cs.Unpark(ctx, ids[2]); err != nil {
		t.Fatalf("Unpark: %v", err)
	}
	if _, err := a.ParkedMessage(ctx, ids[2]); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ParkedMessage(unparked) = %v, want ErrNotFound", err)
	}
	if got := toReplay("billing", 10); len(got) != 0 {
		t.Fatalf("ReplayRequested after the unpark = %v, want none", got)
	}
	if err := a.DiscardParked(ctx, ids[1]); err != nil {
		t.Fatalf("DiscardParked: %v", err)
	}
	if err := a.DiscardParked(ctx, ids[1]); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DiscardParked twice = %v, want ErrNotFound", err)
	}
	if got := listed("", 10); !slices.Equal(got, ids[:1]) {
		t.Fatalf("parked after unpark and discard: %v, want %v", got, ids[:1])
	}
}
