package amqp_test

import (
	"context"
	"encoding/json"
	"net/url"
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
			shared := sharedRecipe{URL: cfg.URL, Queue: partitioned(t, cfg, "conf_keys", 6)}
			raw, err := json.Marshal(shared)
			testenv.Must(t, err, "recipe")
			u, err := url.Parse(cfg.URL)
			testenv.Must(t, err, "parse the URL")
			return brokertest.Instance{
				Topic:     "orders",
				Publisher: pub,
				SubscribeShared: func(tb testing.TB) broker.Subscriber {
					s, err := amqp.NewSubscriber(context.Background(), shared.config(cfg.URL, brokertest.Timing{Heartbeat: 200 * time.Millisecond, Timeout: 2 * time.Second}))
					testenv.Must(tb, err, "subscriber sharing keys")
					tb.Cleanup(func() { _ = s.Close() })
					return s
				},
				SharedRecipe: string(raw),
				BrokerAddrs:  []string{u.Host},
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
		Timing: brokertest.Timing{Heartbeat: amqp.DefaultMemberHeartbeat, Timeout: amqp.DefaultMemberTimeout},
		// RabbitMQ's heartbeat counts whole seconds: half this timeout is
		// 1s, and a frozen instance's connection closes after two of
		// them, at four fifths of the timeout, as with the defaults.
		ShortTiming: brokertest.Timing{Heartbeat: 500 * time.Millisecond, Timeout: 2500 * time.Millisecond},
		Long:        testenv.Long(),
	})
}

// sharedRecipe describes the conformance suite's consumer that shares
// keys, for an instance that runs as a process of its own.
type sharedRecipe struct {
	URL   string // the broker
	Queue string // its partition queues' name
}

// config is the consumer's, on the broker at url, with timing.
func (r sharedRecipe) config(url string, timing brokertest.Timing) amqp.SubscriberConfig {
	return amqp.SubscriberConfig{Config: amqp.Config{URL: url}, Queue: r.Queue, Prefetch: 10,
		Partitions: 6, MemberHeartbeat: timing.Heartbeat, MemberTimeout: timing.Timeout}
}

// openShared opens an instance of the consumer p describes, in a process
// of its own.
func openShared(ctx context.Context, p brokertest.Process) (broker.Subscriber, error) {
	var r sharedRecipe
	if err := json.Unmarshal([]byte(p.Recipe), &r); err != nil {
		return nil, err
	}
	u, err := url.Parse(r.URL)
	if err != nil {
		return nil, err
	}
	u.Host = p.Addr(u.Host)
	return amqp.NewSubscriber(ctx, r.config(u.String(), p.Timing))
}
