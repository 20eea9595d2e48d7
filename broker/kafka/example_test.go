package kafka_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/kafka"
)

// Publish a message to Kafka and receive it in a consumer group. The
// cluster here is kfake, franz-go's in-process Kafka; with a cluster of your
// own, take its Config from kafka.ParseURL("kafka://host:9092") instead.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	cfg := kafka.Config{Brokers: c.ListenAddrs(), TopicPrefix: "shop."}

	// Topic "orders" is the Kafka topic "shop.orders".
	admin, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		panic(err)
	}
	defer admin.Close()
	if err := kafka.EnsureTopic(ctx, admin, cfg, "orders", kafka.TopicConfig{Partitions: 3}); err != nil {
		panic(err)
	}

	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Config: cfg})
	if err != nil {
		panic(err)
	}
	defer pub.Close()
	msg := courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"order_id":"order-42"}`))
	for _, err := range pub.Publish(ctx, []courier.Message{msg}) {
		if err != nil { // nil: every in-sync replica has the record
			panic(err)
		}
	}

	sub, err := kafka.NewSubscriber(ctx, kafka.SubscriberConfig{
		Config: cfg, Group: "billing", Topics: []string{"orders"},
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
	// After the handler's transaction commits: Ack commits the offset.
	if err := d.Ack(ctx); err != nil {
		panic(err)
	}
	fmt.Println(d.Raw().Subject, d.Attempt())
	fmt.Println(got.ID == msg.ID, got.Topic, got.Key, got.Type, string(got.Payload))
	// Output:
	// shop.orders 1
	// true orders order-42 OrderPlaced {"order_id":"order-42"}
}

// A Kafka URL names the seed brokers and, optionally, the topic prefix.
func ExampleParseURL() {
	cfg, err := kafka.ParseURL("kafka://broker1:9092,broker2?topic_prefix=shop.")
	if err != nil {
		panic(err)
	}
	fmt.Println(cfg.Brokers, cfg.Topic("orders"))
	// Output: [broker1:9092 broker2:9092] shop.orders
}
