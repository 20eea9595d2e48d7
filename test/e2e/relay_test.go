package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
)

// broker is an embedded NATS server with a stream of the test's own.
type broker struct {
	t       *testing.T
	url     string
	nc      *natsgo.Conn
	stream  string
	mapping couriernats.Config
}

func newBroker(t *testing.T) *broker {
	t.Helper()
	srv := testenv.EmbeddedNATS(t)
	b := &broker{t: t, url: srv.ClientURL(), stream: testenv.Name("S")}
	b.nc = testenv.Connect(t, b.url)
	b.mapping = couriernats.Config{SubjectPrefix: b.stream + "."}
	testenv.Must(t, couriernats.EnsureStream(context.Background(), b.nc, b.mapping, couriernats.StreamConfig{Name: b.stream}), "ensure stream")
	return b
}

// startRelay runs a relay on st, with a publisher on its own connection,
// until the test ends.
func (b *broker) startRelay(st store.RelayStore, cfg relay.Config) *relay.Relay {
	b.t.Helper()
	nc, err := couriernats.Connect(b.url)
	testenv.Must(b.t, err, "connect publisher")
	b.t.Cleanup(nc.Close)
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: b.mapping, AckTimeout: 2 * time.Second})
	testenv.Must(b.t, err, "publisher")
	r, err := relay.New(st, pub, cfg)
	testenv.Must(b.t, err, "new relay")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	b.t.Cleanup(func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					b.t.Errorf("relay.Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				b.t.Errorf("relay did not stop within 30s")
			}
		})
	})
	return r
}

// startRelays runs n relays on st, each with a store.LocalNotifier of its
// own, and returns an outbox Notify that wakes them all.
func (b *broker) startRelays(st store.RelayStore, n int) (notify func(), relays []*relay.Relay) {
	var notifiers []*store.LocalNotifier
	for range n {
		ln := store.NewLocalNotifier()
		notifiers = append(notifiers, ln)
		relays = append(relays, b.startRelay(st, relayConfig(ln)))
	}
	return func() {
		for _, ln := range notifiers {
			ln.Signal()
		}
	}, relays
}

// count returns the number of messages in the stream.
func (b *broker) count() int {
	b.t.Helper()
	js, err := jetstream.New(b.nc)
	testenv.Must(b.t, err, "jetstream")
	s, err := js.Stream(context.Background(), b.stream)
	testenv.Must(b.t, err, "stream")
	info, err := s.Info(context.Background())
	testenv.Must(b.t, err, "stream info")
	return int(info.State.Msgs)
}

// received reads the whole stream in order.
func (b *broker) received() []courier.Message {
	b.t.Helper()
	return testenv.StreamMessages(b.t, b.nc, b.stream, b.mapping)
}

// relayConfig is a fast-moving relay configuration for tests.
func relayConfig(n store.Notifier) relay.Config {
	return relay.Config{
		Notifier:       n,
		BatchSize:      100,
		LeaseDuration:  5 * time.Second,
		PublishTimeout: 2 * time.Second,
		PollInterval:   200 * time.Millisecond,
		Backoff:        relay.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
	}
}

// write writes msgs with w in a transaction of d and commits it.
func write[TTx any](t *testing.T, d store.Driver[TTx], w *outbox.Writer[TTx], msgs ...courier.Message) {
	t.Helper()
	ctx := context.Background()
	if err := d.InTx(ctx, func(tx TTx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
		t.Fatalf("write %d messages: %v", len(msgs), err)
	}
}

// relayStore returns d's relay store.
func relayStore[TTx any](t *testing.T, d store.Driver[TTx]) store.RelayStore {
	t.Helper()
	st, err := d.RelayStore(context.Background(), store.RelayConfig{})
	testenv.Must(t, err, "relay store")
	return st
}

// pending returns the number of unpublished messages in st.
func pending(t *testing.T, st store.RelayStore) int64 {
	t.Helper()
	s, err := st.Stats(context.Background())
	testenv.Must(t, err, "stats")
	return s.Pending
}

// A relay that has gone idle, with a poll interval of a minute, publishes a
// message within moments of its commit: the outbox writer calls its Notify
// once per write, and that reaches the relay's store.LocalNotifier, whose
// follow-up wake-ups catch the commit.
func testWakeUp[TTx any](t *testing.T, d store.Driver[TTx]) {
	b := newBroker(t)
	n := store.NewLocalNotifier()
	cfg := relayConfig(n)
	cfg.PollInterval = time.Minute
	b.startRelay(relayStore(t, d), cfg)
	time.Sleep(100 * time.Millisecond) // the relay finds nothing, arms and waits
	var notified atomic.Int32
	w := outbox.New(d.Inserter(), outbox.Config{Notify: func() { notified.Add(1); n.Signal() }})
	committed := time.Now()
	write(t, d, w, courier.NewMessage("events", "wake", "Woken", []byte("wake up")))
	if got := notified.Load(); got != 1 {
		t.Fatalf("outbox.Config.Notify called %d times for one write, want 1", got)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return b.count() == 1 },
		"the message committed after the relay went idle was not published: the wake-up was lost (poll interval 1m)")
	t.Logf("published %s after the commit", time.Since(committed).Round(time.Millisecond))
}

// Three relays move a few thousand messages on a few hundred keys through an
// embedded NATS server: every message arrives, and each key's messages
// arrive in the order they were written.
func testEndToEnd[TTx any](t *testing.T, d store.Driver[TTx]) {
	b := newBroker(t)
	n, keys, per := 3000, 300, 50
	if testing.Short() {
		n = 1000
	}
	// One store for the three relays, as in one process (a dialect may
	// queue its relays' claims in the process); relays in several processes
	// are the business of the dialects' own tests.
	st := relayStore(t, d)
	notify, relays := b.startRelays(st, 3)
	w := outbox.New(d.Inserter(), outbox.Config{Notify: notify})
	start := time.Now()
	var written []courier.Message
	for done := 0; done < n; done += per {
		msgs := make([]courier.Message, min(per, n-done))
		for i := range msgs {
			seq := done + i
			msgs[i] = courier.NewMessage("events", fmt.Sprintf("key-%d", seq%keys), "Numbered",
				fmt.Appendf(nil, `{"seq":%d}`, seq), courier.WithContentType(courier.ContentTypeJSON))
		}
		write(t, d, w, msgs...)
		written = append(written, msgs...)
	}
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { n := pending(t, st); return n == 0, n }, "outbox not drained")
	elapsed := time.Since(start)
	got := b.received()
	dups := checkDelivery(t, written, got)
	var perRelay []int64
	for _, r := range relays {
		perRelay = append(perRelay, r.Metrics().Published)
	}
	t.Logf("%d messages on %d keys through 3 relays in %s; published per relay %v; %d duplicates", n, keys, elapsed.Round(time.Millisecond), perRelay, dups)
}

// checkDelivery verifies that every written message is in the stream and
// that each key's messages first appear in write order (see
// testenv.CheckDelivery).
var checkDelivery = testenv.CheckDelivery
