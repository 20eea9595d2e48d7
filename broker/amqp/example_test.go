package amqp_test

import (
	"context"
	"fmt"
	"log"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/memstore"
)

// Publish an outbox through RabbitMQ and consume what arrives. It needs a
// broker at the URL, so it is compiled but not run by go test.
func Example() {
	ctx := context.Background()
	cfg, err := amqp.ParseURL("amqp://guest:guest@127.0.0.1:5672/?exchange=courier")
	if err != nil {
		log.Fatal(err)
	}
	// The exchange, and billing's quorum queue bound to the orders topic.
	if err := amqp.EnsureTopology(ctx, cfg, amqp.Topology{Queue: "billing", Topics: []string{"orders"}}); err != nil {
		log.Fatal(err)
	}
	pub, err := amqp.NewPublisher(amqp.PublisherConfig{Config: cfg})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	st := memstore.New(memstore.Config{}) // an outbox; a SQL store in production
	r, err := relay.New(st, pub, relay.Config{Notifier: st.NewNotifier()})
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = r.Run(ctx) }()
	msg := courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"id":42}`))
	_ = st.InTx(ctx, func(tx *memstore.Tx) error { return st.Insert(ctx, tx, []courier.Message{msg}) })

	sub, err := amqp.NewSubscriber(ctx, amqp.SubscriberConfig{Config: cfg, Queue: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	d, err := sub.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	got, err := sub.Decode(d.Raw())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(got.Type, got.Key, d.Attempt())
	_ = d.Ack(ctx) // after the inbox transaction committed
}

// Topics map to routing keys on the exchange.
func ExampleParseURL() {
	cfg, err := amqp.ParseURL("amqp://guest:guest@rabbit:5672/shop?exchange=events&prefix=shop.")
	if err != nil {
		panic(err)
	}
	fmt.Println(cfg.URL)
	fmt.Println(cfg.Exchange, cfg.RoutingKey("orders"))
	// Output:
	// amqp://guest:guest@rabbit:5672/shop
	// events shop.orders
}
