package relay_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// harness is one test's outbox (its own schema) and stream (its own subjects).
type harness struct {
	t       testing.TB
	pg      *testenv.PG
	natsURL string
	nc      *natsgo.Conn
	mapping couriernats.Config
	stream  string
	store   *postgres.Store
	writer  *outbox.Writer[pgx.Tx]
}

func newHarness(t testing.TB, natsURL string) *harness {
	t.Helper()
	pg := testenv.Postgres(t, true)
	h := &harness{t: t, pg: pg, natsURL: natsURL}
	h.nc = testenv.Connect(t, natsURL)
	h.stream = testenv.Name("T")
	h.mapping = couriernats.Config{SubjectPrefix: h.stream + "."}
	ctx := context.Background()
	testenv.Must(t, couriernats.EnsureStream(ctx, h.nc, h.mapping, couriernats.StreamConfig{Name: h.stream}), "ensure stream")
	t.Cleanup(func() {
		js, err := jetstream.New(h.nc)
		if err == nil {
			_ = js.DeleteStream(context.Background(), h.stream)
		}
	})
	st, err := postgres.NewStore(ctx, pg.Pool, postgres.StoreConfig{})
	testenv.Must(t, err, "new store")
	h.store = st
	h.writer = outbox.New(postgres.Pgx(), outbox.Config{})
	return h
}

// publisher returns a publisher on its own connection (as a relay has).
func (h *harness) publisher() *couriernats.Publisher {
	h.t.Helper()
	nc, err := couriernats.Connect(h.natsURL)
	testenv.Must(h.t, err, "connect publisher")
	h.t.Cleanup(nc.Close)
	p, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: h.mapping, AckTimeout: 2 * time.Second})
	testenv.Must(h.t, err, "new publisher")
	return p
}

func (h *harness) notifier() *postgres.Notifier {
	n, err := postgres.NewNotifier(h.pg.URL, testLogger(h.t))
	testenv.Must(h.t, err, "notifier")
	return n
}

// relayConfig is a fast-moving configuration for tests.
func (h *harness) relayConfig() relay.Config {
	return relay.Config{
		Notifier:       h.notifier(),
		LeaseDuration:  5 * time.Second,
		PublishTimeout: 2 * time.Second,
		PollInterval:   200 * time.Millisecond,
		Backoff:        relay.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		Logger:         testLogger(h.t),
	}
}

// startRelay runs a relay until the test ends (or stop is called).
func (h *harness) startRelay(pub relayPublisher, cfg relay.Config) (r *relay.Relay, stop func()) {
	h.t.Helper()
	r, err := relay.New(h.store, pub, cfg)
	testenv.Must(h.t, err, "new relay")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					h.t.Errorf("relay.Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				h.t.Errorf("relay did not stop within 30s")
			}
		})
	}
	h.t.Cleanup(stop)
	return r, stop
}

type relayPublisher = interface {
	Publish(ctx context.Context, msgs []courier.Message) []error
}

// produce writes n messages spread over keys in transactions of up to per
// messages, returning them in write order.
func (h *harness) produce(n, keys, per int) []courier.Message {
	h.t.Helper()
	ctx := context.Background()
	var all []courier.Message
	for done := 0; done < n; {
		k := min(per, n-done)
		msgs := make([]courier.Message, k)
		for i := range msgs {
			seq := done + i
			msgs[i] = courier.NewMessage("events", fmt.Sprintf("key-%d", seq%keys), "Numbered",
				[]byte(fmt.Sprintf(`{"seq":%d}`, seq)), courier.WithContentType(courier.ContentTypeJSON))
		}
		tx, err := h.pg.Pool.Begin(ctx)
		testenv.Must(h.t, err, "begin")
		testenv.Must(h.t, h.writer.Write(ctx, tx, msgs...), "write")
		testenv.Must(h.t, tx.Commit(ctx), "commit")
		all = append(all, msgs...)
		done += k
	}
	return all
}

func (h *harness) stats() store.Stats {
	h.t.Helper()
	st, err := h.store.Stats(context.Background())
	testenv.Must(h.t, err, "stats")
	return st
}

// waitDrained waits until no message is pending.
func (h *harness) waitDrained(timeout time.Duration) {
	h.t.Helper()
	testenv.Eventually(h.t, timeout, func() bool { return h.stats().Pending == 0 }, "outbox not drained: %+v", h.stats())
}

// received reads the whole stream in order.
func (h *harness) received() []courier.Message {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js, err := jetstream.New(h.nc)
	testenv.Must(h.t, err, "jetstream")
	s, err := js.Stream(ctx, h.stream)
	testenv.Must(h.t, err, "stream")
	info, err := s.Info(ctx)
	testenv.Must(h.t, err, "stream info")
	total := int(info.State.Msgs)
	if total == 0 {
		return nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	testenv.Must(h.t, err, "ordered consumer")
	out := make([]courier.Message, 0, total)
	for len(out) < total {
		batch, err := c.FetchNoWait(min(1000, total-len(out)))
		testenv.Must(h.t, err, "fetch")
		got := 0
		for m := range batch.Messages() {
			got++
			msg, err := h.mapping.FromNATS(&natsgo.Msg{Subject: m.Subject(), Header: natsgo.Header(m.Headers()), Data: m.Data()})
			testenv.Must(h.t, err, "decode")
			out = append(out, msg)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			h.t.Fatalf("fetch: %v", err)
		}
		if got == 0 {
			if ctx.Err() != nil {
				h.t.Fatalf("read %d of %d stream messages", len(out), total)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return out
}

// checkDelivery verifies that every written message is in the stream, and
// that each key's messages first appear in write order. It returns the number
// of duplicates.
func checkDelivery(t *testing.T, written, got []courier.Message) (dups int) {
	t.Helper()
	firstSeen := make(map[[16]byte]int, len(got))
	for i, m := range got {
		if _, ok := firstSeen[m.ID]; ok {
			dups++
			continue
		}
		firstSeen[m.ID] = i
	}
	lastPos := map[string]int{}
	lost := 0
	for _, m := range written {
		pos, ok := firstSeen[m.ID]
		if !ok {
			lost++
			if lost <= 5 {
				t.Errorf("message %s (key %s) never reached the broker", m.ID, m.Key)
			}
			continue
		}
		if prev, ok := lastPos[m.Key]; ok && pos < prev {
			t.Errorf("key %s out of order: message %s at stream position %d after position %d", m.Key, m.ID, pos, prev)
		}
		lastPos[m.Key] = pos
	}
	if lost > 0 {
		t.Fatalf("%d of %d messages lost", lost, len(written))
	}
	return dups
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("COURIER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// openSQL opens a database/sql handle (pgx's stdlib driver) on the schema.
func openSQL(t *testing.T, url string) *sql.DB {
	db, err := sql.Open("pgx", url)
	testenv.Must(t, err, "sql open")
	t.Cleanup(func() { db.Close() })
	return db
}
