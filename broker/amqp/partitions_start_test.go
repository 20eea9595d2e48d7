package amqp_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/internal/testenv"
)

// An instance that shares keys survives losing the broker right after it
// checked its queues, while it starts: NewSubscriber returns, and the
// instance consumes once the broker is back, as after any later loss.
func TestPartitionedStartSurvivesALostConnection(t *testing.T) {
	cfg, _ := setup(t, amqp.Topology{})
	queue := partitioned(t, cfg, "start", 2)
	u, err := url.Parse(cfg.URL)
	testenv.Must(t, err, "parse the URL")
	proxy := testenv.StartProxy(t, u.Host)
	via := cfg
	via.URL = proxy.URL(t, cfg.URL)
	amqp.SetBeforeFirstConnect(t, proxy.Down)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := amqp.NewSubscriber(ctx, amqp.SubscriberConfig{Config: via, Queue: queue, Partitions: 2,
		MemberHeartbeat: 200 * time.Millisecond, MemberTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("the broker went away after the check, and NewSubscriber failed: %v", err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	proxy.Up()

	pub, err := amqp.NewPublisher(amqp.PublisherConfig{Config: cfg})
	testenv.Must(t, err, "publisher")
	t.Cleanup(func() { _ = pub.Close() })
	msg := courier.NewMessage("orders", "k", "T", []byte("after the loss"))
	if errs := pub.Publish(ctx, []courier.Message{msg}); errs[0] != nil {
		t.Fatalf("publish: %v", errs[0])
	}
	d, err := sub.Next(ctx)
	testenv.Must(t, err, "the instance receives once the broker is back")
	got, err := sub.Decode(d.Raw())
	testenv.Must(t, err, "decode")
	if got.ID != msg.ID {
		t.Fatalf("received %s, want %s", got.ID, msg.ID)
	}
	testenv.Must(t, d.Ack(ctx), "ack")
}
