package relay_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/memstore"
)

// schedule commits msgs due at due.
func (u *unit) schedule(due store.Due, msgs ...courier.Message) {
	u.t.Helper()
	ctx := context.Background()
	if err := u.st.InTx(ctx, func(tx *memstore.Tx) error { return u.w.Schedule(ctx, tx, due, msgs...) }); err != nil {
		u.t.Fatalf("schedule: %v", err)
	}
}

// A relay publishes a scheduled message once the clock reaches its due
// time, never before, while its key's other messages go out at once; the
// relay learns of a new, earlier due time from the writer's wake-up.
func TestUnitScheduledPublishedWhenDue(t *testing.T) {
	u := newUnit(t)
	t0 := u.clock.Now()
	r, _ := u.start(u.config())
	u.schedule(outbox.At(t0.Add(time.Hour)), msg("k", "in an hour"))
	u.schedule(outbox.After(30*time.Minute), msg("k", "in half an hour"))
	now := msg("k", "now")
	u.write(now)
	u.eventually(func() bool { return u.published(now) }, "the message written now is not published")
	// Give the relay every chance to publish early: poll and look again.
	for range 5 {
		u.write(msg("other", "wake"))
		time.Sleep(20 * time.Millisecond)
	}
	if got := u.ofKey("k"); !slices.Equal(got, []string{"now"}) {
		t.Fatalf("key k before anything is due: %v", got)
	}
	if s := u.st.Scheduled(); len(s) != 2 || s[0].Due.Sub(t0) < 30*time.Minute || !s[1].Due.Equal(t0.Add(time.Hour).Truncate(time.Microsecond)) {
		t.Fatalf("scheduled: %+v; want the two, in due order", s)
	}
	u.advance(30 * time.Minute)
	u.eventually(func() bool { return len(u.ofKey("k")) == 2 }, "the message due in half an hour is not published: %v", u.ofKey("k"))
	u.advance(30 * time.Minute)
	u.eventually(func() bool { return len(u.ofKey("k")) == 3 }, "the message due in an hour is not published: %v", u.ofKey("k"))
	if got := u.ofKey("k"); !slices.Equal(got, []string{"now", "in half an hour", "in an hour"}) {
		t.Fatalf("key k: %v", got)
	}
	for _, m := range u.pub.Messages() {
		if m.Key == "k" && string(m.Payload) == "in an hour" && !m.OccurredAt.Equal(t0.Add(time.Hour).Truncate(time.Microsecond)) {
			t.Fatalf("a scheduled message occurs at %s, want its due time %s", m.OccurredAt, t0.Add(time.Hour))
		}
	}
	if n := r.Metrics().Published; n != 8 {
		t.Fatalf("published %d messages, want 8", n)
	}
}

// A message cancelled before it falls due is never published; cancelling
// one published already says so.
func TestUnitScheduledCancel(t *testing.T) {
	u := newUnit(t)
	u.start(u.config())
	ctx := context.Background()
	dropped, kept := msg("k", "dropped"), msg("k", "kept")
	u.schedule(outbox.After(time.Minute), dropped, kept)
	if err := u.st.InTx(ctx, func(tx *memstore.Tx) error { return u.w.Cancel(ctx, tx, dropped.ID) }); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	u.advance(time.Minute)
	u.eventually(func() bool { return u.published(kept) }, "the kept message is not published")
	if got := u.ofKey("k"); !slices.Equal(got, []string{"kept"}) {
		t.Fatalf("key k: %v", got)
	}
	err := u.st.InTx(ctx, func(tx *memstore.Tx) error { return u.w.Cancel(ctx, tx, kept.ID) })
	if !errors.Is(err, store.ErrAlreadyDue) {
		t.Fatalf("cancel a published message: %v; want store.ErrAlreadyDue", err)
	}
}

// Schedule refuses a zero due time and an invalid message, writing
// nothing.
func TestUnitScheduleRefusesBadInput(t *testing.T) {
	u := newUnit(t)
	ctx := context.Background()
	err := u.st.InTx(ctx, func(tx *memstore.Tx) error { return u.w.Schedule(ctx, tx, store.Due{}, msg("k", "x")) })
	if !errors.Is(err, courier.ErrInvalidMessage) {
		t.Fatalf("a zero due time: %v; want courier.ErrInvalidMessage", err)
	}
	bad := msg("", "no key")
	bad.Topic = ""
	err = u.st.InTx(ctx, func(tx *memstore.Tx) error { return u.w.Schedule(ctx, tx, outbox.After(time.Second), bad) })
	if !errors.Is(err, courier.ErrInvalidMessage) {
		t.Fatalf("a message without a topic: %v; want courier.ErrInvalidMessage", err)
	}
	if s := u.st.Scheduled(); len(s) != 0 {
		t.Fatalf("scheduled after refusals: %+v", s)
	}
}
