package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/broker/kafka"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/broker/webhook"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/sqlite"
)

// relayOutbox writes 100 messages over 4 keys to a new SQLite database and
// runs `courier relay --broker-url brokerURL args…` as a child process
// (env added to its environment) until the outbox is drained, then stops
// it with SIGTERM. It returns the messages written and the relay's logs.
func relayOutbox(t *testing.T, brokerURL string, env []string, args ...string) ([]courier.Message, string) {
	t.Helper()
	url, msgs := writeOutbox(t)
	return msgs, runRelay(t, url, brokerURL, env, args...)
}

// writeOutbox writes 100 messages over 4 keys to a new SQLite database and
// returns its URL and the messages.
func writeOutbox(t *testing.T) (string, []courier.Message) {
	t.Helper()
	return writeOutboxKeys(t, 100, 4)
}

// writeOutboxKeys writes n messages over keys keys, k0 to k<keys-1> in
// turn, to a new SQLite database and returns its URL and the messages.
func writeOutboxKeys(t *testing.T, n, keys int) (string, []courier.Message) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "courier.db")
	url := "sqlite://" + path
	if code, out, errOut := runCLI(t, "migrate", "--database-url", url); code != 0 {
		t.Fatalf("migrate: %d %q %q", code, out, errOut)
	}
	msgs := make([]courier.Message, n)
	for i := range msgs {
		msgs[i] = courier.NewMessage("orders", fmt.Sprintf("k%d", i%keys), "OrderPlaced", []byte(fmt.Sprintf(`{"n":%d}`, i)))
	}
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open")
	tx, err := db.BeginTx(ctx, nil)
	testenv.Must(t, err, "begin")
	testenv.Must(t, outbox.New(sqlite.DatabaseSQL(), outbox.Config{}).Write(ctx, tx, msgs...), "write")
	testenv.Must(t, tx.Commit(), "commit")
	testenv.Must(t, db.Close(), "close")
	return url, msgs
}

