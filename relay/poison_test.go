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
	"github.com/courier-go/courier/store/postgres"
)

// The stream refuses messages over 1 KiB, so a 2 KiB message is rejected by
// the broker on every attempt: a real poison message.
func TestPoisonMessageBecomesDeadLetterWithoutHoldingOtherKeys(t *testing.T) {
	h := newHarness(t, testenv.NATS(t))
	ctx := context.Background()
	js, err := jetstream.New(h.nc)
	testenv.Must(t, err, "jetstream")
	_, err = js.UpdateStream(ctx, jetstream.StreamConfig{Name: h.stream, Subjects: []string{h.mapping.Subjects()}, MaxMsgSize: 1024, Duplicates: 2 * time.Minute})
	testenv.Must(t, err, "limit stream message size")

	st, err := postgres.NewStore(ctx, h.pg.Pool, postgres.StoreConfig{KeepPublished: true})
	testenv.Must(t, err, "store")
	h.store = st

	const maxAttempts = 3
	cfg := h.relayConfig()
	cfg.MaxAttempts = maxAttempts
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
	write := func(msgs ...courier.Message) {
		tx, err := h.pg.Pool.Begin(ctx)
		testenv.Must(t, err, "begin")
		testenv.Must(t, h.writer.Write(ctx, tx, msgs...), "write")
		testenv.Must(t, tx.Commit(ctx), "commit")
	}
	write(before, poison, after1)
	write(others[:10]...)
	time.Sleep(100 * time.Millisecond) // the poison is now backing off
	write(after2)
	write(others[10:]...)

	// Other keys flow while the poison message is still retrying.
	testenv.Eventually(t, 10*time.Second, func() bool {
		var n int
		_ = h.pg.Pool.QueryRow(ctx, `SELECT count(*) FROM courier_outbox_published WHERE ordering_key LIKE 'other-%'`).Scan(&n)
		return n == len(others)
	}, "other keys were not published")
	if st := h.stats(); st.DeadLetters != 0 {
		t.Fatalf("other keys were only published after the poison message gave up: %+v", st)
	}
	var pending int
	testenv.Must(t, h.pg.Pool.QueryRow(ctx, `SELECT count(*) FROM courier_outbox WHERE ordering_key = 'poisoned'`).Scan(&pending), "count")
	if pending != 3 {
		t.Fatalf("%d messages of the poisoned key pending while it retries, want 3 (the poison and the two after it)", pending)
	}

	// Then it becomes a dead letter with its history, and its key moves on.
	h.waitDrained(20 * time.Second)
	var attempts int
	var lastErr string
	var history []map[string]any
	var deadAt time.Time
	testenv.Must(t, h.pg.Pool.QueryRow(ctx, `SELECT attempts, last_error, history, dead_at FROM courier_outbox_dead_letters WHERE message_id = $1`, poison.ID).
		Scan(&attempts, &lastErr, &history, &deadAt), "read dead letter")
	if attempts != maxAttempts || len(history) != maxAttempts || !strings.Contains(lastErr, "maximum") {
		t.Fatalf("dead letter: attempts %d, history %d entries, last error %q; want %d attempts, each in the history, and the broker's size error",
			attempts, len(history), lastErr, maxAttempts)
	}
	for _, m := range []courier.Message{after1, after2} {
		var publishedAt time.Time
		testenv.Must(t, h.pg.Pool.QueryRow(ctx, `SELECT published_at FROM courier_outbox_published WHERE message_id = $1`, m.ID).Scan(&publishedAt), "published_at")
		if publishedAt.Before(deadAt) {
			t.Fatalf("message %s after the poison was published at %s, before the poison was dead-lettered at %s", m.Payload, publishedAt, deadAt)
		}
	}
	written := append([]courier.Message{before, after1, after2}, others...)
	checkDelivery(t, written, h.received())
	if m := r.Metrics(); m.DeadLettered != 1 || m.Retried != maxAttempts-1 {
		t.Fatalf("metrics %+v: want 1 dead letter after %d retries", m, maxAttempts-1)
	}
}
