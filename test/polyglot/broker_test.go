package polyglot

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/sqlite"
)

// broker is an embedded NATS server with a stream of the test's own.
type broker struct {
	t       *testing.T
	url     string
	stream  string
	mapping couriernats.Config
}

func newBroker(t *testing.T) *broker {
	t.Helper()
	srv := testenv.EmbeddedNATS(t)
	b := &broker{t: t, url: srv.ClientURL(), stream: testenv.Name("S")}
	b.mapping = couriernats.Config{SubjectPrefix: b.stream + "."}
	nc := testenv.Connect(t, b.url)
	testenv.Must(t, couriernats.EnsureStream(context.Background(), nc, b.mapping, couriernats.StreamConfig{Name: b.stream}), "ensure stream")
	return b
}

// run runs fn until the test ends, then cancels its context and waits
// for it to return.
func (b *broker) run(what string, fn func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	b.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				b.t.Errorf("%s: %v", what, err)
			}
		case <-time.After(30 * time.Second):
			b.t.Errorf("%s did not stop within 30s", what)
		}
	})
}

// startRelay runs a relay on st, publishing to the stream, until the test
// ends. With a notifier it polls once a minute, so that what it publishes
// sooner it was woken for (a scheduled message, by its due time); without
// one, every 100ms.
func (b *broker) startRelay(st store.RelayStore, n store.Notifier) {
	t := b.t
	nc, err := couriernats.Connect(b.url)
	testenv.Must(t, err, "connect publisher")
	t.Cleanup(nc.Close)
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: b.mapping, AckTimeout: 2 * time.Second})
	testenv.Must(t, err, "publisher")
	cfg := relay.Config{
		Notifier:       n,
		BatchSize:      100,
		LeaseDuration:  5 * time.Second,
		PublishTimeout: 2 * time.Second,
		PollInterval:   100 * time.Millisecond,
		Backoff:        relay.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
	}
	if n != nil {
		cfg.PollInterval = time.Minute
	}
	r, err := relay.New(st, pub, cfg)
	testenv.Must(t, err, "new relay")
	b.run("relay", r.Run)
}

// applied reads what the consumer applied.
type applied struct {
	t  *testing.T
	db *sql.DB
}

// appliedMessage is a message the consumer applied.
type appliedMessage struct{ id, key string }

// list returns the messages the consumer applied, in the order their
// transactions committed (SQLite writes one transaction at a time, so
// rowid order is commit order).
func (a applied) list() []appliedMessage {
	rows, err := a.db.Query("SELECT message_id, ordering_key FROM applied ORDER BY rowid")
	testenv.Must(a.t, err, "read applied")
	defer rows.Close()
	var out []appliedMessage
	for rows.Next() {
		var m appliedMessage
		testenv.Must(a.t, rows.Scan(&m.id, &m.key), "scan applied")
		out = append(out, m)
	}
	testenv.Must(a.t, rows.Err(), "read applied")
	return out
}

// startConsumer runs a Go inbox consumer of every topic of the stream, on
// a SQLite database of its own, until the test ends. It applies each key's
// messages one at a time, in order.
func (b *broker) startConsumer(t *testing.T) applied {
	ctx := context.Background()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "consumer.db"))
	testenv.Must(t, err, "open consumer database")
	t.Cleanup(func() { db.Close() })
	d := sqlite.NewDriver(db)
	_, err = d.Migrate(ctx)
	testenv.Must(t, err, "migrate consumer database")
	_, err = db.ExecContext(ctx, "CREATE TABLE applied (message_id TEXT PRIMARY KEY, ordering_key TEXT NOT NULL)")
	testenv.Must(t, err, "create applied")
	ib, err := inbox.New(d.Inbox(), "polyglot")
	testenv.Must(t, err, "inbox")
	nc, err := couriernats.Connect(b.url)
	testenv.Must(t, err, "connect subscriber")
	t.Cleanup(nc.Close)
	sub, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{Config: b.mapping, Stream: b.stream, Consumer: "polyglot"})
	testenv.Must(t, err, "subscriber")
	handle := func(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO applied (message_id, ordering_key) VALUES (?, ?)", msg.ID.String(), msg.Key)
		return err
	}
	c, err := inbox.NewConsumer(ib, sub, d.ConsumerStore(), handle, inbox.ConsumerConfig{KeepOrder: true})
	testenv.Must(t, err, "consumer")
	b.run("consumer", func(ctx context.Context) error {
		defer sub.Close()
		return c.Run(ctx)
	})
	return applied{t, db}
}

// received reads the whole stream in order.
func (b *broker) received() []courier.Message {
	b.t.Helper()
	nc := testenv.Connect(b.t, b.url)
	return testenv.StreamMessages(b.t, nc, b.stream, b.mapping)
}
