package shop_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"

	courieramqp "github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/cmd/courier/internal/shop"
	"github.com/courier-go/courier/internal/testenv"
)

// demoOver runs a small demo over tr, on SQLite files, with every fault, a
// crash and version 2 of ChargeRequested deployed producer first, payment
// late (its version 2 requests wait, are parked, then replayed), and fails
// the test unless every invariant holds and the deploy went right.
func demoOver(t *testing.T, tr shop.Transport) {
	t.Helper()
	f := shop.Faults{FailureRate: 0.05, DuplicateRate: 0.1, ReorderRate: 0.1}
	payment, shipping := f, f
	payment.DeclineRate, shipping.ShipmentFailureRate = 0.1, 0.05
	rep, err := shop.RunDemo(context.Background(), shop.DemoConfig{
		Databases: shop.SQLiteDatabases(t.TempDir()), Transport: tr,
		Orders: 60, Faults: map[string]shop.Faults{shop.Orders: f, shop.Payment: payment, shop.Inventory: f, shop.Shipping: shipping},
		Stock:      map[string]int{"mug": 200, "tee": 200, "cap": 200, "poster": 200, "vinyl": 3},
		ReplayRate: 0.1, Crash: shop.Payment, Deploy: shop.DeployProducerFirst, DeployLate: true, InFlight: demoInFlight, Timeouts: shop.Timeouts{Step: stepTimeout}, Logger: testLogger(t),
	})
	testenv.Must(t, err, "demo over "+tr.String())
	checkDeploy(t, rep, 60, shop.DeployProducerFirst, true)
	checkInstances(t, rep)
	if rep.Sharing != tr.Sharing() || rep.Sharing == "" {
		t.Errorf("the report says the instances shared the messages %q; the transport says %q", rep.Sharing, tr.Sharing())
	}
	var out strings.Builder
	_, err = rep.WriteTo(&out)
	testenv.Must(t, err, "report")
	if !rep.OK() || rep.TimedOut {
		t.Fatalf("demo over %s failed:\n%s", tr, out.String())
	}
	for _, want := range []string{"ShippingReady (completed)", "inventory: out of stock: vinyl", "payment ×1", "each service ran as 2 instances, ", "All 8 invariants hold."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// The shop over Kafka: an in-process kfake cluster, records keyed by
// order, one consumer group per service.
func TestDemoOverKafka(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(shop.DefaultPartitions))
	testenv.Must(t, err, "start kfake")
	defer c.Close()
	tr := &shop.KafkaTransport{Brokers: c.ListenAddrs(), TopicPrefix: "shop."}
	demoOver(t, tr)
}

// The shop over webhooks: each service serves a signed webhook endpoint on
// a loopback port and the relays POST to them.
func TestDemoOverWebhook(t *testing.T) {
	t.Parallel()
	tr, err := shop.NewWebhookTransport(shop.WebhookConfig{})
	testenv.Must(t, err, "webhook transport")
	defer func() { testenv.Must(t, tr.Close(), "close the webhook transport") }()
	demoOver(t, tr)
}

// The shop over RabbitMQ: each service's instances share its keys over
// quorum queues fed by a consistent-hash exchange.
func TestDemoOverAMQP(t *testing.T) {
	t.Parallel()
	cfg, err := courieramqp.ParseURL(testenv.Need(t, testenv.EnvAMQP))
	testenv.Must(t, err, "AMQP URL")
	name := testenv.Name("shop") + "."
	cfg.RoutingKeyPrefix = name
	tr := &shop.AMQPTransport{Config: cfg, QueuePrefix: name, Partitions: shop.DefaultKeyPartitions}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tr.Teardown(ctx); err != nil {
			t.Logf("tear down: %v", err)
		}
	})
	demoOver(t, tr)
}

// A RabbitMQ transport deletes only the queues and exchanges its Setup
// created: a partition queue or a members exchange of the shop's names
// that existed before is foreign, and stays.
func TestAMQPTransportLeavesOthersQueues(t *testing.T) {
	cfg, err := courieramqp.ParseURL(testenv.Need(t, testenv.EnvAMQP))
	testenv.Must(t, err, "AMQP URL")
	name := testenv.Name("shop") + "."
	cfg.RoutingKeyPrefix = name
	conn, err := amqp091.Dial(cfg.URL)
	testenv.Must(t, err, "dial")
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	testenv.Must(t, err, "channel")
	theirs, theirExchange := courieramqp.PartitionQueue(name+shop.Payment, 3), courieramqp.MembersExchange(name+shop.Orders)
	// Declared as the shop declares its own, so that the shop's Setup
	// takes them as they are.
	_, err = ch.QueueDeclare(theirs, true, false, false, false,
		amqp091.Table{"x-queue-type": "quorum", "x-single-active-consumer": true, "x-delivery-limit": 1000})
	testenv.Must(t, err, "declare their queue")
	testenv.Must(t, ch.ExchangeDeclare(theirExchange, amqp091.ExchangeFanout, true, false, false, false, nil), "declare their exchange")
	testenv.Must(t, ch.Publish("", theirs, false, false, amqp091.Publishing{Body: []byte("theirs")}), "publish")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tr := &shop.AMQPTransport{Config: cfg, QueuePrefix: name, Partitions: shop.DefaultKeyPartitions}
	t.Cleanup(func() {
		_ = tr.Teardown(context.Background())
		if c, err := conn.Channel(); err == nil {
			_, _ = c.QueueDelete(theirs, false, false, false)
			_ = c.ExchangeDelete(theirExchange, false, false)
		}
	})
	foreign, err := tr.Foreign(ctx)
	testenv.Must(t, err, "foreign")
	if want := []string{"exchange " + theirExchange, "queue " + theirs}; !slices.Equal(foreign, want) {
		t.Fatalf("Foreign = %v, want theirs %v", foreign, want)
	}
	testenv.Must(t, tr.Setup(ctx), "setup")
	testenv.Must(t, tr.Teardown(ctx), "teardown")
	q, err := ch.QueueDeclarePassive(theirs, true, false, false, false, nil)
	if err != nil || q.Messages != 1 {
		t.Fatalf("their queue after Teardown: %+v, %v; want it with its message", q, err)
	}
	exists := func(exchange bool, object string) bool {
		c, err := conn.Channel()
		testenv.Must(t, err, "channel")
		defer func() { _ = c.Close() }()
		if exchange {
			return c.ExchangeDeclarePassive(object, amqp091.ExchangeFanout, true, false, false, false, nil) == nil
		}
		_, err = c.QueueDeclarePassive(object, true, false, false, false, nil)
		return err == nil
	}
	if !exists(true, theirExchange) {
		t.Errorf("their exchange %s did not outlive Teardown", theirExchange)
	}
	// The queues and exchanges Setup made are gone.
	for _, s := range []string{shop.Orders, shop.Inventory, shop.Shipping} {
		for p := range shop.DefaultKeyPartitions {
			if q := courieramqp.PartitionQueue(name+s, p); exists(false, q) {
				t.Errorf("queue %s, made by Setup, outlived Teardown", q)
			}
		}
		if x := courieramqp.PartitionExchange(name + s); exists(true, x) {
			t.Errorf("exchange %s, made by Setup, outlived Teardown", x)
		}
	}
}
