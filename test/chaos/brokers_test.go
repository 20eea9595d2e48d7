package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/broker/kafka"
	"github.com/courier-go/courier/internal/testenv"
)

// transportSettings are the settings of the transport runs that kill
// relays or stop the broker: a few thousand messages over a hundred keys,
// the whole run under a minute.
func transportSettings() settings {
	if testenv.Long() {
		return settings{messages: 30000, keys: 1000, partitions: 2, relays: 3, chaosFor: 2 * time.Minute}
	}
	return settings{messages: 3000, keys: 100, partitions: 2, relays: 3, chaosFor: 20 * time.Second}
}

// topics are the topics produce writes to with s.
func topics(s settings) []string {
	out := make([]string, s.partitions)
	for i := range out {
		out[i] = fmt.Sprintf("part%d", i)
	}
	return out
}

// rabbitMQ declares an exchange of its own and a quorum queue with a single
// active consumer bound to every topic under the prefix, both deleted when
// t ends, and returns the target that publishes there and consumes the
// queue.
func rabbitMQ(t *testing.T, base string) target {
	exchange, queue := testenv.Name("courier_chaos_"), testenv.Name("chaos_")
	raw := base + "?exchange=" + exchange + "&prefix=chaos."
	cfg, err := amqp.ParseURL(raw)
	testenv.Must(t, err, "parse the AMQP URL")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The queue first: a message no queue receives is refused (mandatory).
	testenv.Must(t, amqp.EnsureTopology(ctx, cfg, amqp.Topology{Queue: queue, SingleActiveConsumer: true}), "topology")
	t.Cleanup(func() {
		conn, err := amqp091.Dial(cfg.URL)
		if err != nil {
			t.Logf("delete queue %s and exchange %s: %v", queue, exchange, err)
			return
		}
		defer conn.Close()
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(queue, false, false, false)
			_ = ch.ExchangeDelete(exchange, false, false)
		}
	})
	return target{name: "rabbitmq", url: raw, lease: 3 * time.Second, concurrency: 8,
		subscribe: func(ctx context.Context) (broker.Subscriber, error) {
			return amqp.NewSubscriber(ctx, amqp.SubscriberConfig{Config: cfg, Queue: queue, Prefetch: 200})
		}}
}

// Courier relay processes publishing to RabbitMQ are SIGKILLed one after
// another, at random, while the producer writes: every message reaches the
// queue and is applied once, each key's in the order written, and no
// message becomes a dead letter.
func TestRelayKillsRabbitMQ(t *testing.T) {
	t.Parallel()
	s := transportSettings()
	rr := startRelays(t, rabbitMQ(t, testenv.AMQP(t)), s)
	ctx, cancel := context.WithTimeout(context.Background(), s.chaosFor)
	defer cancel()
	rr.killRelays(ctx, 1)
	rr.finish()
}

// kafkaCluster starts a Kafka cluster in the test process (kfake,
// franz-go's, reached over its TCP listeners) with s's topics, three
// partitions each, and returns the target that publishes there and
// consumes them as one consumer group.
func kafkaCluster(t *testing.T, s settings) target {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(3))
	testenv.Must(t, err, "kfake")
	t.Cleanup(c.Close)
	raw := "kafka://" + strings.Join(c.ListenAddrs(), ",") + "?topic_prefix=chaos."
	cfg, err := kafka.ParseURL(raw)
	testenv.Must(t, err, "parse the Kafka URL")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	testenv.Must(t, err, "admin client")
	defer adm.Close()
	for _, topic := range topics(s) {
		testenv.Must(t, kafka.EnsureTopic(ctx, adm, cfg, topic, kafka.TopicConfig{Partitions: 3}), "create topic "+topic)
	}
	return target{name: "kafka", url: raw, lease: 3 * time.Second, concurrency: 8,
		subscribe: func(ctx context.Context) (broker.Subscriber, error) {
			return kafka.NewSubscriber(ctx, kafka.SubscriberConfig{Config: cfg, Group: "chaos", Topics: topics(s), Prefetch: 500})
		}}
}

// Courier relay processes publishing to Kafka are SIGKILLed one after
// another, at random, while the producer writes: every message reaches its
// topic and is applied once, each key's in the order written, and no
// message becomes a dead letter. It holds whether the relay publishes a
// key's messages one at a time or pipelined.
func TestRelayKillsKafka(t *testing.T) {
	t.Parallel()
	s := transportSettings()
	rr := startRelays(t, kafkaCluster(t, s), s)
	ctx, cancel := context.WithTimeout(context.Background(), s.chaosFor)
	defer cancel()
	rr.killRelays(ctx, 1)
	rr.finish()
}

// RabbitMQ's application stops (rabbitmqctl stop_app) for a few seconds and
// starts again, twice, while courier relay processes drain a backlog
// written just before, and with more written while it is down: every
// message reaches the queue and is applied once, each key's in the order
// written, and the outages make no dead letter (the relays run with
// --max-attempts 3: an outage is a backlog, never a counted failure).
func TestRabbitMQRestartMidDrain(t *testing.T) {
	t.Parallel()
	s := transportSettings()
	s.relays = 2
	// A node of the test's own: other packages' tests use the machine's.
	srv := testenv.StartRabbitMQ(t)
	tgt := rabbitMQ(t, srv.URL)
	rr := startRelays(t, tgt, s)
	ctx := context.Background()
	deadline := time.Now().Add(s.chaosFor)
	const restarts = 2
	for i := range restarts {
		// Spread the restarts over the run, each after a backlog of
		// messages of keys of its own.
		time.Sleep(time.Until(rr.began.Add(s.chaosFor * time.Duration(1+3*i) / 7)))
		rr.writeBacklog(fmt.Sprintf("backlog%d", i), 1000, 40)
		pending := rr.pendingWork(ctx)
		began := time.Now()
		srv.Ctl("stop_app")
		stopped := time.Since(began)
		// However long stop_app took (the backlog may be gone by then on
		// a slow machine), the relays meet work while RabbitMQ is down.
		rr.writeBacklog(fmt.Sprintf("held%d", i), 200, 20)
		time.Sleep(2 * time.Second)
		held := rr.pendingWork(ctx)
		srv.Ctl("start_app")
		t.Logf("restart %d: %d messages in the outbox when stop_app began, %d when start_app began; stop_app took %s, start_app done %s after it began",
			i+1, pending, held, stopped.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
		if held == 0 {
			t.Errorf("restart %d met no work: the outbox was empty while RabbitMQ was down", i+1)
		}
		rr.count("RabbitMQ stop_app, start_app 2s later", 1)
	}
	time.Sleep(time.Until(deadline))
	rr.finish()
}
