package relay_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/memstore"
)

// A dead letter of a topic of HoldKeys holds its key, across topics: the
// key's messages, written before it died and after, wait while the other
// keys flow, and a dead letter of another topic lets its key move on.
// Replaying the dead letter publishes it, then the waiting messages, in
// order; discarding it publishes the waiting ones in order.
func TestUnitHeldKey(t *testing.T) {
	for _, pipelined := range []bool{false, true} {
		for _, act := range []string{"replay", "discard"} {
			t.Run(fmt.Sprintf("pipelined=%v/%s", pipelined, act), func(t *testing.T) {
				testUnitHeldKey(t, pipelined, act)
			})
		}
	}
}

func testUnitHeldKey(t *testing.T, pipelined bool, act string) {
	u := newUnit(t)
	u.pub.KeepOrder(pipelined)
	cfg := u.config()
	cfg.MaxAttempts = 2
	cfg.HoldKeys = []string{"events"}
	poison, loose := msg("p", "poison"), courier.NewMessage("audit", "q", "T", []byte("loose"))
	u.pub.Fail(poison.ID, cfg.MaxAttempts) // a dead letter; published once replayed
	u.pub.Fail(loose.ID, -1)
	before := msg("p", "before")
	after1 := courier.NewMessage("audit", "p", "T", []byte("after1")) // the key, not the topic, is held
	afterQ := courier.NewMessage("audit", "q", "T", []byte("afterQ"))
	var others []courier.Message
	for i := range 20 {
		others = append(others, msg(fmt.Sprintf("o%d", i%4), fmt.Sprint(i)))
	}
	u.write(append([]courier.Message{before, poison, after1, loose, afterQ}, others...)...)
	u.start(cfg)

	u.eventually(func() bool {
		return u.published(others...) && u.published(before) && u.pub.Attempts(poison.ID) == 1 && u.stats().InBackoff == 2
	}, "others not published, or the poison and the loose one not tried: %+v", testenv.Lazy(func() any { return u.stats() }))
	u.advance(time.Hour)
	u.eventually(func() bool { return u.published(afterQ) && u.pub.Attempts(poison.ID) == 2 }, "q did not move on, or the poison not tried again")
	after2 := msg("p", "after2")
	u.write(after2)
	u.eventually(func() bool { s := u.stats(); return s.HeldKeys == 1 && s.Held == 2 && s.Pending == 0 },
		"the key's messages are not held: %+v", testenv.Lazy(func() any { return u.stats() }))
	if got := u.ofKey("p"); !slices.Equal(got, []string{"before"}) {
		t.Fatalf("p published %q while held, want before alone", got)
	}
	var cause int64
	for _, d := range u.st.DeadLetters() {
		if d.MessageID == poison.ID.String() {
			if !d.Holds || d.Held != 2 {
				t.Fatalf("the poison's dead letter: %+v, want it to hold 2", d)
			}
			cause = d.ID
		} else if d.Holds {
			t.Fatalf("the dead letter of a topic not in HoldKeys holds its key: %+v", d)
		}
	}
	if cause == 0 {
		t.Fatalf("no dead letter of the poison: %+v", u.st.DeadLetters())
	}

	want := []string{"before", "poison", "after1", "after2"}
	var err error
	if act == "replay" {
		err = u.st.ReplayDeadLetter(context.Background(), cause)
	} else {
		want = []string{"before", "after1", "after2"}
		err = u.st.DiscardDeadLetter(context.Background(), cause)
	}
	if err != nil {
		t.Fatal(err)
	}
	u.eventually(func() bool { return len(u.ofKey("p")) == len(want) }, "p published %q, want %q", testenv.Lazy(func() any { return u.ofKey("p") }), want)
	if got := u.ofKey("p"); !slices.Equal(got, want) {
		t.Fatalf("p published %q, want %q", got, want)
	}
	if s := u.stats(); s.HeldKeys != 0 || s.Held != 0 {
		t.Fatalf("stats after %s: %+v, want nothing held", act, s)
	}
}

// HoldKeys is validated by New and Validate, naming the field.
func TestHoldKeysValidated(t *testing.T) {
	st := memstore.New(memstore.Config{})
	for _, c := range []struct {
		hold []string
		want string
	}{
		{[]string{"orders", ""}, `relay: Config.HoldKeys[1] is empty: name a topic, or "*" alone for every topic`},
		{[]string{"*", "orders"}, `relay: Config.HoldKeys has "*" among other topics: use "*" alone for every topic, or name the topics`},
		{[]string{"orders", "orders"}, `relay: Config.HoldKeys names "orders" twice: name each topic once`},
	} {
		cfg := relay.Config{HoldKeys: c.hold}
		if err := cfg.Validate(); err == nil || err.Error() != c.want {
			t.Errorf("Validate %q: %v, want %q", c.hold, err, c.want)
		}
		if _, err := relay.New(st, newUnit(t).pub, cfg); err == nil || err.Error() != c.want {
			t.Errorf("New %q: %v, want %q", c.hold, err, c.want)
		}
	}
	for _, ok := range [][]string{{relay.AllTopics}, {"orders", "payments"}} {
		if err := (relay.Config{HoldKeys: ok}).Validate(); err != nil {
			t.Errorf("Validate %q: %v", ok, err)
		}
	}
}
