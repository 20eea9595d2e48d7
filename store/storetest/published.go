package storetest

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// What an audit of the broker reads of the database (store.Operations):
// the published copies of a window, whether older copies are kept, and
// where the database holds given messages.

// publishAll claims every claimable row with rs (up to 100) and completes
// them as published, at the clock's time; it returns their records.
func publishAll(t *testing.T, rs store.RelayStore) []store.Record {
	t.Helper()
	b := claim(t, rs, "auditor", 100, time.Minute)
	complete(t, rs, "auditor", b, store.Outcome{Published: seqs(b.Records)})
	return b.Records
}

// publishedBetween returns the copies PublishedBetween passes to its fn,
// failing the test on an error.
func publishedBetween(t *testing.T, ops store.Operations, from, to time.Time) []store.PublishedCopy {
	t.Helper()
	var got []store.PublishedCopy
	err := ops.PublishedBetween(context.Background(), from, to, func(c store.PublishedCopy) error {
		got = append(got, c)
		return nil
	})
	must(t, err, "published copies from %s to %s", from, to)
	return got
}

// wantCopy is a published copy the suite expects: the message and when it
// was published.
type wantCopy struct {
	rec store.Record
	at  time.Time
}

// sameCopies fails unless got are the copies of want, in that order, with
// every field as written and published.
func sameCopies(t *testing.T, what string, got []store.PublishedCopy, want ...wantCopy) {
	t.Helper()
	ids := make([]int64, len(got))
	for i, c := range got {
		ids[i] = c.ID
	}
	if len(got) != len(want) {
		t.Fatalf("%s: copies of rows %v, want %d copies", what, ids, len(want))
	}
	for i, w := range want {
		c, m := got[i], w.rec.Message
		if c.ID != w.rec.Seq || c.MessageID != m.ID.String() || c.Topic != m.Topic || c.Key != m.Key || c.Type != m.Type ||
			!c.PublishedAt.Equal(w.at) || c.PublishedAt.Location() != time.UTC {
			t.Fatalf("%s: copy %d is %+v; want row %d, message %s, %s/%s/%s, published at %s in UTC (copies of rows %v)",
				what, i, c, w.rec.Seq, m.ID, m.Topic, m.Key, m.Type, w.at, ids)
		}
	}
}