// runRelay runs `courier relay --broker-url brokerURL args…` on the
// database at url as a child process (env added to its environment) until
// the outbox is drained, then stops it with SIGTERM, and returns its logs.
func runRelay(t *testing.T, url, brokerURL string, env []string, args ...string) string {
	t.Helper()
	status := func() map[string]float64 { return outboxStatus(t, url) }
	cmd := exec.Command(os.Args[0], append([]string{"relay", "--log-format", "json", "--broker-url", brokerURL}, args...)...)
	cmd.Env = append(append(os.Environ(), "COURIER_TEST_BE_CLI=1", "COURIER_DATABASE_URL="+url), env...)
	var logs bytes.Buffer
	cmd.Stderr = &logs
	testenv.Must(t, cmd.Start(), "start relay")
	done := false
	defer func() {
		if !done {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	testenv.Eventually(t, 30*time.Second, func() bool {
		s := status()
		return s["pending"] == 0 && s["leased"] == 0 && s["in_backoff"] == 0
	}, "relay did not drain the outbox: %s; logs:\n%s", testenv.Lazy(func() any { return status() }), &logs)
	if s := status(); s["dead_letters"] != 0 {
		t.Fatalf("dead letters: %v; logs:\n%s", s, &logs)
	}
	testenv.Must(t, cmd.Process.Signal(syscall.SIGTERM), "sigterm")
	err := cmd.Wait()
	done = true
	if err != nil {
		t.Fatalf("relay exit after SIGTERM: %v\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), "relay stopped") {
		t.Fatalf("no clean stop in logs:\n%s", logs.String())
	}
	return logs.String()
}

// outboxStatus returns what `courier status --json` says of the database
// at url.
func outboxStatus(t *testing.T, url string) map[string]float64 {
	t.Helper()
	code, out, errOut := runCLI(t, "status", "--json", "--database-url", url)
	if code != 0 {
		t.Fatalf("status: %d %s", code, errOut)
	}
	var all map[string]any
	testenv.Must(t, json.Unmarshal([]byte(out), &all), "status json")
	m := map[string]float64{}
	for k, v := range all {
		if f, ok := v.(float64); ok {
			m[k] = f
		}
	}
	return m
}

// receive acknowledges n deliveries of sub and returns their messages, in
// the order they came.
func receive(ctx context.Context, t *testing.T, sub broker.Subscriber, n int) []courier.Message {
	t.Helper()
	got := make([]courier.Message, 0, n)
	for len(got) < n {
		d, err := sub.Next(ctx)
		testenv.Must(t, err, fmt.Sprintf("delivery %d", len(got)+1))
		m, err := sub.Decode(d.Raw())
		testenv.Must(t, err, "decode")
		testenv.Must(t, d.Ack(ctx), "ack")
		got = append(got, m)
	}
	return got
}

// courier relay drains a SQLite outbox into RabbitMQ: --broker-url amqp://,
// the exchange declared by the relay, a queue bound to it receives every
// message in per-key order.
func TestRelayToRabbitMQ(t *testing.T) {
	base := testenv.AMQP(t)
	exchange := testenv.Name("courier_cli_")
	raw := base + "?exchange=" + exchange + "&prefix=shop."
	cfg, err := amqp.ParseURL(raw)
	testenv.Must(t, err, "parse")
	queue := testenv.Name("cli_")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The queue first: a message no queue receives is refused (mandatory).
	testenv.Must(t, amqp.EnsureTopology(ctx, cfg, amqp.Topology{Queue: queue, Topics: []string{"orders"}}), "topology")
	t.Cleanup(func() {
		if conn, err := amqp091.Dial(cfg.URL); err == nil {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(queue, false, false, false)
				_ = ch.ExchangeDelete(exchange, false, false)
			}
			conn.Close()
		}
	})

	written, logs := relayOutbox(t, raw, nil)
	if strings.Contains(logs, "guest:guest") || !strings.Contains(logs, `"broker":"amqp://guest:xxxxx@`) {
		t.Errorf("logs show the broker URL unredacted or not at all:\n%s", logs)
	}
	sub, err := amqp.NewSubscriber(ctx, amqp.SubscriberConfig{Config: cfg, Queue: queue, Prefetch: 100})
	testenv.Must(t, err, "subscriber")
	defer sub.Close()
	got := receive(ctx, t, sub, len(written))
	testenv.CheckDelivery(t, written, got)
}

// webhookSecret is the Standard Webhooks example secret.
const webhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// courier relay drains a SQLite outbox into a webhook endpoint: --broker-url
// http://, requests signed with the secrets of --webhook-secret-env, every
// message received in per-key order.
func TestRelayToWebhook(t *testing.T) {
	var mu sync.Mutex
	var got []courier.Message
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, err := webhook.VerifyMessage(r, webhookSecret)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		mu.Lock()
		got = append(got, courier.Message{ID: m.ID, Key: m.Key, Topic: m.Topic})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	// Rotation: a new secret first, the one the endpoint knows second.
	secrets := "SHOP_HOOK_SECRET=whsec_YS1uZXdlci1rZXktb2YtMjQtYnl0ZXMh," + webhookSecret
	written, logs := relayOutbox(t, srv.URL+"/courier", []string{secrets}, "--webhook-secret-env", "SHOP_HOOK_SECRET")
	if strings.Contains(logs, "MfKQ9r8") {
		t.Errorf("logs show a secret:\n%s", logs)
	}
	mu.Lock()
	defer mu.Unlock()
	if testenv.CheckDelivery(t, written, got); got[0].Topic != "orders" {
		t.Errorf("topic %q", got[0].Topic)
	}

	// Without a secret the relay refuses to start, naming the variable.
	t.Setenv("COURIER_WEBHOOK_SECRET", "")
	os.Unsetenv("COURIER_WEBHOOK_SECRET")
	code, _, stderr := runCLI(t, "relay", "--database-url", "sqlite://"+filepath.Join(t.TempDir(), "x.db"), "--broker-url", srv.URL)
	if code != 1 || !strings.Contains(stderr, "set COURIER_WEBHOOK_SECRET to whsec_") {
		t.Errorf("relay without a webhook secret: exit %d, %q", code, stderr)
	}
}

// kafkaOrders starts a Kafka cluster (kfake, franz-go's in-process one)
// for the test, with the topic orders in partitions partitions under the
// prefix shop., and returns its broker URL and configuration.
func kafkaOrders(t *testing.T, partitions int) (string, kafka.Config) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(partitions))
	testenv.Must(t, err, "kfake")
	t.Cleanup(c.Close)
	raw := "kafka://" + strings.Join(c.ListenAddrs(), ",") + "?topic_prefix=shop."
	cfg, err := kafka.ParseURL(raw)
	testenv.Must(t, err, "parse")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	testenv.Must(t, err, "admin client")
	defer adm.Close()
	testenv.Must(t, kafka.EnsureTopic(ctx, adm, cfg, "orders", kafka.TopicConfig{Partitions: partitions}), "topic")
	return raw, cfg
}

