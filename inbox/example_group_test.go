package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/broker/nats/embedded"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/store/sqlite"
)

// Apply the deliveries waiting for a worker in one transaction
// (ConsumerConfig.Group): their inbox markers in one statement, a batch
// handler's bulk insert for the messages of its type, one commit. The
// guarantees are those of a transaction per message: each order is charged
// once, and a message whose handler fails leaves its group and runs alone.
// The broker and the database are the embedded default (NATS in this
// process, a SQLite file).
func ExampleGroupConfig() {
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
	d := sqlite.NewDriver(db)
	if _, err := d.Migrate(ctx); err != nil {
		panic(err)
	}
	if _, err := db.Exec("CREATE TABLE charges (order_id TEXT PRIMARY KEY, amount INTEGER)"); err != nil {
		panic(err)
	}

	// Orders placed while the consumer was away wait on the stream.
	type OrderPlaced struct {
		OrderID string `json:"order_id"`
		Total   int    `json:"total"`
	}
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{})
	if err != nil {
		panic(err)
	}
	var placed []courier.Message
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("order-%d", i)
		msg, err := courier.NewJSON("orders", id, OrderPlaced{OrderID: id, Total: 1000 * i})
		if err != nil {
			panic(err)
		}
		placed = append(placed, msg)
	}
	for _, err := range pub.Publish(ctx, placed) {
		if err != nil {
			panic(err)
		}
	}

	// A batch handler gets the messages of its type that a group holds,
	// decoded, and inserts them in one statement.
	r := inbox.NewRouter[*sql.Tx]()
	inbox.OnBatch(r, func(ctx context.Context, tx *sql.Tx, msgs []courier.Message, orders []OrderPlaced) error {
		rows := strings.TrimSuffix(strings.Repeat("(?, ?), ", len(orders)), ", ")
		args := make([]any, 0, 2*len(orders))
		for _, o := range orders {
			args = append(args, o.OrderID, o.Total)
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO charges (order_id, amount) VALUES "+rows, args...)
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
	c, err := inbox.NewRouterConsumer(ib, sub, d.ConsumerStore(), r, inbox.ConsumerConfig{
		Group: inbox.GroupConfig{MaxMessages: inbox.DefaultGroupMessages},
	})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	for c.Metrics().Applied < int64(len(placed)) && ctx.Err() == nil { // until every order's group committed
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}

	rows, err := db.Query("SELECT order_id, amount FROM charges ORDER BY order_id")
	if err != nil {
		panic(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var amount int
		if err := rows.Scan(&id, &amount); err != nil {
			panic(err)
		}
		fmt.Println(id, amount)
	}
	if err := rows.Err(); err != nil {
		panic(err)
	}
	// Output:
	// order-1 1000
	// order-2 2000
	// order-3 3000
	// order-4 4000
	// order-5 5000
}
