package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/claims"
)

// heldDB is a test's database for held keys: its relay store, its Admin,
// and the messages published so far, in the order they were.
type heldDB[TTx any] struct {
	*testDB[TTx]
	t         *testing.T
	st        store.RelayStore
	a         store.Admin
	published []courier.Message
}

func openHeld[TTx any](t *testing.T, h opener[TTx]) *heldDB[TTx] {
	db := open(t, h, true)
	return &heldDB[TTx]{testDB: db, t: t, st: db.newStore(t, false), a: db.Admin()}
}

// drain claims and completes until a claim finds nothing, as a relay
// would: the rows whose message poison names die holding their key (the
// key's later rows of the batch are left for later, as the relay leaves
// them), the others are published. It returns the dead rows' seqs.
func (h *heldDB[TTx]) drain(limit int, poison map[uuid.UUID]bool) []int64 {
	t := h.t
	t.Helper()
	var dead []int64
	for range 10_000 {
		b := claim(t, h.st, "r", limit, time.Minute)
		if len(b.Records) == 0 {
			return dead
		}
		var o store.Outcome
		stopped := map[string]bool{}
		for _, r := range b.Records {
			switch {
			case stopped[r.Message.Key]:
			case poison[r.Message.ID]:
				stopped[r.Message.Key] = true
				o.Dead = append(o.Dead, store.Failure{Seq: r.Seq, Error: "rejected: poison " + r.Message.Key, Counted: true, Hold: true})
				dead = append(dead, r.Seq)
			default:
				o.Published = append(o.Published, r.Seq)
				h.published = append(h.published, r.Message)
			}
		}
		complete(t, h.st, "r", b, o)
	}
	t.Fatal("drain: the outbox never emptied")
	return nil
}

// publishedOf returns the ids of the messages of key published, in order.
func (h *heldDB[TTx]) publishedOf(key string) []uuid.UUID {
	var out []uuid.UUID
	for _, m := range h.published {
		if m.Key == key {
			out = append(out, m.ID)
		}
	}
	return out
}

func idsOf(msgs []courier.Message) []uuid.UUID {
	out := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func (h *heldDB[TTx]) stats() store.Stats {
	h.t.Helper()
	s, err := h.a.Stats(context.Background())
	must(h.t, err, "stats")
	return s
}

func (h *heldDB[TTx]) heldKeys(q store.ListQuery) []store.HeldKey {
	h.t.Helper()
	ks, err := h.a.HeldKeys(context.Background(), q)
	must(h.t, err, "held keys of %+v", q)
	return ks
}

func (h *heldDB[TTx]) listHeld(cause, after int64, limit int) []store.HeldMessage {
	h.t.Helper()
	ms, err := h.a.ListHeld(context.Background(), cause, after, limit)
	must(h.t, err, "held messages behind %d", cause)
	return ms
}

// keyed returns n messages of key on topic, typed T0, T1, …
func keyed(topic, key string, n int) []courier.Message {
	out := make([]courier.Message, n)
	for i := range out {
		out[i] = courier.NewMessage(topic, key, fmt.Sprintf("T%d", i), fmt.Appendf(nil, `{"n":%d}`, i),
			courier.WithContentType(courier.ContentTypeJSON))
	}
	return out
}

// A dead letter that holds its key stops the key, and only it: its later
// messages wait in courier_outbox_held, shown by Stats, HeldKeys,
// ListHeld, DeadLetter and ListDeadLetters; a dead letter that does not
// hold its key lets it move on. Replaying it publishes it first and then
// the held messages, in order.
func testHeldKeyReplay[TTx any](t *testing.T, h opener[TTx]) {
	db := openHeld(t, h)
	ctx := context.Background()
	a := keyed("orders", "A", 4)
	b := keyed("orders", "B", 3)
	c := keyed("orders", "C", 2) // dies without holding its key
	db.write(t, a[0], b[0], c[0], a[1], b[1], c[1], a[2], b[2])
	before := db.clock.Now()
	dead := db.drain(2, map[uuid.UUID]bool{a[0].ID: true})
	if len(dead) != 1 {
		t.Fatalf("%d rows died, want A's first", len(dead))
	}
	cause := dead[0]
	if got, want := db.publishedOf("B"), idsOf(b); !slices.Equal(got, want) {
		t.Fatalf("B published %v, want %v: a held key stops no other key", got, want)
	}
	if got := db.publishedOf("A"); len(got) != 0 {
		t.Fatalf("A published %v behind its dead letter that holds it, want none", got)
	}

	// C's first dies without holding its key: C moves on.
	db.write(t, c[0])
	cb := claim(t, db.st, "r", 10, time.Minute)
	if len(cb.Records) != 1 || cb.Records[0].Message.Key != "C" {
		t.Fatalf("claimed %v, want C's row alone", keysOf(cb.Records))
	}
	complete(t, db.st, "r", cb, store.Outcome{Dead: []store.Failure{{Seq: cb.Records[0].Seq, Error: "rejected", Counted: true}}})
	other := cb.Records[0].Seq

	db.write(t, a[3])
	db.drain(10, nil)
	if got := db.publishedOf("A"); len(got) != 0 {
		t.Fatalf("A published %v behind its dead letter that holds it, want none", got)
	}
	checkHeldViews(t, db, cause, other, a, before)

	// Replay: the dead letter first, then the held messages, in order.
	must(t, db.a.ReplayDeadLetter(ctx, cause), "replay %d", cause)
	if err := db.a.ReplayDeadLetter(ctx, cause); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("replaying dead letter %d again: %v, want store.ErrNotFound", cause, err)
	}
	db.drain(3, nil)
	if got, want := db.publishedOf("A"), idsOf(a); !slices.Equal(got, want) {
		t.Fatalf("after the replay A published %v, want %v", got, want)
	}
	s := db.stats()
	if s.HeldKeys != 0 || s.Held != 0 || !s.OldestHold.IsZero() || s.Pending != 0 {
		t.Fatalf("after the replay stats %+v, want no held key, no held message, nothing pending", s)
	}
	if n := db.count(t, "courier_outbox_held"); n != 0 {
		t.Fatalf("%d rows left in courier_outbox_held, want 0", n)
	}
	// The dead letter that does not hold its key is still there, as it was.
	d, err := db.a.DeadLetter(ctx, other)
	must(t, err, "dead letter %d", other)
	if d.Holds || d.Held != 0 {
		t.Fatalf("dead letter %d: Holds %v, Held %d, want false and 0", other, d.Holds, d.Held)
	}
}

