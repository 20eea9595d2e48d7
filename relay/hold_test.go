package relay_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
)

// On each database, with HoldKeys: a message the broker rejects for good
// becomes a dead letter that holds its key; the key's later messages, of
// its transaction and of later ones, wait behind it while other keys flow.
// Once the broker takes it, replaying it publishes it, then them, in order.
func TestHeldKeyWaitsForItsDeadLetter(t *testing.T) {
	onEachDatabase(t, testHeldKeyWaitsForItsDeadLetter)
}

func testHeldKeyWaitsForItsDeadLetter(t *testing.T, db database) {
	h := newHarness(t, db, anyNATS)
	ctx := context.Background()
	js, err := jetstream.New(h.nc)
	testenv.Must(t, err, "jetstream")
	limit := func(size int32) {
		_, err = js.UpdateStream(ctx, jetstream.StreamConfig{Name: h.stream, Subjects: []string{h.mapping.Subjects()}, MaxMsgSize: size, Duplicates: 2 * time.Minute})
		testenv.Must(t, err, "limit stream message size")
	}
	limit(1024)

	cfg := h.relayConfig()
	cfg.HoldKeys = []string{"events"}
	h.startRelay(h.publisher(), cfg)

	small := func(key, name string) courier.Message {
		return courier.NewMessage("events", key, "Small", []byte(name))
	}
	before := small("poisoned", "before")
	poison := courier.NewMessage("events", "poisoned", "Huge", []byte(strings.Repeat("x", 2048)))
	after1, after2 := small("poisoned", "after1"), small("poisoned", "after2")
	var others []courier.Message
	for i := range 20 {
		others = append(others, small(fmt.Sprintf("other-%d", i%5), fmt.Sprint(i)))
	}
	h.write(before, poison, after1)
	h.write(others[:10]...)
	h.write(after2)
	h.write(others[10:]...)
	testenv.Eventually(t, 30*time.Second, func() bool {
		s := h.stats()
		return s.Pending == 0 && s.HeldKeys == 1 && s.Held == 2
	}, "the key's later messages are not held: %+v", testenv.Lazy(func() any { return h.stats() }))
	dl := h.deadLetter(poison.ID)
	if !dl.Holds {
		t.Fatalf("dead letter %+v does not hold its key", dl)
	}
	if got := keyPayloads(h.received(), "poisoned"); !slices.Equal(got, []string{"before"}) {
		t.Fatalf("the held key published %q, want before alone", got)
	}
	checkDelivery(t, others, h.received())

	limit(-1)
	testenv.Must(t, h.admin.ReplayDeadLetter(ctx, dl.ID), "replay")
	testenv.Eventually(t, 30*time.Second, func() bool {
		s := h.stats()
		return s.Pending == 0 && s.HeldKeys == 0 && s.Held == 0 && len(keyPayloads(h.received(), "poisoned")) == 4
	}, "the held key did not go on: %+v", testenv.Lazy(func() any { return h.stats() }))
	want := []string{"before", strings.Repeat("x", 2048), "after1", "after2"}
	if got := keyPayloads(h.received(), "poisoned"); !slices.Equal(got, want) {
		t.Fatalf("the key published %.20q, want %.20q", got, want)
	}
}

// keyPayloads returns the payloads of msgs of key, in order.
func keyPayloads(msgs []courier.Message, key string) []string {
	var out []string
	for _, m := range msgs {
		if m.Key == key {
			out = append(out, string(m.Payload))
		}
	}
	return out
}
