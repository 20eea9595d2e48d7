package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
)

// logCapture keeps the records a relay logs at Warn and above, with their
// attributes flattened to text.
type logCapture struct {
	mu   *sync.Mutex
	recs *[]string
}

func newLogCapture() logCapture { return logCapture{mu: new(sync.Mutex), recs: new([]string)} }

func (c logCapture) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (c logCapture) WithAttrs([]slog.Attr) slog.Handler           { return c }
func (c logCapture) WithGroup(string) slog.Handler                { return c }
func (c logCapture) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	c.mu.Lock()
	*c.recs = append(*c.recs, b.String())
	c.mu.Unlock()
	return nil
}

func (c logCapture) records() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(*c.recs)
}

// A message on a subject no stream binds is rejected by JetStream on every
// attempt. It must count like any poison message: a dead letter after
// MaxAttempts whose last error names the subject and the fix, its key moving
// on afterwards, other keys flowing meanwhile, and no broker outage reported.
// NATS answers such a publish with "no responders", unless a plain
// subscriber listens on the subject: then nothing answers at all.
func TestUnboundSubjectBecomesDeadLetterWithoutOutage(t *testing.T) {
	onEachDatabase(t, func(t *testing.T, db database) {
		t.Run("no listener", func(t *testing.T) { testUnboundSubject(t, db, false) })
		t.Run("listener on every subject", func(t *testing.T) { testUnboundSubject(t, db, true) })
	})
}

func testUnboundSubject(t *testing.T, db database, listenEverywhere bool) {
	h := newHarness(t, db, anyNATS)
	ctx := context.Background()
	js, err := jetstream.New(h.nc)
	testenv.Must(t, err, "jetstream")
	// The stream binds topic "events" only; topic "nowhere" has no stream.
	_, err = js.UpdateStream(ctx, jetstream.StreamConfig{Name: h.stream, Subjects: []string{h.mapping.Subject("events")}, Duplicates: 2 * time.Minute})
	testenv.Must(t, err, "narrow the stream's subjects")
	unbound := h.mapping.Subject("nowhere")

	// Arrival times at the broker, by message id.
	var mu sync.Mutex
	arrived := map[string]time.Time{}
	listen := h.mapping.Subject("events")
	if listenEverywhere {
		listen = h.mapping.Subjects()
	}
	sub, err := h.nc.Subscribe(listen, func(m *natsgo.Msg) {
		now := time.Now()
		mu.Lock()
		arrived[m.Header.Get(jetstream.MsgIDHeader)] = now
		mu.Unlock()
	})
	testenv.Must(t, err, "subscribe")
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	testenv.Must(t, h.nc.Flush(), "flush")

	const maxAttempts = 4
	logs := newLogCapture()
	cfg := h.relayConfig()
	cfg.MaxAttempts = maxAttempts
	cfg.Backoff.Initial, cfg.Backoff.Max = 300*time.Millisecond, 300*time.Millisecond
	cfg.Logger = slog.New(logs)
	r, _ := h.startRelay(h.publisher(), cfg)

	committed := map[string]time.Time{}
	write := func(msgs ...courier.Message) {
		h.write(msgs...)
		now := time.Now()
		for _, m := range msgs {
			committed[m.ID.String()] = now
		}
	}
	lost := courier.NewMessage("nowhere", "stuck", "Lost", []byte("no stream binds me"))
	after := courier.NewMessage("events", "stuck", "After", []byte("after the lost one"))
	write(lost, after)

	// Other keys keep being written, one message every 5ms, until the lost
	// message is a dead letter and a little longer.
	var others []courier.Message
	deadline := time.Now().Add(15 * time.Second)
	var deadSeen time.Time
	for i := 0; time.Now().Before(deadline); i++ {
		m := courier.NewMessage("events", fmt.Sprintf("other-%d", i%20), "Other", []byte(fmt.Sprint(i)))
		write(m)
		others = append(others, m)
		time.Sleep(5 * time.Millisecond)
		if i%20 == 0 && deadSeen.IsZero() && h.stats().DeadLetters > 0 {
			deadSeen = time.Now()
		}
		if !deadSeen.IsZero() && time.Since(deadSeen) > 300*time.Millisecond {
			break
		}
	}
	if deadSeen.IsZero() {
		t.Fatalf("no dead letter after 15s: %+v, relay metrics %+v; logs:\n%s", h.stats(), r.Metrics(), strings.Join(logs.records(), "\n"))
	}
	h.waitDrained()

	dl := h.deadLetter(lost.ID)
	attempts, lastErr, history := dl.Attempts, dl.LastError, dl.History
	if attempts != maxAttempts || len(history) != maxAttempts {
		t.Errorf("dead letter: %d attempts, %d history entries; want %d of each", attempts, len(history), maxAttempts)
	}
	if !strings.Contains(lastErr, `"`+unbound+`"`) || !strings.Contains(lastErr, "bind a stream") || !strings.Contains(lastErr, "topic") {
		t.Errorf("last error %q should name subject %s and say to bind a stream to it or check the topic", lastErr, unbound)
	}
	for i, e := range history {
		if !e.Counted {
			t.Errorf("history entry %d %v was not counted: a subject no stream binds is not an outage", i, e)
		}
	}
	for _, rec := range logs.records() {
		if strings.Contains(rec, "broker unavailable") {
			t.Errorf("the relay reported an outage for one bad subject: %s", rec)
		}
	}
	if m := r.Metrics(); m.DeadLettered != 1 || m.Retried != maxAttempts-1 {
		t.Errorf("relay metrics %+v: want 1 dead letter after %d counted retries and no other retry", m, maxAttempts-1)
	}
	checkDelivery(t, append([]courier.Message{after}, others...), h.received())

	// Commit-to-broker latency of the other keys while the lost message
	// was failing: reported, not asserted (wall-clock limits belong in
	// benchmarks).
	mu.Lock()
	var lat []time.Duration
	for _, m := range others {
		if at, ok := arrived[m.ID.String()]; ok {
			lat = append(lat, at.Sub(committed[m.ID.String()]))
		}
	}
	mu.Unlock()
	if len(lat) != len(others) {
		t.Fatalf("saw %d of %d other messages arrive", len(lat), len(others))
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	t.Logf("%d messages of other keys: commit→broker p50 %s, p99 %s, max %s; dead letter after %d attempts: %s",
		len(lat), pct(0.50), pct(0.99), lat[len(lat)-1], attempts, lastErr)
}
