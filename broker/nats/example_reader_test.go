package nats_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/broker/nats/embedded"
)

// Read back what a stream holds, without consuming it, to compare it with
// what the outbox says was published (as courier audit does).
func ExampleReader() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "courier-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Config{Dir: dir})
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
	from := time.Now()
	for _, err := range pub.Publish(ctx, []courier.Message{
		courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{}`)),
		courier.NewMessage("orders", "order-42", "OrderPaid", []byte(`{}`)),
	}) {
		if err != nil {
			panic(err)
		}
	}

	r, err := couriernats.NewReader(nc, couriernats.ReaderConfig{Stream: couriernats.DefaultStream})
	if err != nil {
		panic(err)
	}
	since, err := r.ReadBack(ctx, from.Add(-time.Second), time.Now().Add(time.Second), func(s broker.Stored) error {
		fmt.Println(s.Log, s.Offset, s.Message.Topic, s.Message.Key, s.Message.Type, s.Err)
		return nil
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("everything kept since the window's start:", since.IsZero())
	// Output:
	// COURIER 1 orders order-42 OrderPlaced <nil>
	// COURIER 2 orders order-42 OrderPaid <nil>
	// everything kept since the window's start: true
}
