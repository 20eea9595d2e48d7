package watch

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/kafka"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// The topics of the rigs: the load goes to orders; a victim the broker
// loses goes alone to invoices, so that the broker can lose it without
// touching the load (Kafka cannot drop one record of a batch).
const (
	loadTopic   = "orders"
	victimTopic = "invoices"
)

// dupWindow is the NATS stream's duplicate window: short, so that the
// test can publish a message again after it, yet long enough to drop the
// relay's copy of a message the test published first (see reorder).
const dupWindow = 10 * time.Second

// database is a migrated database of one dialect, with what the relay,
// the writer and the watch use of it.
type database struct {
	// relayStore keeps published copies (KeepPublished).
	relayStore store.RelayStore
	// ops is what the watch reads.
	ops audit.Database
	// write commits msgs in one transaction and wakes the relay.
	write    func(ctx context.Context, msgs ...courier.Message) error
	notifier *store.LocalNotifier
}

// dialect opens a fresh database for one test.
type dialect struct {
	name string
	open func(t *testing.T) *database
}

var dialects = []dialect{
	{"postgres", func(t *testing.T) *database {
		return newDatabase(t, postgres.NewDriver(testenv.Postgres(t, testenv.Migrate(postgres.NewDriver)).Pool))
	}},
	{"sqlite", func(t *testing.T) *database {
		db, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
		testenv.Must(t, err, "open sqlite")
		t.Cleanup(func() { db.Close() })
		d := sqlite.NewDriver(db)
		_, err = d.Migrate(context.Background())
		testenv.Must(t, err, "migrate")
		return newDatabase[*sql.Tx](t, d)
	}},
}

func newDatabase[TTx any](t *testing.T, d store.Driver[TTx]) *database {
	st, err := d.RelayStore(context.Background(), store.RelayConfig{KeepPublished: true})
	testenv.Must(t, err, "relay store")
	n := store.NewLocalNotifier()
	w := outbox.New(d.Inserter(), outbox.Config{Notify: n.Signal})
	return &database{relayStore: st, ops: d.Operations(), notifier: n,
		write: func(ctx context.Context, msgs ...courier.Message) error {
			return d.InTx(ctx, func(tx TTx) error { return w.Write(ctx, tx, msgs...) })
		}}
}

// brokerRig is a broker with a stream or topics of the test's own.
type brokerRig struct {
	name string
	// publisher is a new publisher for the relay; rogue is the test's own,
	// on a connection of its own, publishing with Courier's headers.
	publisher func(t *testing.T) broker.Publisher
	rogue     broker.Publisher
	reader    broker.Reader
	// lose writes victim (to victimTopic) with write and makes the broker
	// lose it after acknowledging it; it returns once the relay has
	// recorded the acknowledgement.
	lose func(t *testing.T, db *database, victim courier.Message)
	// keepsCopies is false for NATS: JetStream drops a copy published
	// again within dupWindow (Nats-Msg-Id). Kafka stores every copy.
	keepsCopies bool
}

// kind is a broker the tests run on.
type kind struct {
	name string
	open func(t *testing.T) *brokerRig
}

var brokers = []kind{{"nats", openNATS}, {"kafka", openKafka}}

// natsURL is a nats-server of the test's own when one is installed
// (COURIER_TEST_NATS_SERVER, a current release), else the machine's or an
// embedded one.
func natsURL(t *testing.T) string {
	if os.Getenv(testenv.EnvNATSServer) != "" {
		return testenv.StartNATSServer(t, testenv.NATSServerConfig{}).URL
	}
	return testenv.NATSOrEmbedded(t)
}

// openNATS makes a stream of the test's own, with a short duplicate
// window.
func openNATS(t *testing.T) *brokerRig {
	url := natsURL(t)
	stream := testenv.Name("WATCH")
	mapping := couriernats.Config{SubjectPrefix: stream + "."}
	nc := testenv.Connect(t, url)
	ctx := context.Background()
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: stream, Duplicates: dupWindow}), "ensure stream")
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	s, err := js.Stream(ctx, stream)
	testenv.Must(t, err, "stream")
	publisher := func(t *testing.T) broker.Publisher {
		pc := testenv.Connect(t, url)
		p, err := couriernats.NewPublisher(pc, couriernats.PublisherConfig{Config: mapping, AckTimeout: 2 * time.Second})
		testenv.Must(t, err, "publisher")
		return p
	}
	r, err := couriernats.NewReader(nc, couriernats.ReaderConfig{Config: mapping, Stream: stream})
	testenv.Must(t, err, "reader")
	return &brokerRig{name: "nats", publisher: publisher, rogue: publisher(t), reader: r,
		lose: func(t *testing.T, db *database, victim courier.Message) {
			// The relay publishes the victim; the test deletes it from
			// the stream by its sequence before the watch reads it: an
			// acknowledged message the stream no longer holds.
			testenv.Must(t, db.write(ctx, victim), "write the victim")
			var seq uint64
			testenv.Eventually(t, 30*time.Second, func() bool {
				m, err := s.GetLastMsgForSubject(ctx, mapping.Subject(victimTopic))
				if err != nil || m.Header.Get(natsgo.MsgIdHdr) != victim.ID.String() {
					return false
				}
				seq = m.Sequence
				return true
			}, "the relay did not publish the victim %s", victim.ID)
			testenv.Must(t, s.DeleteMsg(ctx, seq), "delete the victim from the stream")
			waitPublished(t, db, victim)
		}}
}