// checkHeldViews checks what Stats, HeldKeys, ListHeld, DeadLetter,
// DeadLetters and ListDeadLetters show of A's dead letter cause, which
// holds A's three later messages, and of other, which holds nothing.
func checkHeldViews[TTx any](t *testing.T, db *heldDB[TTx], cause, other int64, a []courier.Message, before time.Time) {
	ctx := context.Background()
	s := db.stats()
	if s.HeldKeys != 1 || s.Held != 3 || s.DeadLetters != 2 {
		t.Fatalf("stats %+v, want 1 held key, 3 held messages, 2 dead letters", s)
	}
	near(t, "OldestHold", s.OldestHold, before, time.Second)
	// Status shows them too, by topic, and the outbox's totals as Stats.
	st := opsStatus(t, db.Operations())
	if o := st.Outbox; o.HeldKeys != 1 || o.Held != 3 || !o.OldestHold.Equal(s.OldestHold) {
		t.Fatalf("status' outbox %+v, want 1 held key, 3 held messages, its oldest hold at %s as Stats", o, s.OldestHold)
	}
	if ts := topicOf(st, "orders"); ts.HeldKeys != 1 || ts.Held != 3 || !ts.OldestHold.Equal(s.OldestHold) || ts.DeadLetters != 2 {
		t.Fatalf("status of topic orders %+v, want 1 held key, 3 held messages, 2 dead letters", ts)
	}
	ks := db.heldKeys(store.ListQuery{})
	if len(ks) != 1 {
		t.Fatalf("held keys %+v, want A's", ks)
	}
	k := ks[0]
	if k.Cause != cause || k.Topic != "orders" || k.Key != "A" || k.Held != 3 || k.LastError != "rejected: poison A" {
		t.Fatalf("held key %+v, want cause %d, orders/A, 3 held, its error", k, cause)
	}
	near(t, "HeldKey.Since", k.Since, before, time.Second)
	for _, q := range []store.ListQuery{{Topic: "orders"}, {Error: "POISON"}, {IDs: []int64{cause}}, {After: cause - 1}} {
		if got := db.heldKeys(q); len(got) != 1 {
			t.Fatalf("held keys of %+v: %+v, want A's", q, got)
		}
	}
	for _, q := range []store.ListQuery{{Topic: "payments"}, {Error: "timeout"}, {IDs: []int64{other}}, {After: cause}} {
		if got := db.heldKeys(q); len(got) != 0 {
			t.Fatalf("held keys of %+v: %+v, want none", q, got)
		}
	}
	if _, err := db.a.HeldKeys(ctx, store.ListQuery{Limit: store.MaxListLimit + 1}); err == nil || !strings.Contains(err.Error(), "Limit") {
		t.Fatalf("held keys of a limit too large: %v, want an error naming Limit", err)
	}

	ms := db.listHeld(cause, 0, 0)
	if len(ms) != 3 {
		t.Fatalf("held behind %d: %+v, want A's 3 later messages", cause, ms)
	}
	for i, m := range ms {
		w := a[i+1]
		if m.Behind != cause || m.MessageID != w.ID.String() || m.Key != "A" || m.Topic != "orders" || m.Type != w.Type {
			t.Fatalf("held message %d: %+v, want %s of A behind %d", i, m, w.Type, cause)
		}
		if i > 0 && m.ID <= ms[i-1].ID {
			t.Fatalf("held messages not in id order: %d after %d", m.ID, ms[i-1].ID)
		}
		near(t, "HeldMessage.CreatedAt", m.CreatedAt, before, time.Hour)
		near(t, "HeldMessage.HeldAt", m.HeldAt, db.clock.Now(), time.Second)
	}
	if page := db.listHeld(cause, ms[0].ID, 1); len(page) != 1 || page[0].ID != ms[1].ID {
		t.Fatalf("held after %d, 1 of them: %+v, want the second", ms[0].ID, page)
	}
	if none := db.listHeld(other, 0, 10); len(none) != 0 {
		t.Fatalf("held behind %d: %+v, want none", other, none)
	}
	for _, bad := range []int{-1, store.MaxListLimit + 1} {
		if _, err := db.a.ListHeld(ctx, cause, 0, bad); err == nil || !strings.Contains(err.Error(), "limit") {
			t.Fatalf("ListHeld with limit %d: %v, want an error naming the limit", bad, err)
		}
	}
	if ok := db.listHeld(cause, 0, store.MaxListLimit); len(ok) != 3 {
		t.Fatalf("ListHeld with limit %d: %d messages, want 3", store.MaxListLimit, len(ok))
	}

	d, err := db.a.DeadLetter(ctx, cause)
	must(t, err, "dead letter %d", cause)
	if !d.Holds || d.Held != 3 || d.Attempts != 1 {
		t.Fatalf("dead letter %d: Holds %v, Held %d, Attempts %d, want true, 3, 1", cause, d.Holds, d.Held, d.Attempts)
	}
	ds, err := db.a.DeadLetters(ctx, 10)
	must(t, err, "dead letters")
	for _, d := range ds {
		if d.Holds != (d.ID == cause) {
			t.Fatalf("dead letter %d in DeadLetters: Holds %v", d.ID, d.Holds)
		}
	}
	sums, err := db.a.ListDeadLetters(ctx, store.ListQuery{})
	must(t, err, "list dead letters")
	if len(sums) != 2 {
		t.Fatalf("listed %d dead letters, want 2", len(sums))
	}
	for _, d := range sums {
		if d.Holds != (d.ID == cause) {
			t.Fatalf("dead letter %d in ListDeadLetters: Holds %v", d.ID, d.Holds)
		}
	}
}

