package relay_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/broker/nats/embedded"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/sqlite"
)

// Run a relay on the embedded default: the outbox in a SQLite file, NATS
// JetStream in this process. A message written in a transaction reaches the
// broker; stopping the relay (cancelling Run's context) waits for its
// goroutines.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "courier-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	// The broker: an embedded NATS server and the stream that stores courier.>.
	srv, err := embedded.Start(embedded.Config{Dir: filepath.Join(dir, "nats")})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	nc, err := couriernats.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	if err := couriernats.EnsureStream(ctx, nc, couriernats.Config{}, couriernats.StreamConfig{}); err != nil {
		panic(err)
	}
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{})
	if err != nil {
		panic(err)
	}

	// The outbox: a SQLite file with Courier's tables.
	db, err := sqlite.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := sqlite.Migrate(ctx, db); err != nil {
		panic(err)
	}
	st, err := sqlite.NewStore(ctx, db, sqlite.StoreConfig{})
	if err != nil {
		panic(err)
	}

	// Writers signal the notifier, so the relay wakes at once instead of
	// at its next poll.
	n := store.NewLocalNotifier()
	r, err := relay.New(st, pub, relay.Config{Notifier: n})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()

	w := outbox.New(sqlite.DatabaseSQL(), outbox.Config{Notify: n.Signal})
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback()
	msg, err := courier.NewJSON("orders", "order-42", map[string]any{"order_id": "order-42"},
		courier.WithType("OrderPlaced"))
	if err != nil {
		panic(err)
	}
	if err := w.Write(ctx, tx, msg); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	// Receive it from JetStream.
	sub, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{Consumer: "example"})
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	d, err := sub.Next(ctx)
	if err != nil {
		panic(err)
	}
	got, err := sub.Decode(d.Raw())
	if err != nil {
		panic(err)
	}
	if err := d.Ack(ctx); err != nil {
		panic(err)
	}
	fmt.Println(d.Raw().Subject, got.Key, got.Type, string(got.Payload))

	stop()
	if err := <-done; err != nil {
		panic(err)
	}
	fmt.Println("published:", r.Metrics().Published)
	// Output:
	// courier.orders order-42 OrderPlaced {"order_id":"order-42"}
	// published: 1
}
