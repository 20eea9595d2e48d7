package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// A scheduled message of a held key waits behind the dead letter that
// holds the key, as any message of the key does: released while the key is
// held, it is moved behind the dead letter (or, not yet claimed, stays
// pending) in its place among the key's messages, and is published in that
// place after the replay. A scheduled message of another key flows; one
// that falls due after the replay comes after what the replay released.
func testHeldKeyScheduled[TTx any](t *testing.T, h opener[TTx]) {
	db := openHeld(t, h)
	ctx := context.Background()
	t0 := db.stopClock()
	a := keyed("orders", "A", 4)
	b := keyed("orders", "B", 1)
	sA := courier.NewMessage("orders", "A", "ScheduledA", []byte(`"a"`))
	sB := courier.NewMessage("orders", "B", "ScheduledB", []byte(`"b"`))
	mid := courier.NewMessage("orders", "A", "ScheduledMid", []byte(`"mid"`))
	late := courier.NewMessage("orders", "A", "ScheduledLate", []byte(`"late"`))
	db.schedule(t, store.Due{At: t0.Add(10 * time.Second)}, sA, sB)
	db.schedule(t, store.Due{At: t0.Add(20 * time.Second)}, mid)
	db.schedule(t, store.Due{At: t0.Add(time.Hour)}, late)

	db.write(t, a[0], a[1])
	dead := db.drain(10, map[uuid.UUID]bool{a[0].ID: true})
	if len(dead) != 1 {
		t.Fatalf("%d rows died, want A's first", len(dead))
	}
	cause := dead[0]

	// Released while A is held: sA goes behind the dead letter with A's
	// others, sB is published.
	db.clock.Set(t0.Add(10 * time.Second))
	if r := release(t, db.st, 100); r.Count != 2 || !r.Waiting {
		t.Fatalf("release at 10s: %+v; want sA and sB moved, two waiting", r)
	}
	db.write(t, a[2], b[0])
	db.drain(10, nil)
	if got := db.publishedOf("A"); len(got) != 0 {
		t.Fatalf("A published %v behind its dead letter that holds it, want none", got)
	}
	if got, want := db.publishedOf("B"), []uuid.UUID{sB.ID, b[0].ID}; !slices.Equal(got, want) {
		t.Fatalf("B published %v, want %v: a held key holds back no other key's scheduled message", got, want)
	}
	held := db.listHeld(cause, 0, 0)
	var heldIDs []string
	for _, m := range held {
		heldIDs = append(heldIDs, m.MessageID)
	}
	if want := []string{a[1].ID.String(), sA.ID.String(), a[2].ID.String()}; !slices.Equal(heldIDs, want) {
		t.Fatalf("held behind %d: %v; want a1, the scheduled sA, a2: %v", cause, heldIDs, want)
	}

	// Released while A is held but not claimed since: still pending when
	// the replay comes, it goes after the held ones.
	db.clock.Set(t0.Add(20 * time.Second))
	if r := release(t, db.st, 100); r.Count != 1 || !r.Waiting {
		t.Fatalf("release at 20s: %+v; want mid moved, late waiting", r)
	}
	if s := db.stats(); s.HeldKeys != 1 || s.Held != 3 || s.Pending != 1 {
		t.Fatalf("stats before the replay %+v; want 1 held key, 3 held, mid pending", s)
	}
	must(t, db.a.ReplayDeadLetter(ctx, cause), "replay %d", cause)
	db.drain(2, nil)
	want := []uuid.UUID{a[0].ID, a[1].ID, sA.ID, a[2].ID, mid.ID}
	if got := db.publishedOf("A"); !slices.Equal(got, want) {
		t.Fatalf("after the replay A published %v, want %v (a0, a1, sA, a2, mid)", got, want)
	}

	// Due after the replay: published after what it released, before what
	// the key writes later.
	db.clock.Set(t0.Add(time.Hour))
	if r := release(t, db.st, 100); r.Count != 1 || r.Waiting {
		t.Fatalf("release at 1h: %+v; want late moved, none waiting", r)
	}
	db.write(t, a[3])
	db.drain(10, nil)
	want = append(want, late.ID, a[3].ID)
	if got := db.publishedOf("A"); !slices.Equal(got, want) {
		t.Fatalf("A published %v, want %v", got, want)
	}
	if s := db.stats(); s.HeldKeys != 0 || s.Held != 0 || s.Pending != 0 || s.DeadLetters != 0 {
		t.Fatalf("stats at the end %+v; want nothing held, pending or dead", s)
	}
}