// Discarding a dead letter that holds its key lets the key move on: its
// held messages, then its later ones, in order.
func testHeldKeyDiscard[TTx any](t *testing.T, h opener[TTx]) {
	db := openHeld(t, h)
	ctx := context.Background()
	a := keyed("orders", "A", 5)
	db.write(t, a[:3]...)
	dead := db.drain(10, map[uuid.UUID]bool{a[0].ID: true})
	if len(dead) != 1 {
		t.Fatalf("%d rows died, want A's first", len(dead))
	}
	db.drain(10, nil) // moves A's second and third behind it
	if s := db.stats(); s.Held != 2 || s.Pending != 0 {
		t.Fatalf("stats %+v, want 2 held, none pending", s)
	}
	// A later message still in the outbox when the discard comes goes
	// after the held ones.
	db.write(t, a[3])
	must(t, db.a.DiscardDeadLetter(ctx, dead[0]), "discard %d", dead[0])
	if err := db.a.DiscardDeadLetter(ctx, dead[0]); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("discarding dead letter %d again: %v, want store.ErrNotFound", dead[0], err)
	}
	db.write(t, a[4])
	db.drain(1, nil)
	if got, want := db.publishedOf("A"), idsOf(a[1:]); !slices.Equal(got, want) {
		t.Fatalf("after the discard A published %v, want %v", got, want)
	}
	if s := db.stats(); s.HeldKeys != 0 || s.Held != 0 || s.DeadLetters != 0 {
		t.Fatalf("after the discard stats %+v, want nothing held, no dead letter", s)
	}
}

