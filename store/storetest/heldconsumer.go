package storetest

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/store"
)

func consumerOf(st store.Status, name string) store.ConsumerStatus {
	for _, c := range st.Consumers {
		if c.Consumer == name {
			return c
		}
	}
	return store.ConsumerStatus{Consumer: name}
}

// heldStatus is what a consumer's status says of its held keys.
type heldStatus struct {
	parked, heldKeys, held int64
	oldestHold             time.Time
}

// The keys a consumer holds (store.KeyHolds) as operators see them:
// Status counts, per consumer, the keys held, the deliveries parked behind
// them and when the oldest hold began, which a hold keeps while it is
// passed on; ListParked shows each parked delivery's key and the cause it
// waits behind. A consumer's holds are its own: another consumer holding
// the same key counts apart.
func testConsumerHeldKeys[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	ctx := context.Background()
	kh, ok := db.ConsumerStore().(store.KeyHolds)
	if !ok {
		t.Skipf("the ConsumerStore (%T) holds no keys (store.KeyHolds)", db.ConsumerStore())
	}
	ops, a := db.Operations(), db.Admin()
	t0 := db.stopClock()
	if st := opsStatus(t, ops); len(st.Consumers) != 0 {
		t.Fatalf("consumers of an empty database: %+v", st.Consumers)
	}
	park := func(consumer, key string, behindOnly bool) store.Parked {
		t.Helper()
		p := store.Parked{Consumer: consumer, MessageID: uuid.NewString(), Subject: "accounts", Payload: []byte(`{}`),
			Reason: store.ReasonFailed, Error: "boom", Attempts: 3, Key: key}
		got, ok, err := kh.ParkHolding(ctx, p, behindOnly)
		if err != nil || !ok || got.ID == 0 {
			t.Fatalf("park a delivery of %q for %q: %+v, %v, %v", key, consumer, got, ok, err)
		}
		return got
	}
	c1 := park("ledger", "acct-1", false)
	db.clock.Advance(time.Second)
	p2 := park("ledger", "acct-1", false)
	p3 := park("ledger", "acct-1", true)
	if p2.Behind != c1.ID || p3.Behind != c1.ID || p2.Reason != store.ReasonHeld {
		t.Fatalf("deliveries parked behind %d: %+v, %+v", c1.ID, p2, p3)
	}
	db.clock.Advance(time.Second)
	c2 := park("ledger", "acct-2", false)
	audit := park("audit", "acct-1", false) // another consumer: a hold of its own
	if c2.Behind != 0 || audit.Behind != 0 {
		t.Fatalf("causes of new holds parked behind something: %+v, %+v", c2, audit)
	}
	must(t, db.ConsumerStore().Park(ctx, store.Parked{Consumer: "ledger", MessageID: uuid.NewString(), Subject: "accounts",
		Payload: []byte(`{}`), Reason: store.ReasonMalformed, Error: "bad JSON", Attempts: 1}), "park a delivery without a key")

	expect := func(when string, want map[string]heldStatus) {
		t.Helper()
		st := opsStatus(t, ops)
		for name, w := range want {
			c := consumerOf(st, name)
			if c.Parked != w.parked || c.HeldKeys != w.heldKeys || c.Held != w.held || !c.OldestHold.Equal(w.oldestHold) {
				t.Fatalf("%s: status of %q: parked %d, held keys %d, held %d, oldest hold %s; want %d, %d, %d, %s",
					when, name, c.Parked, c.HeldKeys, c.Held, c.OldestHold, w.parked, w.heldKeys, w.held, w.oldestHold)
			}
		}
	}
	expect("with two keys held", map[string]heldStatus{
		"ledger": {parked: 5, heldKeys: 2, held: 2, oldestHold: t0},
		"audit":  {parked: 1, heldKeys: 1, oldestHold: t0.Add(2 * time.Second)},
	})
	list := func(when string, want map[int64]store.ParkedSummary) {
		t.Helper()
		ps, err := a.ListParked(ctx, store.ListQuery{Consumer: "ledger"})
		must(t, err, "list parked")
		if len(ps) != len(want) {
			t.Fatalf("%s: listed %d parked deliveries of ledger, want %d", when, len(ps), len(want))
		}
		for _, p := range ps {
			w, ok := want[p.ID]
			if !ok || p.Key != w.Key || p.Behind != w.Behind || p.Reason != w.Reason {
				t.Fatalf("%s: parked %d listed with key %q, behind %d, reason %q; want %+v", when, p.ID, p.Key, p.Behind, p.Reason, w)
			}
		}
	}
	ps, err := a.ListParked(ctx, store.ListQuery{Consumer: "ledger", Error: "bad JSON"})
	must(t, err, "list parked")
	if len(ps) != 1 {
		t.Fatalf("listed %+v, want the delivery without a key", ps)
	}
	unkeyed := ps[0].ID
	// holds checks Admin.ConsumerHolds of q against want, in cause order.
	holds := func(when string, q store.ListQuery, want []store.ConsumerHold) {
		t.Helper()
		got, err := a.ConsumerHolds(ctx, q)
		must(t, err, "list consumer holds")
		if len(got) != len(want) {
			t.Fatalf("%s: consumer holds of %+v: %+v; want %+v", when, q, got, want)
		}
		for i, g := range got {
			w := want[i]
			if g.Cause != w.Cause || g.Consumer != w.Consumer || g.Key != w.Key || g.Subject != "accounts" ||
				!g.Since.Equal(w.Since) || g.Held != w.Held || g.LastError != "boom" {
				t.Fatalf("%s: consumer hold %d of %+v: %+v; want %+v (subject accounts, error boom)", when, i, q, g, w)
			}
		}
	}
	all := []store.ConsumerHold{
		{Cause: c1.ID, Consumer: "ledger", Key: "acct-1", Since: t0, Held: 2},
		{Cause: c2.ID, Consumer: "ledger", Key: "acct-2", Since: t0.Add(2 * time.Second)},
		{Cause: audit.ID, Consumer: "audit", Key: "acct-1", Since: t0.Add(2 * time.Second)},
	}
	holds("with three keys held", store.ListQuery{}, all)
	holds("by consumer", store.ListQuery{Consumer: "audit"}, all[2:])
	holds("a page after the first", store.ListQuery{After: c1.ID, Limit: 1}, all[1:2])
	holds("by cause", store.ListQuery{IDs: []int64{c2.ID, p2.ID}}, all[1:2]) // p2 holds nothing
	holds("by error", store.ListQuery{Error: "bad JSON"}, nil)
	holds("by topic", store.ListQuery{Topic: "accounts"}, all)
	holds("by another topic", store.ListQuery{Topic: "orders"}, nil)
	if _, err := a.ConsumerHolds(ctx, store.ListQuery{Limit: store.MaxListLimit + 1}); err == nil || !strings.Contains(err.Error(), "Limit") {
		t.Fatalf("ConsumerHolds with a limit of %d: %v, want an error naming the limit", store.MaxListLimit+1, err)
	}
	list("with two keys held", map[int64]store.ParkedSummary{
		c1.ID:   {Key: "acct-1", Reason: store.ReasonFailed},
		p2.ID:   {Key: "acct-1", Behind: c1.ID, Reason: store.ReasonHeld},
		p3.ID:   {Key: "acct-1", Behind: c1.ID, Reason: store.ReasonHeld},
		c2.ID:   {Key: "acct-2", Reason: store.ReasonFailed},
		unkeyed: {Reason: store.ReasonMalformed},
	})
	// In JSON a delivery that holds no key, nor waits behind one, has
	// neither field.
	for _, p := range ps {
		b, err := json.Marshal(p)
		must(t, err, "encode %+v", p)
		if strings.Contains(string(b), `"key"`) || strings.Contains(string(b), `"behind"`) {
			t.Fatalf("JSON of a parked delivery without a key: %s", b)
		}
	}
	if ps, err := a.ListParked(ctx, store.ListQuery{IDs: []int64{p2.ID}}); err != nil || len(ps) != 1 {
		t.Fatalf("list parked %d: %+v, %v", p2.ID, ps, err)
	} else if b, _ := json.Marshal(ps[0]); !strings.Contains(string(b), `"key":"acct-1"`) ||
		!strings.Contains(string(b), `"behind":`+strconv.FormatInt(c1.ID, 10)) {
		t.Fatalf("JSON of a held delivery: %s; want its key and behind %d", b, c1.ID)
	}

	// The hold passes on from c1 to p2, whom p3 now waits behind: one
	// held delivery fewer, the hold as old as it was.
	db.clock.Advance(time.Minute)
	next, err := kh.PassHold(ctx, "ledger", "acct-1", c1.ID)
	if err != nil || next != p2.ID {
		t.Fatalf("pass the hold of acct-1 on from %d: %d, %v; want %d", c1.ID, next, err, p2.ID)
	}
	expect("after the hold passed on", map[string]heldStatus{"ledger": {parked: 4, heldKeys: 2, held: 1, oldestHold: t0}})
	holds("after the hold passed on", store.ListQuery{Consumer: "ledger"}, []store.ConsumerHold{
		{Cause: p2.ID, Consumer: "ledger", Key: "acct-1", Since: t0, Held: 1}, all[1]})
	list("after the hold passed on", map[int64]store.ParkedSummary{
		p2.ID:   {Key: "acct-1", Reason: store.ReasonHeld},
		p3.ID:   {Key: "acct-1", Behind: p2.ID, Reason: store.ReasonHeld},
		c2.ID:   {Key: "acct-2", Reason: store.ReasonFailed},
		unkeyed: {Reason: store.ReasonMalformed},
	})
	for _, id := range []int64{p2.ID, p3.ID} {
		if _, err := kh.PassHold(ctx, "ledger", "acct-1", id); err != nil {
			t.Fatalf("pass the hold of acct-1 on from %d: %v", id, err)
		}
	}
	expect("once acct-1 is released", map[string]heldStatus{
		"ledger": {parked: 2, heldKeys: 1, oldestHold: t0.Add(2 * time.Second)},
		"audit":  {parked: 1, heldKeys: 1, oldestHold: t0.Add(2 * time.Second)},
	})
	for _, p := range []store.Parked{c2, audit} {
		if _, err := kh.PassHold(ctx, p.Consumer, p.Key, p.ID); err != nil {
			t.Fatalf("release %q for %q: %v", p.Key, p.Consumer, err)
		}
	}
	expect("once every key is released", map[string]heldStatus{"ledger": {parked: 1}, "audit": {}})
	holds("once every key is released", store.ListQuery{}, nil)
	if st := opsStatus(t, ops); len(st.Consumers) != 1 {
		t.Fatalf("consumers once every key is released: %+v; want ledger's delivery without a key", st.Consumers)
	}
}
