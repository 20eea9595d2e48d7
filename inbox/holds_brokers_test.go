package inbox_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/amqp"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
)

// sharedKeys is a broker whose subscribers share the keys of topic
// "ledger" among the instances of a consumer (broker.KeySharer).
type sharedKeys struct {
	name string
	// setup declares what the test needs on the broker, deleted when it
	// ends, and returns how to publish there and to subscribe as one more
	// instance of consumer "ledger".
	setup func(t *testing.T) (publish func(...courier.Message), subscribe func() broker.Subscriber)
}

// holdPartitions is how many partitions the subscribers share.
const holdPartitions = 4

func natsSharedKeys() sharedKeys {
	return sharedKeys{name: "nats", setup: func(t *testing.T) (func(...courier.Message), func() broker.Subscriber) {
		// Partitions need nats-server 2.10 or later: a server of the
		// test's own.
		url := testenv.StartNATSServer(t, testenv.NATSServerConfig{}).URL
		nc := testenv.Connect(t, url)
		ctx := context.Background()
		stream := testenv.Name("IBH")
		mapping := couriernats.Config{SubjectPrefix: stream + ".", KeySubjects: true}
		testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: stream}), "stream")
		t.Cleanup(func() {
			js, _ := jetstream.New(nc)
			_ = js.DeleteStream(context.Background(), stream)
		})
		pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
		testenv.Must(t, err, "publisher")
		publish := func(ms ...courier.Message) {
			for i, err := range pub.Publish(context.Background(), ms) {
				testenv.Must(t, err, fmt.Sprintf("publish %d", i))
			}
		}
		subscribe := func() broker.Subscriber {
			sub, err := couriernats.NewSubscriber(ctx, testenv.Connect(t, url), couriernats.SubscriberConfig{
				Config: mapping, Stream: stream, Consumer: "ledger", AckWait: 2 * time.Second, Topics: []string{"ledger"},
				Partitions: holdPartitions, MemberHeartbeat: 100 * time.Millisecond, MemberTimeout: time.Second,
			})
			testenv.Must(t, err, "subscriber")
			t.Cleanup(func() { _ = sub.Close() })
			return sub
		}
		return publish, subscribe
	}}
}

func rabbitMQSharedKeys() sharedKeys {
	return sharedKeys{name: "rabbitmq", setup: func(t *testing.T) (func(...courier.Message), func() broker.Subscriber) {
		cfg, err := amqp.ParseURL(testenv.AMQP(t))
		testenv.Must(t, err, "parse the AMQP URL")
		cfg.Exchange = testenv.Name("courier_t_")
		queue := testenv.Name("ledger_")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		t.Cleanup(func() {
			conn, err := amqp091.Dial(cfg.URL)
			if err != nil {
				t.Logf("delete the test's queues and exchanges: %v", err)
				return
			}
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil {
				return
			}
			for p := range holdPartitions {
				_, _ = ch.QueueDelete(amqp.PartitionQueue(queue, p), false, false, false)
			}
			_ = ch.ExchangeDelete(amqp.PartitionExchange(queue), false, false)
			_ = ch.ExchangeDelete(amqp.MembersExchange(queue), false, false)
			_ = ch.ExchangeDelete(cfg.Exchange, false, false)
		})
		testenv.Must(t, amqp.EnsureTopology(ctx, cfg, amqp.Topology{Queue: queue, Topics: []string{"ledger"}, Partitions: holdPartitions}), "topology")
		pub, err := amqp.NewPublisher(amqp.PublisherConfig{Config: cfg})
		testenv.Must(t, err, "publisher")
		t.Cleanup(func() { _ = pub.Close() })
		publish := func(ms ...courier.Message) {
			for i, err := range pub.Publish(context.Background(), ms) {
				testenv.Must(t, err, fmt.Sprintf("publish %d", i))
			}
		}
		subscribe := func() broker.Subscriber {
			sub, err := amqp.NewSubscriber(context.Background(), amqp.SubscriberConfig{Config: cfg, Queue: queue,
				Partitions: holdPartitions, MemberHeartbeat: 100 * time.Millisecond, MemberTimeout: time.Second})
			testenv.Must(t, err, "subscriber")
			t.Cleanup(func() { _ = sub.Close() })
			return sub
		}
		return publish, subscribe
	}}
}

// TestHeldKeyAcrossInstances runs two instances of a consumer that holds
// keys on subscribers that share the keys among them, NATS JetStream's
// and RabbitMQ's: the poisoned key is held for both, and replaying its
// cause (which both instances see) applies it and the messages held behind
// it, and those that come meanwhile, once each and in order.
func TestHeldKeyAcrossInstances(t *testing.T) {
	for _, b := range []sharedKeys{natsSharedKeys(), rabbitMQSharedKeys()} {
		t.Run(b.name, func(t *testing.T) {
			e := &env[pgx.Tx]{t: t, db: postgresDialect().open(t)}
			publish, subscribe := b.setup(t)
			s := newHoldScene(10)
			h := newPoisoned(e.db, s.m[1])
			var cs []*inbox.Consumer[pgx.Tx]
			for range 2 {
				sub := subscribe()
				if !broker.SharesKeys(sub) {
					t.Fatalf("%T does not share the keys", sub)
				}
				cs = append(cs, e.runOn(sub, "ledger", h.handle, holdConfig()))
			}
			metrics := func() inbox.ConsumerMetrics {
				var sum inbox.ConsumerMetrics
				for _, c := range cs {
					m := c.Metrics()
					sum.Applied += m.Applied
					sum.Parked += m.Parked
					sum.Held += m.Held
					sum.Replayed += m.Replayed
				}
				return sum
			}
			publish(s.all()...)
			cause := parkScene(t, e, metrics, s)
			h.fix(s.m[1])
			testenv.Must(t, e.db.admin.RequestReplay(context.Background(), cause.ID), "replay")
			var later []courier.Message
			for i := range 20 {
				m := courier.NewMessage("ledger", poisonKey, "Credit", fmt.Appendf(nil, "later %d", i))
				later = append(later, m)
				publish(m)
			}
			checkReleased(t, e, h, s, append(slices.Clone(s.m), later...))
		})
	}
}