// A poison message in the middle of 1,000 keys holds its key alone; every
// other key's messages are published in order, and once its dead letter is
// replayed (or discarded) its key's are too.
func testHeldKeysSweep[TTx any](t *testing.T, h opener[TTx]) {
	db := openHeld(t, h)
	ctx := context.Background()
	const keys, per = 1000, 3
	poisonKeys := []int{3, 250, 501, 502, 999}
	var msgs []courier.Message
	byKey := make([][]courier.Message, keys)
	for j := range per {
		for i := range keys {
			m := courier.NewMessage("events", fmt.Sprintf("k%d", i), fmt.Sprintf("T%d", j), fmt.Appendf(nil, "%d", j))
			byKey[i] = append(byKey[i], m)
			msgs = append(msgs, m)
		}
	}
	poison := map[uuid.UUID]bool{}
	for _, i := range poisonKeys {
		poison[byKey[i][1].ID] = true // the middle one: the first is published
	}
	db.write(t, msgs...)
	dead := db.drain(100, poison)
	if len(dead) != len(poisonKeys) {
		t.Fatalf("%d rows died, want %d", len(dead), len(poisonKeys))
	}
	for i := range keys {
		want := idsOf(byKey[i])
		if slices.Contains(poisonKeys, i) {
			want = want[:1]
		}
		if got := db.publishedOf(fmt.Sprintf("k%d", i)); !slices.Equal(got, want) {
			t.Fatalf("k%d published %v, want %v", i, got, want)
		}
	}
	if s := db.stats(); s.HeldKeys != int64(len(poisonKeys)) || s.Held != int64(len(poisonKeys)) || s.Pending != 0 {
		t.Fatalf("stats %+v, want %d held keys each holding one message, nothing pending", s, len(poisonKeys))
	}
	slices.Sort(dead)
	for i, id := range dead {
		if i%2 == 0 {
			must(t, db.a.ReplayDeadLetter(ctx, id), "replay %d", id)
		} else {
			must(t, db.a.DiscardDeadLetter(ctx, id), "discard %d", id)
		}
	}
	db.drain(100, nil)
	for n, i := range poisonKeys {
		want := idsOf(byKey[i])
		if n%2 == 1 { // discarded
			want = slices.Delete(want, 1, 2)
		}
		if got := db.publishedOf(fmt.Sprintf("k%d", i)); !slices.Equal(got, want) {
			t.Fatalf("k%d published %v, want %v", i, got, want)
		}
	}
	if s := db.stats(); s.HeldKeys != 0 || s.Held != 0 || s.Pending != 0 {
		t.Fatalf("stats %+v, want nothing held or pending", s)
	}
}

// A held key's backlog larger than a claim's window hides no other key:
// the claims move it out of the way.
func testHeldBacklogBeyondWindow[TTx any](t *testing.T, h opener[TTx]) {
	db := openHeld(t, h)
	p := courier.NewMessage("events", "poisoned", "Poison", []byte("poison"))
	db.write(t, p)
	dead := db.drain(10, map[uuid.UUID]bool{p.ID: true})
	if len(dead) != 1 {
		t.Fatalf("%d rows died, want the poison message", len(dead))
	}
	const limit = 10
	backlog := make([]courier.Message, claims.Window(limit)+1000)
	for i := range backlog {
		backlog[i] = courier.NewMessage("events", "poisoned", "Numbered", fmt.Appendf(nil, "%d", i))
	}
	for c := range slices.Chunk(backlog, 5000) {
		db.write(t, c...)
	}
	other := courier.NewMessage("events", "other", "Other", []byte("other"))
	db.write(t, other)
	claimed := false
	for range 3 { // one claim moves at most a window of rows
		b := claim(t, db.st, "r", limit, time.Minute)
		if len(b.Records) == 0 {
			continue
		}
		if claimed || len(b.Records) != 1 || b.Records[0].Message.ID != other.ID {
			t.Fatalf("claimed %v, want the other key's row alone, once", keysOf(b.Records))
		}
		claimed = true
	}
	if !claimed {
		t.Fatalf("3 claims did not reach the other key's row behind %d held rows (window %d)", len(backlog), claims.Window(limit))
	}
	if s := db.stats(); s.Held != int64(len(backlog)) || s.Pending != 1 {
		t.Fatalf("stats %+v, want the backlog held and the other key's (leased) row pending", s)
	}
}

