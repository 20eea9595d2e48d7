package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
)

// Scheduled messages written through the dialect's Driver reach the broker
// at or after their due times (JetStream's own timestamp), each once, each
// key's in due order and after what the key wrote before they fell due;
// the one cancelled in its own transaction never does, although every
// message due after it did; two relays share the releases. The relays start
// once the schedules and the cancel are committed, so however slowly they
// are written none is released before the others exist (one due at the
// relays' start is late, never out of order); the last one is scheduled
// while they run.
func testScheduled[TTx any](t *testing.T, d store.Driver[TTx]) {
	b := newBroker(t)
	st := relayStore(t, d)
	w := outbox.New(d.Inserter(), outbox.Config{})
	ctx := context.Background()

	now := []courier.Message{courier.NewMessage("events", "k0", "Now", nil), courier.NewMessage("events", "k1", "Now", nil)}
	write(t, d, w, now...)
	var scheduled []dueMsg
	start := time.Now()
	for i := range 60 {
		at := start.Add(time.Second + time.Duration(rand.IntN(1500))*time.Millisecond)
		m := courier.NewMessage("events", fmt.Sprintf("k%d", i%3), "Reminder", fmt.Appendf(nil, "%d", i))
		if err := d.InTx(ctx, func(tx TTx) error { return w.Schedule(ctx, tx, outbox.At(at), m) }); err != nil {
			t.Fatalf("schedule: %v", err)
		}
		scheduled = append(scheduled, dueMsg{m, at})
	}
	cancelled := scheduled[7]
	if err := d.InTx(ctx, func(tx TTx) error { return w.Cancel(ctx, tx, cancelled.msg.ID) }); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	scheduled = append(scheduled[:7], scheduled[8:]...)
	b.startRelays(st, 2)
	relative := courier.NewMessage("events", "relative", "Reminder", []byte("relative"))
	scheduledAt := time.Now()
	if err := d.InTx(ctx, func(tx TTx) error { return w.Schedule(ctx, tx, outbox.After(2*time.Second), relative) }); err != nil {
		t.Fatalf("schedule after a delay: %v", err)
	}

	testenv.Eventually(t, 30*time.Second, func() bool { return b.count() == len(scheduled)+1+len(now) },
		"the stream holds %d of %d messages", testenv.Lazy(func() any { return b.count() }), len(scheduled)+1+len(now))
	stamps := testenv.StreamStamps(t, b.nc, b.stream)
	for _, s := range scheduled {
		if at, ok := stamps[s.msg.ID]; !ok || at.Before(s.at) {
			t.Fatalf("message %s due at %s stored at %s (seen %v): early", s.msg.Payload, s.at, at, ok)
		}
	}
	if at, ok := stamps[relative.ID]; !ok || at.Before(scheduledAt.Add(2*time.Second)) {
		t.Fatalf("the message due two seconds after its scheduling stored at %s, %s after it", at, at.Sub(scheduledAt))
	}
	if _, ok := stamps[cancelled.msg.ID]; ok {
		t.Fatal("the cancelled message was published")
	}
	err := d.InTx(ctx, func(tx TTx) error { return w.Cancel(ctx, tx, scheduled[0].msg.ID) })
	if !errors.Is(err, store.ErrAlreadyDue) {
		t.Fatalf("cancel a published message: %v; want store.ErrAlreadyDue", err)
	}
	checkScheduledOrder(t, b.received(), now, append(scheduled, dueMsg{relative, scheduledAt})...)
}

// dueMsg is a scheduled message and its due time.
type dueMsg struct {
	msg courier.Message
	at  time.Time
}

// checkScheduledOrder fails unless each key's messages in got (first
// copies) are its messages of first, in order, then its scheduled ones in
// due order, those due together in the order they were scheduled.
func checkScheduledOrder(t *testing.T, got, first []courier.Message, scheduled ...dueMsg) {
	t.Helper()
	sort.SliceStable(scheduled, func(i, j int) bool { return scheduled[i].at.Before(scheduled[j].at) })
	want := map[string][]uuid.UUID{}
	for _, m := range first {
		want[m.Key] = append(want[m.Key], m.ID)
	}
	for _, s := range scheduled {
		want[s.msg.Key] = append(want[s.msg.Key], s.msg.ID)
	}
	have := map[string][]uuid.UUID{}
	seen := map[uuid.UUID]bool{}
	for _, m := range got {
		if !seen[m.ID] {
			have[m.Key] = append(have[m.Key], m.ID)
		}
		seen[m.ID] = true
	}
	for k, ids := range want {
		if fmt.Sprint(have[k]) != fmt.Sprint(ids) {
			t.Fatalf("key %s: published %v, want %v", k, have[k], ids)
		}
	}
}

// A scheduled message that keeps failing once released is an ordinary
// message of the outbox: retried, then a dead letter with its history, and
// published at once when the dead letter is replayed.
func testScheduledDeadLetter[TTx any](t *testing.T, d store.Driver[TTx]) {
	pub := memory.NewPublisher()
	cfg := relayConfig(nil)
	cfg.MaxAttempts = 3
	r, err := relay.New(relayStore(t, d), pub, cfg)
	testenv.Must(t, err, "relay")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	w := outbox.New(d.Inserter(), outbox.Config{})
	m := courier.NewMessage("reminders", "order-1", "Reminder", []byte("{}"))
	pub.Fail(m.ID, 3)
	if err := d.InTx(ctx, func(tx TTx) error { return w.Schedule(ctx, tx, outbox.After(200*time.Millisecond), m) }); err != nil {
		t.Fatalf("schedule: %v", err)
	}
	var dead store.DeadLetter
	testenv.Eventually(t, 30*time.Second, func() bool {
		ds, err := d.Admin().DeadLetters(ctx, 10)
		testenv.Must(t, err, "dead letters")
		if len(ds) == 1 {
			dead = ds[0]
		}
		return len(ds) == 1
	}, "no dead letter")
	if dead.MessageID != m.ID.String() || dead.Attempts != 3 || len(dead.History) != 3 {
		t.Fatalf("dead letter %+v; want the scheduled message after 3 attempts", dead)
	}
	testenv.Must(t, d.Admin().ReplayDeadLetter(ctx, dead.ID), "replay")
	testenv.Eventually(t, 30*time.Second, func() bool { return len(pub.Messages()) == 1 }, "the replayed message is not published")
	if got := pub.Messages()[0]; got.ID != m.ID {
		t.Fatalf("published %s, want the scheduled message", got.ID)
	}
}