// PublishedBetween passes the copies published in [from, to), to the
// microsecond of the store's clock, in id order (not in the order they
// were published), with their message ids as canonical uuid text; it
// leaves out rows published without KeepPublished and pending rows, and
// returns fn's error as it is, calling fn no more.
func testPublishedBetween[TTx any](t *testing.T, db *relayDB[TTx]) {
	ops := db.ops(t)
	t0 := db.stopClock()
	keep, plain := db.newStore(t, true), db.newStore(t, false)
	if got := publishedBetween(t, ops, t0.Add(-time.Hour), t0.Add(time.Hour)); len(got) != 0 {
		t.Fatalf("copies of an empty table: %+v", got)
	}
	db.write(t, courier.NewMessage("orders", "k1", "OrderPlaced", []byte("1")))
	early := publishAll(t, keep)[0] // at t0: before the window

	t1 := t0.Add(time.Minute)
	db.clock.Set(t1)
	db.write(t, courier.NewMessage("payments", "k2", "PaymentTaken", []byte("2")),
		courier.NewMessage("orders", "k3", "OrderShipped", []byte("3")))
	b := claim(t, keep, "auditor", 10, time.Minute)
	if len(b.Records) != 2 {
		t.Fatalf("claimed %d rows, want 2", len(b.Records))
	}
	second, third := b.Records[0], b.Records[1]
	complete(t, keep, "auditor", b, store.Outcome{Published: []int64{third.Seq}}) // the later row first, at t1
	db.clock.Set(t1.Add(tick))
	if again := publishAll(t, keep); len(again) != 1 || again[0].Seq != second.Seq {
		t.Fatalf("published %v, want row %d", seqs(again), second.Seq)
	}
	db.clock.Set(t1.Add(2 * tick))
	db.write(t, courier.NewMessage("orders", "k4", "NotKept", []byte("4")))
	publishAll(t, plain)

	t2 := t1.Add(time.Minute)
	db.clock.Set(t2)
	db.write(t, courier.NewMessage("orders", "k5", "OrderPlaced", []byte("5")))
	late := publishAll(t, keep)[0] // at t2: the window's end, left out
	db.write(t, courier.NewMessage("orders", "k6", "Pending", []byte("6")))

	sameCopies(t, "window [t1, t2)", publishedBetween(t, ops, t1, t2), wantCopy{second, t1.Add(tick)}, wantCopy{third, t1})
	sameCopies(t, "window [t1, t1+1µs)", publishedBetween(t, ops, t1, t1.Add(tick)), wantCopy{third, t1})
	sameCopies(t, "window [t0, t2+1µs)", publishedBetween(t, ops, t0, t2.Add(tick)),
		wantCopy{early, t0}, wantCopy{second, t1.Add(tick)}, wantCopy{third, t1}, wantCopy{late, t2})
	if got := publishedBetween(t, ops, t0.Add(tick), t1); len(got) != 0 {
		t.Fatalf("copies between two publications: %+v; want none", got)
	}

	errStop := errors.New("storetest: stop reading")
	calls := 0
	err := ops.PublishedBetween(context.Background(), t0, t2.Add(tick), func(store.PublishedCopy) error {
		calls++
		if calls == 2 {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) || err != errStop || calls != 2 {
		t.Fatalf("PublishedBetween with fn failing at the second copy: %v after %d calls; want fn's error as it is, after 2", err, calls)
	}
	sameCopies(t, "the window read again after fn failed", publishedBetween(t, ops, t1, t2),
		wantCopy{second, t1.Add(tick)}, wantCopy{third, t1})
}

// PublishedBefore reports whether a copy published strictly before t is
// kept: none on an empty table nor for a pending row, and none once the
// copies before t are trimmed.
func testPublishedBefore[TTx any](t *testing.T, db *relayDB[TTx]) {
	ops, ctx := db.ops(t), context.Background()
	t0 := db.stopClock()
	before := func(at time.Time, want bool, what string) {
		t.Helper()
		if got, err := ops.PublishedBefore(ctx, at); err != nil || got != want {
			t.Fatalf("PublishedBefore %s: %v, %v; want %v", what, got, err, want)
		}
	}
	before(t0.Add(24*time.Hour), false, "on an empty table")
	db.write(t, courier.NewMessage("orders", "k1", "T", []byte("1")))
	before(t0.Add(24*time.Hour), false, "with a pending row only")
	t1 := t0.Add(time.Minute)
	db.clock.Set(t1)
	publishAll(t, db.newStore(t, true))
	before(t0, false, "an hour before the copy")
	before(t1, false, "the copy's time")
	before(t1.Add(tick), true, "a microsecond after the copy's time")
	before(t0.Add(24*time.Hour), true, "a day later")
	if res, err := ops.Trim(ctx, store.Trim{Table: store.TablePublished, Before: t1.Add(tick)}); err != nil || res.Deleted != 1 {
		t.Fatalf("trim the copy: %+v, %v", res, err)
	}
	before(t0.Add(24*time.Hour), false, "once the copy was trimmed")
}

// Locate finds pending rows, published copies and dead letters by message
// id, the first of these winning for a message held twice; it leaves out
// unknown ids and strings that are not uuids, reports an id under the text
// it was given in, and takes more ids than one statement does.
func testLocate[TTx any](t *testing.T, db *relayDB[TTx]) {
	ops, ctx := db.ops(t), context.Background()
	db.stopClock()
	for _, ids := range [][]string{nil, {}, {"not-a-uuid", ""}} {
		if got, err := ops.Locate(ctx, ids); err != nil || got == nil || len(got) != 0 {
			t.Fatalf("Locate(%q): %v, %v; want an empty map", ids, got, err)
		}
	}
	rs := db.newStore(t, true)
	pub, dead := courier.NewMessage("orders", "k1", "T", []byte("1")), courier.NewMessage("orders", "k2", "T", []byte("2"))
	twice := courier.NewMessage("orders", "k3", "T", []byte("3"))   // published, then written again: pending wins
	buried := courier.NewMessage("orders", "k4", "T", []byte("4"))  // published, then written again and dead: published wins
	pending := courier.NewMessage("orders", "k5", "T", []byte("5")) // written last, never claimed
	db.write(t, pub, dead, twice, buried)
	b := claim(t, rs, "auditor", 10, time.Minute)
	if len(b.Records) != 4 {
		t.Fatalf("claimed %d rows, want 4", len(b.Records))
	}
	complete(t, rs, "auditor", b, store.Outcome{
		Published: []int64{b.Records[0].Seq, b.Records[2].Seq, b.Records[3].Seq},
		Dead:      []store.Failure{{Seq: b.Records[1].Seq, Error: "too big", Counted: true}},
	})
	db.write(t, courier.NewMessage("orders", "k3", "T", []byte("3"), courier.WithID(twice.ID)),
		courier.NewMessage("orders", "k4", "T", []byte("4"), courier.WithID(buried.ID)))
	b = claim(t, rs, "auditor", 10, time.Minute)
	if len(b.Records) != 2 {
		t.Fatalf("claimed %d rows written again, want 2", len(b.Records))
	}
	complete(t, rs, "auditor", b, store.Outcome{Dead: []store.Failure{{Seq: b.Records[1].Seq, Error: "too big", Counted: true}}})
	db.write(t, pending)

	upper := strings.ToUpper(pub.ID.String())
	ids := []string{pending.ID.String()} // in the first statement's chunk
	for range 1100 {
		ids = append(ids, uuid.NewString())
	}
	ids = append(ids, "not-a-uuid", "", upper, pub.ID.String(), dead.ID.String(), twice.ID.String(), buried.ID.String(),
		pending.ID.String())
	want := map[string]store.Place{
		pending.ID.String(): store.PlacePending,
		pub.ID.String():     store.PlacePublished,
		upper:               store.PlacePublished,
		dead.ID.String():    store.PlaceDeadLetter,
		twice.ID.String():   store.PlacePending,
		buried.ID.String():  store.PlacePublished,
	}
	got, err := ops.Locate(ctx, ids)
	must(t, err, "locate %d ids", len(ids))
	if !maps.Equal(got, want) {
		t.Fatalf("Locate of %d ids: %v; want %v", len(ids), got, want)
	}
	if got, err := ops.Locate(ctx, []string{dead.ID.String()}); err != nil || !maps.Equal(got, map[string]store.Place{dead.ID.String(): store.PlaceDeadLetter}) {
		t.Fatalf("Locate of the dead letter alone: %v, %v", got, err)
	}
}
