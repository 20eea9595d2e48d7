package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
)

// The stream refuses messages over 1 KiB, so a 2 KiB message is rejected by
// the broker for good: it becomes a dead letter at its first attempt, with
// the broker's reason, however many attempts MaxAttempts allows; its key
// moves on and the other keys flow.
func TestRejectedMessageBecomesDeadLetterAtOnce(t *testing.T) {
	onEachDatabase(t, testRejectedMessageBecomesDeadLetterAtOnce)
}

func testRejectedMessageBecomesDeadLetterAtOnce(t *testing.T, db database) {
	h := newHarness(t, db, anyNATS)
	ctx := context.Background()
	js, err := jetstream.New(h.nc)
	testenv.Must(t, err, "jetstream")
	_, err = js.UpdateStream(ctx, jetstream.StreamConfig{Name: h.stream, Subjects: []string{h.mapping.Subjects()}, MaxMsgSize: 1024, Duplicates: 2 * time.Minute})
	testenv.Must(t, err, "limit stream message size")

	h.store = h.newStore(true)

	cfg := h.relayConfig()
	cfg.MaxAttempts = 5
	cfg.Backoff.Initial, cfg.Backoff.Max = 300*time.Millisecond, 300*time.Millisecond
	r, _ := h.startRelay(h.publisher(), cfg)

	small := func(key string, i int) courier.Message {
		return courier.NewMessage("events", key, "Small", []byte(fmt.Sprintf("%s-%d", key, i)))
	}
	before := small("poisoned", 0)
	poison := courier.NewMessage("events", "poisoned", "Huge", []byte(strings.Repeat("x", 2048)))
	after1, after2 := small("poisoned", 1), small("poisoned", 2)
	var others []courier.Message
	for i := range 20 {
		others = append(others, small(fmt.Sprintf("other-%d", i%5), i))
	}
	h.write(before, poison, after1)
	h.write(others[:10]...)
	h.write(after2)
	h.write(others[10:]...)
	h.waitDrained()

	dl := h.deadLetter(poison.ID)
	if dl.Attempts != 1 || len(dl.History) != 1 || !dl.History[0].Counted {
		t.Fatalf("dead letter: %d attempts, history %+v; want one counted attempt: a permanent rejection is not retried", dl.Attempts, dl.History)
	}
	for _, want := range []string{"maximum", "max_msg_size", "2048 bytes", "rejected by the broker for good"} {
		if !strings.Contains(dl.LastError, want) {
			t.Errorf("last error %q does not say %q: the broker's reason and the fix belong in it", dl.LastError, want)
		}
	}
	for _, m := range []courier.Message{after1, after2} {
		if publishedAt := h.publishedAt(m.ID); publishedAt.Before(dl.DeadAt) {
			t.Fatalf("message %s after the poison was published at %s, before the poison was dead-lettered at %s", m.Payload, publishedAt, dl.DeadAt)
		}
	}
	written := append([]courier.Message{before, after1, after2}, others...)
	checkDelivery(t, written, h.received())
	if m := r.Metrics(); m.DeadLettered != 1 || m.Retried != 0 {
		t.Fatalf("metrics %+v: want 1 dead letter and no retry", m)
	}
}
