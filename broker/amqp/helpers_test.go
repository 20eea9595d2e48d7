package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/internal/testenv"
)

// setup returns a Config on the test broker with an exchange of the test's
// own, and declares topo on it, its queue named after topo.Queue (none when
// empty). It returns the queue's name. Both are deleted when the test ends.
func setup(t testing.TB, topo amqp.Topology) (amqp.Config, string) {
	t.Helper()
	return setupOn(t, testenv.AMQP(t), topo)
}

// setupOn is setup on the broker at url, such as a node of the test's own
// ([testenv.StartRabbitMQ]) for a test that stops it or changes its
// settings.
func setupOn(t testing.TB, url string, topo amqp.Topology) (amqp.Config, string) {
	t.Helper()
	cfg, err := amqp.ParseURL(url)
	testenv.Must(t, err, "parse url")
	cfg.Exchange = testenv.Name("courier_t_")
	if topo.Queue != "" {
		topo.Queue = testenv.Name(topo.Queue + "_")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testenv.Must(t, amqp.EnsureTopology(ctx, cfg, topo), "ensure topology")
	t.Cleanup(func() {
		withChannel(t, cfg, func(ch *amqp091.Channel) error {
			if topo.Queue != "" {
				if _, err := ch.QueueDelete(topo.Queue, false, false, false); err != nil {
					return err
				}
			}
			return ch.ExchangeDelete(cfg.Exchange, false, false)
		})
	})
	return cfg, topo.Queue
}

// partitioned declares the partition queues of a queue named after name,
// n of them, on cfg's exchange for every topic, and returns the queue's
// name. Queues and exchanges are deleted when the test ends.
func partitioned(t *testing.T, cfg amqp.Config, name string, n int) string {
	t.Helper()
	queue := testenv.Name(name + "_")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Cleanup(func() {
		withChannel(t, cfg, func(ch *amqp091.Channel) error {
			for p := range n {
				if _, err := ch.QueueDelete(amqp.PartitionQueue(queue, p), false, false, false); err != nil {
					return err
				}
			}
			if err := ch.ExchangeDelete(amqp.MembersExchange(queue), false, false); err != nil {
				return err
			}
			return ch.ExchangeDelete(amqp.PartitionExchange(queue), false, false)
		})
	})
	testenv.Must(t, amqp.EnsureTopology(ctx, cfg, amqp.Topology{Queue: queue, Partitions: n}), "partitions")
	return queue
}

// withChannel runs fn on a channel of a fresh connection.
func withChannel(t testing.TB, cfg amqp.Config, fn func(ch *amqp091.Channel) error) {
	t.Helper()
	conn, err := amqp091.Dial(cfg.URL)
	testenv.Must(t, err, "dial")
	defer conn.Close()
	ch, err := conn.Channel()
	testenv.Must(t, err, "channel")
	testenv.Must(t, fn(ch), "on channel")
}

// queueDepth returns how many messages the queue holds.
func queueDepth(t *testing.T, cfg amqp.Config, queue string) int {
	t.Helper()
	var n int
	withChannel(t, cfg, func(ch *amqp091.Channel) error {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		n = q.Messages
		return err
	})
	return n
}

func newPublisher(t *testing.T, cfg amqp.Config) *amqp.Publisher {
	t.Helper()
	p, err := amqp.NewPublisher(amqp.PublisherConfig{Config: cfg})
	testenv.Must(t, err, "publisher")
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func newSubscriber(t *testing.T, cfg amqp.Config, queue string, prefetch int) *amqp.Subscriber {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := amqp.NewSubscriber(ctx, amqp.SubscriberConfig{Config: cfg, Queue: queue, Prefetch: prefetch})
	testenv.Must(t, err, "subscriber")
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// messages returns n messages on topic over keys k0…k(keys-1), in key
// round robin.
func messages(topic string, n, keys int) []courier.Message {
	out := make([]courier.Message, n)
	for i := range out {
		out[i] = courier.NewMessage(topic, fmt.Sprintf("k%d", i%keys), "Tick", []byte(fmt.Sprintf("payload %d", i)))
	}
	return out
}

// mustPublish publishes msgs and fails the test on any error.
func mustPublish(t *testing.T, p broker.Publisher, msgs []courier.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := errors.Join(p.Publish(ctx, msgs)...); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// next returns the subscriber's next delivery within d.
func next(t *testing.T, s broker.Subscriber, d time.Duration) broker.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	del, err := s.Next(ctx)
	testenv.Must(t, err, "next delivery")
	return del
}

// nothingWithin fails when s delivers something within d.
func nothingWithin(t *testing.T, s broker.Subscriber, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if del, err := s.Next(ctx); err == nil {
		t.Fatalf("unexpected delivery %v", del.Raw().Headers)
	}
}
