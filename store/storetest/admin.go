package storetest

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// Admin shows relay-side dead letters as they died, oldest first; a replay
// puts one back into the outbox under its original id, before the later
// messages of its key, with no attempts counted and its history kept; a
// discard deletes it; both report ErrNotFound for what is not there.
func testAdminDeadLetters[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	ctx := context.Background()
	st, a := db.newStore(t, false), db.Admin()
	occurred := time.Date(2024, 2, 29, 23, 59, 58, 123456789, time.UTC)
	first := courier.NewMessage("orders", "order-1", "OrderPlaced", []byte(`{"total":42}`),
		courier.WithVersion(2), courier.WithContentType(courier.ContentTypeJSON), courier.WithOccurredAt(occurred),
		courier.WithHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	second := courier.NewMessage("orders", "order-1", "OrderShipped", nil)
	other := courier.NewMessage("orders", "order-2", "OrderPlaced", nil)
	written := time.Now()
	db.write(t, first, second, other)

	// first and other die; second is released and waits.
	b := claim(t, st, "r", 10, time.Minute)
	if len(b.Records) != 3 {
		t.Fatalf("claimed %d rows, want 3", len(b.Records))
	}
	firstSeq, secondSeq, otherSeq := b.Records[0].Seq, b.Records[1].Seq, b.Records[2].Seq
	died := time.Now()
	complete(t, st, "r", b, store.Outcome{Dead: []store.Failure{
		{Seq: firstSeq, Error: "message too large", Counted: true},
		{Seq: otherSeq, Error: "invalid subject", Counted: true},
	}})

	list, err := a.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatalf("DeadLetters: %v", err)
	}
	if got := deadIDs(list); !slices.Equal(got, []int64{firstSeq, otherSeq}) {
		t.Fatalf("DeadLetters = %v, want %v (oldest first)", got, []int64{firstSeq, otherSeq})
	}
	if one, err := a.DeadLetters(ctx, 1); err != nil || !slices.Equal(deadIDs(one), []int64{firstSeq}) {
		t.Fatalf("DeadLetters(limit 1) = %v, %v; want %v", deadIDs(one), err, []int64{firstSeq})
	}
	d, err := a.DeadLetter(ctx, firstSeq)
	if err != nil {
		t.Fatalf("DeadLetter(%d): %v", firstSeq, err)
	}
	switch {
	case d.ID != firstSeq || d.MessageID != first.ID.String() || d.Topic != first.Topic || d.Key != first.Key ||
		d.Type != first.Type || d.Version != first.Version || d.ContentType != first.ContentType:
		t.Errorf("dead letter %+v does not describe message %s", d, first.ID)
	case !bytes.Equal(d.Payload, first.Payload) || !maps.Equal(d.Headers, first.Headers):
		t.Errorf("dead letter: payload %q headers %v, want %q %v", d.Payload, d.Headers, first.Payload, first.Headers)
	case !d.OccurredAt.Equal(occurred.Truncate(time.Microsecond)):
		t.Errorf("dead letter occurred at %s, want %s", d.OccurredAt, occurred.Truncate(time.Microsecond))
	case d.Attempts != 1 || d.LastError != "message too large" || len(d.History) != 1 || d.History[0].Error != "message too large" || !d.History[0].Counted:
		t.Errorf("dead letter: %d attempts, last error %q, history %+v; want 1, the failure, one entry marked counted", d.Attempts, d.LastError, d.History)
	}
	near(t, "created_at", d.CreatedAt, written, clockMargin)
	near(t, "dead_at", d.DeadAt, died, clockMargin)
	if len(d.History) == 1 {
		near(t, "history time", d.History[0].At, died, clockMargin)
	}
	if o, err := a.DeadLetter(ctx, otherSeq); err != nil || o.Payload == nil || len(o.Payload) != 0 || len(o.Headers) != 0 {
		t.Errorf("DeadLetter(%d) = %+v, %v; want an empty payload (never nil) and no headers", otherSeq, o, err)
	}
	missing := otherSeq + 1000
	if _, err := a.DeadLetter(ctx, missing); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeadLetter(missing) = %v, want ErrNotFound", err)
	}
	if s, err := a.Stats(ctx); err != nil || s.Pending != 1 || s.DeadLetters != 2 {
		t.Fatalf("Admin.Stats = %+v, %v; want 1 pending, 2 dead letters", s, err)
	}

	// Replay: back under its id, ahead of its key's later message.
	if err := a.ReplayDeadLetter(ctx, firstSeq); err != nil {
		t.Fatalf("ReplayDeadLetter: %v", err)
	}
	if err := a.ReplayDeadLetter(ctx, firstSeq); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReplayDeadLetter twice = %v, want ErrNotFound", err)
	}
	if _, err := a.DeadLetter(ctx, firstSeq); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeadLetter(replayed) = %v, want ErrNotFound", err)
	}
	if s, err := a.Stats(ctx); err != nil || s.Pending != 2 || s.DeadLetters != 1 {
		t.Fatalf("Admin.Stats after the replay = %+v, %v; want 2 pending, 1 dead letter", s, err)
	}
	attempts, lastErr, hist := db.failedRow(t, firstSeq)
	if attempts != 0 || lastErr != "" || len(hist) != 1 {
		t.Fatalf("replayed row: %d attempts, last error %q, %d history entries; want 0, none, the 1 kept", attempts, lastErr, len(hist))
	}
	again := claim(t, st, "r", 10, time.Minute)
	if got := seqs(again.Records); !slices.Equal(got, []int64{firstSeq, secondSeq}) {
		t.Fatalf("claim after the replay = %v, want %v: the replayed message first, under its id", got, []int64{firstSeq, secondSeq})
	}
	sameMessage(t, again.Records[0].Message, first)
	if again.Records[0].Attempts != 0 {
		t.Errorf("replayed message claimed with %d attempts, want 0", again.Records[0].Attempts)
	}
	complete(t, st, "r", again, store.Outcome{Published: seqs(again.Records)})

	// Discard.
	if err := a.DiscardDeadLetter(ctx, otherSeq); err != nil {
		t.Fatalf("DiscardDeadLetter: %v", err)
	}
	if err := a.DiscardDeadLetter(ctx, otherSeq); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DiscardDeadLetter twice = %v, want ErrNotFound", err)
	}
	if err := a.ReplayDeadLetter(ctx, missing); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReplayDeadLetter(missing) = %v, want ErrNotFound", err)
	}
	if list, err := a.DeadLetters(ctx, 10); err != nil || len(list) != 0 {
		t.Fatalf("DeadLetters at the end = %v, %v; want none", deadIDs(list), err)
	}
	if s, err := a.Stats(ctx); err != nil || s.Pending != 0 || s.DeadLetters != 0 {
		t.Fatalf("Admin.Stats at the end = %+v, %v; want nothing left", s, err)
	}
}

func deadIDs(ds []store.DeadLetter) []int64 {
	out := []int64{}
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}
