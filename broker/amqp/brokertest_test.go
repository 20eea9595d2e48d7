package amqp_test

import (
	"context"
	"testing"
	"time"

	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/broker/brokertest"
	"github.com/courier-go/courier/internal/testenv"
)

// maxMessageSize is the limit the conformance publisher is configured
// with, so that an oversize message is refused before it is sent (see
// PublisherConfig.MaxMessageSize; TestTooLargeIsRejected covers RabbitMQ's
// own refusal).
const maxMessageSize = 1 << 20

func TestConformance(t *testing.T) {
	brokertest.Run(t, brokertest.Harness{
		Features: brokertest.Features{
			Dedup:                amqp.Features.Dedup,
			PerKeyOrder:          amqp.Features.PerKeyOrder,
			OversizeBytes:        maxMessageSize + 1,
			OversizeRejected:     amqp.Features.OversizeRejected,
			AttemptsSurviveClose: amqp.Features.AttemptsSurviveClose,
			// RedeliversAfter 0: amqp.Features.RedeliversWhileOpen is false.
		},
		New: func(tb testing.TB) brokertest.Instance {
			t := tb.(*testing.T)
			cfg, q := setup(t, amqp.Topology{Queue: "conf"})
			pub, err := amqp.NewPublisher(amqp.PublisherConfig{Config: cfg, MaxMessageSize: maxMessageSize})
			testenv.Must(t, err, "publisher")
			t.Cleanup(func() { _ = pub.Close() })
			shared := partitioned(t, cfg, "conf_keys", 6)
			return brokertest.Instance{
				Topic:     "orders",
				Publisher: pub,
				SubscribeShared: func(tb testing.TB) broker.Subscriber {
					s, err := amqp.NewSubscriber(context.Background(), amqp.SubscriberConfig{Config: cfg, Queue: shared, Prefetch: 10,
						Partitions: 6, MemberHeartbeat: 200 * time.Millisecond, MemberTimeout: 2 * time.Second})
					testenv.Must(tb, err, "subscriber sharing keys")
					tb.Cleanup(func() { _ = s.Close() })
					return s
				},
				Subscribe: func(tb testing.TB) broker.Subscriber {
					return newSubscriber(tb.(*testing.T), cfg, q, 10)
				},
				Unreachable: func(tb testing.TB) broker.Publisher {
					down := cfg
					down.URL = "amqp://guest:guest@127.0.0.1:1/"
					p, err := amqp.NewPublisher(amqp.PublisherConfig{Config: down})
					testenv.Must(tb, err, "publisher")
					tb.Cleanup(func() { _ = p.Close() })
					return p
				},
			}
		},
	})
}
