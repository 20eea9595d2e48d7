package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/broker/nats/embedded"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/store/sqlite"
)

// Apply a message once, however often it arrives: the second delivery finds
// the marker the first one committed with its effects, and the handler does
// not run.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "courier-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "billing.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	d := sqlite.NewDriver(db) // hands out every store of the database
	if _, err := d.Migrate(ctx); err != nil {
		panic(err)
	}
	if _, err := db.Exec("CREATE TABLE charges (order_id TEXT PRIMARY KEY)"); err != nil {
		panic(err)
	}

	ib, err := inbox.New(d.Inbox(), "billing")
	if err != nil {
		panic(err)
	}
	charge := func(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO charges (order_id) VALUES (?)", msg.Key)
		return err
	}
	msg := courier.NewMessage("orders", "order-42", "OrderPlaced", nil)
	for range 2 { // the broker delivers it twice
		res, err := ib.Handle(ctx, msg, charge)
		if err != nil {
			panic(err)
		}
		fmt.Println(res)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM charges").Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("charges:", n)
	// Output:
	// applied
	// duplicate
	// charges: 1
}

// Run a consumer on a JetStream subscription: a Router hands each message to
// the handler of its type, decoded, in the transaction that records its inbox
// marker. The broker and the database are the embedded default (NATS in this
// process, a SQLite file).
func ExampleConsumer() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "courier-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
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
	db, err := sqlite.Open(filepath.Join(dir, "billing.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	d := sqlite.NewDriver(db) // hands out every store of the database
	if _, err := d.Migrate(ctx); err != nil {
		panic(err)
	}
	if _, err := db.Exec("CREATE TABLE charges (order_id TEXT PRIMARY KEY, amount INTEGER)"); err != nil {
		panic(err)
	}

	type OrderPlaced struct { // the message type is the Go type's name
		OrderID string `json:"order_id"`
		Total   int    `json:"total"`
	}
	r := inbox.NewRouter[*sql.Tx]()
	inbox.On(r, func(ctx context.Context, tx *sql.Tx, msg courier.Message, ev OrderPlaced) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO charges (order_id, amount) VALUES (?, ?)", ev.OrderID, ev.Total)
		return err
	})
	ib, err := inbox.New(d.Inbox(), "billing")
	if err != nil {
		panic(err)
	}
	sub, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{
		Consumer: "billing", Topics: []string{"orders"},
	})
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	c, err := inbox.NewConsumer(ib, sub, d.ConsumerStore(), r.Handler(), inbox.ConsumerConfig{})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()

	// A relay would publish this from an outbox; here it goes straight to
	// JetStream.
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{})
	if err != nil {
		panic(err)
	}
	msg, err := courier.NewJSON("orders", "order-42", OrderPlaced{OrderID: "order-42", Total: 1999})
	if err != nil {
		panic(err)
	}
	for _, err := range pub.Publish(ctx, []courier.Message{msg}) {
		if err != nil {
			panic(err)
		}
	}

	for c.Metrics().Applied < 1 && ctx.Err() == nil { // until the handler's transaction committed
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}
	var id string
	var amount int
	if err := db.QueryRow("SELECT order_id, amount FROM charges").Scan(&id, &amount); err != nil {
		panic(err)
	}
	fmt.Println(id, amount)
	// Output: order-42 1999
}
