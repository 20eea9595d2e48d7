package brokerurl_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/brokerurl"
	"github.com/courier-go/courier/broker/kafka"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
)

// readAll returns the messages r reads back over the last and next hour.
func readAll(t *testing.T, r broker.Reader) []courier.Message {
	t.Helper()
	var got []courier.Message
	_, err := r.ReadBack(ctx(t), time.Now().Add(-time.Hour), time.Now().Add(time.Hour), func(s broker.Stored) error {
		testenv.Must(t, s.Err, "decode "+s.Log)
		got = append(got, s.Message)
		return nil
	})
	testenv.Must(t, err, "read back")
	return got
}

// RabbitMQ and webhooks keep nothing to read back: Reader says so.
func TestReaderOfBrokersThatKeepNothing(t *testing.T) {
	b, err := brokerurl.Open(ctx(t), "https://hooks.example/in", brokerurl.Options{WebhookSecrets: []string{secret}})
	testenv.Must(t, err, "open webhook")
	defer b.Close()
	if _, err := b.Reader(ctx(t), []string{"orders"}); err == nil || !strings.Contains(err.Error(), "webhook endpoint keeps nothing Courier can read back") {
		t.Errorf("Reader of a webhook endpoint: %v", err)
	}

	t.Run("amqp", func(t *testing.T) {
		b, err := brokerurl.Open(ctx(t), testenv.AMQP(t), brokerurl.Options{NoCreate: true})
		testenv.Must(t, err, "open amqp")
		defer b.Close()
		if _, err := b.Reader(ctx(t), []string{"orders"}); err == nil ||
			err.Error() != "RabbitMQ queues hand each message to one consumer and keep no copy: the audit reads NATS JetStream streams and Kafka topics" {
			t.Errorf("Reader of RabbitMQ: %v", err)
		}
	})
}

// On NATS, Reader reads the stream the relay publishes into, every topic
// or those asked for.
func TestReaderNATS(t *testing.T) {
	url := testenv.NATSOrEmbedded(t)
	stream := testenv.Name("BURL")
	mapping := couriernats.Config{SubjectPrefix: strings.ToLower(stream) + "."}
	b, err := brokerurl.Open(ctx(t), url, brokerurl.Options{Stream: stream, SubjectPrefix: mapping.SubjectPrefix})
	testenv.Must(t, err, "open")
	defer b.Close()
	nc := testenv.Connect(t, url) // the test closes b before it ends
	t.Cleanup(func() {
		if js, err := jetstream.New(nc); err == nil {
			_ = js.DeleteStream(context.Background(), stream)
		}
	})
	orders := publish(t, b, "orders", 3)
	publish(t, b, "payments", 1)

	r, err := b.Reader(ctx(t), nil)
	testenv.Must(t, err, "reader")
	if got := readAll(t, r); len(got) != 4 || got[0].ID != orders[0].ID || got[3].Topic != "payments" {
		t.Errorf("every topic: read back %+v", got)
	}
	r, err = b.Reader(ctx(t), []string{"orders"})
	testenv.Must(t, err, "reader of orders")
	if got := readAll(t, r); len(got) != 3 || got[2].ID != orders[2].ID {
		t.Errorf("topic orders: read back %+v", got)
	}
	testenv.Must(t, r.(io.Closer).Close(), "close the reader")
	b.Close()
	if _, err := b.Reader(ctx(t), nil); err == nil {
		t.Error("Reader of a closed broker: no error")
	}
}

// On Kafka, Reader needs the topics, and the Broker's Close closes it.
func TestReaderKafka(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(2))
	testenv.Must(t, err, "kfake")
	defer c.Close()
	raw := "kafka://" + strings.Join(c.ListenAddrs(), ",") + "?topic_prefix=shop."
	b, err := brokerurl.Open(ctx(t), raw, brokerurl.Options{Flag: "--broker-url"})
	testenv.Must(t, err, "open")
	defer b.Close()
	adm, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	testenv.Must(t, err, "admin")
	defer adm.Close()
	testenv.Must(t, kafka.EnsureTopic(ctx(t), adm, b.Config().(kafka.Config), "orders", kafka.TopicConfig{Partitions: 2}), "topic")
	sent := publish(t, b, "orders", 3)

	if _, err := b.Reader(ctx(t), nil); err == nil || !strings.Contains(err.Error(), "name the topics to read with --topic") {
		t.Errorf("Reader without topics: %v", err)
	}
	if _, err := b.Reader(ctx(t), []string{"nope"}); !errors.Is(err, kafka.ErrNoTopic) || !strings.Contains(err.Error(), "shop.nope") {
		t.Errorf("Reader of a missing topic: %v", err)
	}
	r, err := b.Reader(ctx(t), []string{"orders"})
	testenv.Must(t, err, "reader")
	got := readAll(t, r)
	seen := map[[16]byte]bool{}
	for _, m := range got {
		seen[m.ID] = m.Topic == "orders"
	}
	for _, m := range sent {
		if !seen[m.ID] {
			t.Errorf("message %s not read back from topic orders: %+v", m.ID, got)
		}
	}
	b.Close()
	if _, err := r.ReadBack(ctx(t), time.Now().Add(-time.Hour), time.Now(), func(broker.Stored) error { return nil }); err == nil {
		t.Error("ReadBack after the Broker's Close: no error; its client should be closed")
	}
}