// openKafka starts a Kafka cluster in the test process (kfake): no real
// Kafka server can be installed on the machines the tests run on.
func openKafka(t *testing.T) *brokerRig {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(3))
	testenv.Must(t, err, "kfake")
	t.Cleanup(c.Close)
	cfg := kafka.Config{Brokers: c.ListenAddrs(), TopicPrefix: testenv.Name("w") + "."}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	testenv.Must(t, err, "admin client")
	defer adm.Close()
	testenv.Must(t, kafka.EnsureTopic(ctx, adm, cfg, loadTopic, kafka.TopicConfig{Partitions: 3}), "create "+loadTopic)
	testenv.Must(t, kafka.EnsureTopic(ctx, adm, cfg, victimTopic, kafka.TopicConfig{Partitions: 1}), "create "+victimTopic)
	publisher := func(t *testing.T) broker.Publisher {
		p, err := kafka.NewPublisher(kafka.PublisherConfig{Config: cfg})
		testenv.Must(t, err, "publisher")
		t.Cleanup(p.Close)
		return p
	}
	r, err := kafka.NewReader(ctx, kafka.ReaderConfig{Config: cfg, Topics: []string{loadTopic, victimTopic}})
	testenv.Must(t, err, "reader")
	t.Cleanup(r.Close)
	return &brokerRig{name: "kafka", publisher: publisher, rogue: publisher(t), reader: r, keepsCopies: true,
		lose: func(t *testing.T, db *database, victim courier.Message) {
			// Single records cannot be deleted from a Kafka topic (only a
			// partition's head, which looks like retention): kfake
			// answers the produce of the victim's topic with success
			// (error code 0) and stores nothing, a broker that
			// acknowledged the victim and lost it. The victim is the
			// only message of its partition, whose producer sequence
			// nothing follows.
			h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: cfg.Topic(victimTopic),
				Err: &kerr.Error{Message: "NONE", Code: 0}})
			defer h.Remove()
			testenv.Must(t, db.write(context.Background(), victim), "write the victim")
			waitPublished(t, db, victim)
			if h.Hits() != 1 {
				t.Fatalf("the victim was published without the fault (%d hits)", h.Hits())
			}
		}}
}

// waitPublished waits until the database holds a published copy of each
// of msgs: the relay has recorded the broker's acknowledgement.
func waitPublished(t *testing.T, db *database, msgs ...courier.Message) {
	t.Helper()
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID.String()
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		places, err := db.ops.Locate(context.Background(), ids)
		testenv.Must(t, err, "locate")
		for _, id := range ids {
			if places[id] != store.PlacePublished {
				return false
			}
		}
		return true
	}, "the relay did not record %v as published", ids)
}

// publishedAt returns when the database recorded m as published.
func publishedAt(t *testing.T, db *database, m courier.Message, since time.Time) time.Time {
	t.Helper()
	var at time.Time
	errFound := errors.New("found")
	err := db.ops.PublishedBetween(context.Background(), since, time.Now().Add(time.Minute), func(c store.PublishedCopy) error {
		if c.MessageID == m.ID.String() {
			at = c.PublishedAt
			return errFound
		}
		return nil
	})
	if !errors.Is(err, errFound) {
		t.Fatalf("no published copy of %s: %v", m.ID, err)
	}
	return at
}

// startRelay runs a relay from db to b until the test ends.
func startRelay(t *testing.T, db *database, b *brokerRig) {
	r, err := relay.New(db.relayStore, b.publisher(t), relay.Config{
		Notifier: db.notifier, BatchSize: 100, LeaseDuration: 5 * time.Second, PublishTimeout: 2 * time.Second,
		PollInterval: 200 * time.Millisecond, Backoff: relay.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
	})
	testenv.Must(t, err, "new relay")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("relay.Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("the relay did not stop within 30s")
		}
	})
}

// load is a writer committing messages over many keys until the test
// ends: every period a transaction of per messages, keys taken in turn.
type load struct {
	written atomic.Int64
	first   courier.Message
	started chan struct{}
}

func startLoad(t *testing.T, db *database, keys, per int, period time.Duration) *load {
	l := &load{started: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(period)
		defer tick.Stop()
		for n := 0; ; {
			msgs := make([]courier.Message, per)
			for i := range msgs {
				msgs[i] = courier.NewMessage(loadTopic, fmt.Sprintf("key-%d", n%keys), "OrderPlaced", fmt.Appendf(nil, `{"n":%d}`, n))
				n++
			}
			if err := db.write(ctx, msgs...); err != nil {
				if ctx.Err() == nil {
					t.Errorf("write the load: %v", err)
				}
				return
			}
			if l.written.Add(int64(per)) == int64(per) {
				l.first = msgs[0]
				close(l.started)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	<-l.started
	return l
}
