package nats_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/broker/nats/embedded"
)

// Publish a message to JetStream and receive it on a durable consumer. The
// server runs in this process (package embedded); with a NATS server of your
// own, connect to its URL instead.
func Example() {
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

	// The stream "COURIER" stores every subject under "courier.".
	if err := couriernats.EnsureStream(ctx, nc, couriernats.Config{}, couriernats.StreamConfig{}); err != nil {
		panic(err)
	}
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{})
	if err != nil {
		panic(err)
	}
	msg := courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"order_id":"order-42"}`))
	for _, err := range pub.Publish(ctx, []courier.Message{msg}) {
		if err != nil { // nil: JetStream has stored the message
			panic(err)
		}
	}

	sub, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{
		Consumer: "billing", Topics: []string{"orders"},
	})
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
	fmt.Println(d.Raw().Subject, d.Attempt())
	fmt.Println(got.ID == msg.ID, got.Key, got.Type, string(got.Payload))
	// Output:
	// courier.orders 1
	// true order-42 OrderPlaced {"order_id":"order-42"}
}

// Topics map to subjects under a prefix, "courier." unless configured.
func ExampleConfig_Subject() {
	fmt.Println(couriernats.Config{}.Subject("orders"))
	fmt.Println(couriernats.Config{SubjectPrefix: "shop."}.Subject("orders"))
	fmt.Println(couriernats.Config{NoPrefix: true}.Subject("orders"))
	// Output:
	// courier.orders
	// shop.orders
	// orders
}

// Share a consumer's keys between two instances (here in one process; in
// production, one per process): each key's messages go to one instance at a
// time, in order. Publishers and subscribers put the key in the subject
// (KeySubjects); the subscribers spread the keys over Partitions.
func ExampleSubscriberConfig_partitions() {
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

	mapping := couriernats.Config{KeySubjects: true}
	if err := couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{}); err != nil {
		panic(err)
	}
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
	if err != nil {
		panic(err)
	}
	var msgs []courier.Message
	for i := range 3 {
		for _, key := range []string{"order-1", "order-2"} {
			msgs = append(msgs, courier.NewMessage("orders", key, "Step", []byte(fmt.Sprint(i))))
		}
	}
	for _, err := range pub.Publish(ctx, msgs) {
		if err != nil {
			panic(err)
		}
	}

	got := make(chan courier.Message)
	for range 2 { // two instances of consumer "billing"
		sub, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{
			Config: mapping, Consumer: "billing", Topics: []string{"orders"}, Partitions: 4,
		})
		if err != nil {
			panic(err)
		}
		defer sub.Close()
		go func() {
			for {
				d, err := sub.Next(ctx)
				if err != nil {
					return
				}
				m, _ := sub.Decode(d.Raw())
				_ = d.Ack(ctx)
				select {
				case got <- m:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	byKey := map[string][]string{}
	for range msgs {
		m := <-got
		byKey[m.Key] = append(byKey[m.Key], string(m.Payload))
	}
	fmt.Println("order-1:", byKey["order-1"])
	fmt.Println("order-2:", byKey["order-2"])
	// Output:
	// order-1: [0 1 2]
	// order-2: [0 1 2]
}