// courier relay drains a SQLite outbox into Kafka (kfake, franz-go's
// in-process cluster): --broker-url kafka://, every message on the
// prefixed topic, each key's messages in order within their partition.
func TestRelayToKafka(t *testing.T) {
	raw, cfg := kafkaOrders(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	written, logs := relayOutbox(t, raw, nil)
	if !strings.Contains(logs, `"topic_prefix":"shop."`) {
		t.Errorf("logs do not show the topic prefix:\n%s", logs)
	}
	sub, err := kafka.NewSubscriber(ctx, kafka.SubscriberConfig{Config: cfg, Group: "cli", Topics: []string{"orders"}})
	testenv.Must(t, err, "subscriber")
	defer sub.Close()
	got := receive(ctx, t, sub, len(written))
	// A key's messages share a partition, so their order across the
	// partitions read here holds per key.
	testenv.CheckDelivery(t, written, got)
}

// courier relay --stream-replicas 3 on a three-node JetStream cluster
// creates a replicated stream and drains into it.
func TestRelayToNATSClusterReplicated(t *testing.T) {
	c := testenv.NATSCluster(t, 3, testenv.NATSClusterOptions{})
	stream := testenv.Name("R3")
	prefix := strings.ToLower(stream) + "."
	written, _ := relayOutbox(t, c.URL(), nil, "--stream", stream, "--subject-prefix", prefix, "--stream-replicas", "3")
	nc := testenv.Connect(t, c.URL())
	sc, err := c.StreamCluster(context.Background(), nc, stream)
	testenv.Must(t, err, "stream info")
	if sc.Size != 3 || len(sc.Replicas) != 2 {
		t.Fatalf("stream %s: %d replicas configured, peers %v; want 3", stream, sc.Size, sc.Replicas)
	}
	testenv.CheckDelivery(t, written, c.StreamMessages(stream, couriernats.Config{SubjectPrefix: prefix}))
}

// The publisher's settings of a NATS URL's query reach the relay's
// publisher: with batch_time=1ns a claim's key runs (25 messages of each of
// 4 keys) go as atomic batches on a current server, with
// atomic_batches=off none does, and an unknown parameter stops the relay
// with a message naming it.
func TestRelayToNATSBatchSettings(t *testing.T) {
	url := testenv.EmbeddedNATS(t).ClientURL()
	if os.Getenv(testenv.EnvNATSServer) != "" {
		url = testenv.StartNATSServer(t, testenv.NATSServerConfig{}).URL
	}
	for _, c := range []struct {
		query   string
		batched bool
	}{{"?batch_time=1ns&max_batches=2", true}, {"?atomic_batches=off", false}} {
		t.Run(c.query, func(t *testing.T) {
			stream := testenv.Name("BS")
			prefix := strings.ToLower(stream) + "."
			written, _ := relayOutbox(t, url+c.query, nil, "--stream", stream, "--subject-prefix", prefix)
			nc := testenv.Connect(t, url)
			testenv.CheckDelivery(t, written, testenv.StreamMessages(t, nc, stream, couriernats.Config{SubjectPrefix: prefix}))
			if n := batchedMessages(t, nc, stream, len(written)); (n > 0) != c.batched {
				t.Fatalf("%d of %d messages came in atomic batches; want batches: %v", n, len(written), c.batched)
			}
		})
	}
	code, _, errOut := runCLI(t, "relay", "--database-url", "sqlite://"+filepath.Join(t.TempDir(), "x.db"), "--broker-url", url+"?batch=1")
	if code == 0 || !strings.Contains(errOut, `unknown parameter "batch" (known: batch_time, max_batches, atomic_batches=off)`) {
		t.Fatalf("relay with an unknown NATS URL parameter: exit %d, %q", code, errOut)
	}
}

// batchedMessages reads the stream's first n messages and counts those that
// came in an atomic batch (the header Nats-Batch-Id).
func batchedMessages(t *testing.T, nc *natsgo.Conn, stream string, n int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	testenv.Must(t, err, "consumer")
	batched := 0
	for read := 0; read < n; {
		msgs, err := c.Fetch(n-read, jetstream.FetchContext(ctx))
		testenv.Must(t, err, "fetch")
		for m := range msgs.Messages() {
			read++
			if m.Headers().Get("Nats-Batch-Id") != "" {
				batched++
			}
		}
		testenv.Must(t, msgs.Error(), "fetch")
	}
	return batched
}
