package amqp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/internal/testenv"
)

// With SingleActiveConsumer one subscriber receives everything, in order;
// the other takes over where it stopped when it goes away.
func TestSingleActiveConsumer(t *testing.T) {
	cfg, q := setup(t, amqp.Topology{Queue: "sac", SingleActiveConsumer: true})
	pub := newPublisher(t, cfg)
	msgs := messages("orders", 20, 1)
	mustPublish(t, pub, msgs)
	first := newSubscriber(t, cfg, q, 5)
	second := newSubscriber(t, cfg, q, 5)
	nothingWithin(t, second, time.Second)
	ctx := context.Background()
	i := 0
	for ; i < 10; i++ {
		d := next(t, first, 10*time.Second)
		m, err := first.Decode(d.Raw())
		testenv.Must(t, err, "decode")
		if m.ID != msgs[i].ID {
			t.Fatalf("active consumer: message %d is %s", i, m.Payload)
		}
		testenv.Must(t, d.Ack(ctx), "ack")
	}
	testenv.Must(t, first.Close(), "close the active consumer")
	for ; i < 20; i++ {
		d := next(t, second, 10*time.Second)
		m, err := second.Decode(d.Raw())
		testenv.Must(t, err, "decode")
		if m.ID != msgs[i].ID {
			t.Fatalf("after failover: message %d is %s", i, m.Payload)
		}
		testenv.Must(t, d.Ack(ctx), "ack")
	}
}

// A quorum queue with a delivery limit dead-letters a message it has
// redelivered that often to its dead-letter exchange.
func TestDeliveryLimitDeadLetters(t *testing.T) {
	dlx, dlq := testenv.Name("dlx_"), testenv.Name("dlq_")
	cfg, q := setup(t, amqp.Topology{Queue: "limited", DeliveryLimit: 2, DeadLetterExchange: dlx})
	withChannel(t, cfg, func(ch *amqp091.Channel) error {
		if err := ch.ExchangeDeclare(dlx, amqp091.ExchangeFanout, true, false, false, false, nil); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(dlq, true, false, false, false, amqp091.Table{amqp091.QueueTypeArg: amqp091.QueueTypeQuorum}); err != nil {
			return err
		}
		return ch.QueueBind(dlq, "", dlx, false, nil)
	})
	t.Cleanup(func() {
		withChannel(t, cfg, func(ch *amqp091.Channel) error {
			if _, err := ch.QueueDelete(dlq, false, false, false); err != nil {
				return err
			}
			return ch.ExchangeDelete(dlx, false, false)
		})
	})
	pub := newPublisher(t, cfg)
	mustPublish(t, pub, messages("orders", 1, 1))
	sub := newSubscriber(t, cfg, q, 1)
	var attempts []int
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		d, err := sub.Next(ctx)
		cancel()
		if err != nil {
			break
		}
		attempts = append(attempts, d.Attempt())
		testenv.Must(t, d.Retry(context.Background(), 0), "retry")
		if len(attempts) > 10 {
			t.Fatalf("still redelivered after %v attempts", attempts)
		}
	}
	if fmt.Sprint(attempts) != "[1 2 3]" {
		t.Errorf("attempts %v, want [1 2 3] with a delivery limit of 2", attempts)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return queueDepth(t, cfg, dlq) == 1 }, "the dead-letter queue does not hold the message")
}