// Replays and discards of a dead letter that holds its key race with
// claims (which move the key's rows behind it) and with inserts on the
// key: no row is left behind a dead letter that is gone, every message is
// published once, the messages written before the replay or discard after
// its dead letter (replay) in order, and those written after it returned
// after them.
func testHeldKeyRace[TTx any](t *testing.T, h opener[TTx]) {
	db := openHeld(t, h)
	ctx := context.Background()
	for round := range 8 {
		key := fmt.Sprintf("race%d", round)
		p := courier.NewMessage("events", key, "Poison", []byte("poison"))
		db.write(t, p)
		dead := db.drain(10, map[uuid.UUID]bool{p.ID: true})
		if len(dead) != 1 {
			t.Fatalf("round %d: %d rows died, want the poison message", round, len(dead))
		}
		db.published = nil
		var (
			early, during, late []courier.Message
			claimed             []courier.Message
			claimErr, writeErr  error
			wg                  sync.WaitGroup
			replay              = round%2 == 0
			started, released   = make(chan struct{}), make(chan struct{})
			written             = make(chan struct{})
		)
		write := func(to *[]courier.Message, n int) {
			m := courier.NewMessage("events", key, "Later", fmt.Appendf(nil, "%d", n))
			if err := db.writeTx(ctx, []courier.Message{m}, true); err != nil && writeErr == nil {
				writeErr = err
			}
			*to = append(*to, m)
		}
		wg.Add(2)
		go func() { // the writer: before, during and after the release
			defer wg.Done()
			defer close(written)
			for n := range 10 {
				write(&early, n)
			}
			close(started)
			for n := range 10 {
				write(&during, 10+n)
			}
			<-released
			for n := range 10 {
				write(&late, 20+n)
			}
		}()
		go func() { // a relay: claims and publishes (no row dies)
			defer wg.Done()
			for {
				select {
				case <-written:
					return
				default:
				}
				b, err := db.st.Claim(ctx, "racer", 5, time.Minute)
				if err != nil {
					claimErr = err
					return
				}
				for _, r := range b.Records {
					claimed = append(claimed, r.Message)
				}
				if len(b.Records) > 0 {
					if err := db.st.Complete(ctx, "racer", b.Lease, store.Outcome{Published: seqs(b.Records)}); err != nil {
						claimErr = err
						return
					}
				}
			}
		}()
		<-started
		var err error
		if replay {
			err = db.a.ReplayDeadLetter(ctx, dead[0])
		} else {
			err = db.a.DiscardDeadLetter(ctx, dead[0])
		}
		close(released)
		wg.Wait()
		must(t, err, "release dead letter")
		must(t, claimErr, "claim")
		must(t, writeErr, "write")
		db.published = append(claimed, db.published...)
		db.drain(7, nil)
		if n := db.count(t, "courier_outbox_held"); n != 0 {
			t.Fatalf("round %d: %d rows left in courier_outbox_held after the release", round, n)
		}
		if s := db.stats(); s.HeldKeys != 0 || s.Held != 0 || s.Pending != 0 {
			t.Fatalf("round %d: stats %+v, want nothing held or pending", round, s)
		}
		checkRaceOrder(t, round, db.publishedOf(key), p, replay, early, during, late)
	}
}

// checkRaceOrder checks a race round's key: published each once, the dead
// letter first when replayed, the messages written before the release in
// order before those written after.
func checkRaceOrder(t *testing.T, round int, got []uuid.UUID, p courier.Message, replay bool, early, during, late []courier.Message) {
	t.Helper()
	want := len(early) + len(during) + len(late)
	if replay {
		want++
	}
	if len(got) != want {
		t.Fatalf("round %d: published %d messages of the key, want %d (each once)", round, len(got), want)
	}
	pos := make(map[uuid.UUID]int, len(got))
	for i, id := range got {
		if _, dup := pos[id]; dup {
			t.Fatalf("round %d: message %s published twice", round, id)
		}
		pos[id] = i
	}
	var order []courier.Message
	if replay {
		order = append(order, p)
	}
	order = append(order, early...)
	for i := 1; i < len(order); i++ {
		if pos[order[i].ID] < pos[order[i-1].ID] {
			t.Fatalf("round %d: %s published before %s, written (or replayed) after it", round, order[i].ID, order[i-1].ID)
		}
	}
	for i := 1; i < len(late); i++ {
		if pos[late[i].ID] < pos[late[i-1].ID] {
			t.Fatalf("round %d: late %s published before %s, written after it", round, late[i].ID, late[i-1].ID)
		}
	}
	if len(late) > 0 {
		for _, m := range append(order, during...) {
			if pos[late[0].ID] < pos[m.ID] {
				t.Fatalf("round %d: %s, written after the release returned, published before %s", round, late[0].ID, m.ID)
			}
		}
	}
}
