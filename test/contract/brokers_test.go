package contract

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/broker/kafka"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/broker/webhook"
	"github.com/courier-go/courier/broker/wire"
	"github.com/courier-go/courier/internal/contract"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/sqlite"
)

// perRequest stands for a webhook header whose value differs from request
// to request.
const perRequest = "(per request)"

// capture collects what a broker's own client receives, by message id.
type capture struct {
	mu  sync.Mutex
	got map[string]contract.BrokerMessage
}

func newCapture() *capture { return &capture{got: map[string]contract.BrokerMessage{}} }

// add records m, the message of id.
func (c *capture) add(id string, m contract.BrokerMessage) {
	slices.SortFunc(m.Headers, func(a, b [2]string) int {
		if n := strings.Compare(a[0], b[0]); n != 0 {
			return n
		}
		return strings.Compare(a[1], b[1])
	})
	if m.Headers == nil {
		m.Headers = [][2]string{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got[id] = m
}

// snapshot returns what was captured so far.
func (c *capture) snapshot() map[string]contract.BrokerMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]contract.BrokerMessage, len(c.got))
	for k, v := range c.got {
		out[k] = v
	}
	return out
}

// brokerTarget starts a broker and its capture, and returns the
// publisher the relay publishes with.
type brokerTarget func(t *testing.T, topics []string, c *capture) broker.Publisher

var brokerTargets = map[string]brokerTarget{
	"nats":     natsTarget,
	"kafka":    kafkaTarget,
	"rabbitmq": rabbitTarget,
	"webhook":  webhookTarget,
}

// natsBatchHeaders begins the names of the headers of JetStream's atomic
// batch publish, which the NATS publisher uses for a key's run of messages
// when the relay hands it one: brokers.json leaves them out.
const natsBatchHeaders = "Nats-Batch-"

// natsTarget is an embedded NATS server with Courier's default stream and
// subject prefix; a core subscription captures.
func natsTarget(t *testing.T, _ []string, c *capture) broker.Publisher {
	srv := testenv.EmbeddedNATS(t)
	nc := testenv.Connect(t, srv.ClientURL())
	mapping := couriernats.Config{}
	testenv.Must(t, couriernats.EnsureStream(context.Background(), nc, mapping, couriernats.StreamConfig{}), "ensure stream")
	sub, err := nc.Subscribe(mapping.Subject(">"), func(m *natsgo.Msg) {
		id := m.Header.Get(wire.HeaderNATSMsgID)
		if id == "" {
			return // not the relay's: JetStream's API and its replies, which ">" also takes
		}
		var h [][2]string
		for name, values := range m.Header {
			if strings.HasPrefix(name, natsBatchHeaders) {
				continue // present or not as the relay's runs fall
			}
			for _, v := range values {
				h = append(h, [2]string{name, v})
			}
		}
		c.add(id, contract.BrokerMessage{Destination: m.Subject, Headers: h, Body: contract.DigestOf(m.Data)})
	})
	testenv.Must(t, err, "subscribe")
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	testenv.Must(t, nc.Flush(), "flush")
	pc := testenv.Connect(t, srv.ClientURL())
	pub, err := couriernats.NewPublisher(pc, couriernats.PublisherConfig{Config: mapping})
	testenv.Must(t, err, "publisher")
	return pub
}

// kafkaTarget is a Kafka cluster in the process (kfake) with a topic of
// one partition for each topic Kafka accepts; a consumer captures.
func kafkaTarget(t *testing.T, topics []string, c *capture) broker.Publisher {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	testenv.Must(t, err, "kfake")
	t.Cleanup(cluster.Close)
	cfg := kafka.Config{Brokers: cluster.ListenAddrs()}
	adm, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	testenv.Must(t, err, "admin client")
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var made []string
	for _, topic := range topics {
		if err := kafka.EnsureTopic(ctx, adm, cfg, topic, kafka.TopicConfig{Partitions: 1}); err != nil {
			t.Logf("Kafka has no topic %q: %v", topic, err)
			continue
		}
		made = append(made, cfg.Topic(topic))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.ConsumeTopics(made...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	testenv.Must(t, err, "consumer")
	cctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for cctx.Err() == nil {
			cl.PollFetches(cctx).EachRecord(func(r *kgo.Record) {
				var h [][2]string
				id := ""
				for _, rh := range r.Headers {
					h = append(h, [2]string{rh.Key, string(rh.Value)})
					if rh.Key == wire.HeaderID {
						id = string(rh.Value)
					}
				}
				c.add(id, contract.BrokerMessage{Destination: r.Topic, Properties: map[string]string{"key": string(r.Key)},
					Headers: h, Body: contract.DigestOf(r.Value)})
			})
		}
	}()
	t.Cleanup(func() { stop(); <-done; cl.Close() })
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Config: cfg})
	testenv.Must(t, err, "publisher")
	t.Cleanup(pub.Close)
	return pub
}

// rabbitTarget is the machine's RabbitMQ with an exchange and a queue of
// the test's own, bound to every topic; a consumer of the queue captures.
func rabbitTarget(t *testing.T, _ []string, c *capture) broker.Publisher {
	base := testenv.AMQP(t)
	exchange, queue := "courier_contract", testenv.Name("contract_")
	cfg, err := amqp.ParseURL(base + "?exchange=" + exchange)
	testenv.Must(t, err, "parse the AMQP URL")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testenv.Must(t, amqp.EnsureTopology(ctx, cfg, amqp.Topology{Queue: queue}), "topology")
	conn, err := amqp091.Dial(cfg.URL)
	testenv.Must(t, err, "dial")
	ch, err := conn.Channel()
	testenv.Must(t, err, "channel")
	deliveries, err := ch.Consume(queue, "", true, true, false, false, nil)
	testenv.Must(t, err, "consume")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for d := range deliveries {
			var h [][2]string
			for name, v := range d.Headers {
				h = append(h, [2]string{name, fmt.Sprintf("%T %v", v, v)})
			}
			c.add(d.MessageId, contract.BrokerMessage{
				Destination: d.Exchange + " " + d.RoutingKey,
				Properties: map[string]string{
					"message_id": d.MessageId, "type": d.Type, "content_type": d.ContentType,
					"delivery_mode": strconv.Itoa(int(d.DeliveryMode)), "timestamp": d.Timestamp.UTC().Format(time.RFC3339Nano),
				},
				Headers: h, Body: contract.DigestOf(d.Body)})
		}
	}()
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(queue, false, false, false)
		_ = ch.ExchangeDelete(exchange, false, false)
		conn.Close()
		<-done
	})
	pub, err := amqp.NewPublisher(amqp.PublisherConfig{Config: cfg})
	testenv.Must(t, err, "publisher")
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// webhookTarget is an HTTP server the webhook publisher sends to in raw
// body mode; its handler captures.
func webhookTarget(t *testing.T, _ []string, c *capture) broker.Publisher {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var h [][2]string
		for name, values := range r.Header {
			for _, v := range values {
				if name == http.CanonicalHeaderKey(webhook.HeaderTimestamp) || name == http.CanonicalHeaderKey(webhook.HeaderSignature) {
					v = perRequest
				}
				h = append(h, [2]string{name, v})
			}
		}
		c.add(r.Header.Get(wire.HeaderWebhookID), contract.BrokerMessage{Destination: r.Method + " " + r.URL.Path, Headers: h, Body: contract.DigestOf(body)})
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("courier contract vectors' key 32"))
	pub, err := webhook.NewPublisher(webhook.PublisherConfig{DefaultEndpoint: srv.URL + "/hooks", Secrets: []string{secret}, Body: webhook.BodyRaw})
	testenv.Must(t, err, "publisher")
	return pub
}

// deadLetters returns the dead letters' errors by message id.
func deadLetters(t *testing.T, db *sql.DB) map[string]string {
	rows, err := db.Query("SELECT message_id, last_error FROM courier_outbox_dead_letters")
	testenv.Must(t, err, "read dead letters")
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, e string
		testenv.Must(t, rows.Scan(&id, &e), "scan dead letter")
		out[id] = e
	}
	testenv.Must(t, rows.Err(), "read dead letters")
	return out
}

// waiting describes the messages still in the outbox.
func waiting(t *testing.T, db *sql.DB) string {
	rows, err := db.Query("SELECT topic, attempts, coalesce(last_error, '') FROM courier_outbox ORDER BY id")
	testenv.Must(t, err, "read the outbox")
	defer rows.Close()
	var out []string
	for rows.Next() {
		var topic, e string
		var n int
		testenv.Must(t, rows.Scan(&topic, &n, &e), "scan the outbox")
		out = append(out, fmt.Sprintf("%.40q after %d attempts: %.200s", topic, n, e))
	}
	return strings.Join(out, "; ")
}

// publishAll writes msgs into a SQLite outbox, runs the relay to pub
// until each message is captured or a dead letter, and returns both.
func publishAll(t *testing.T, pub broker.Publisher, c *capture, msgs []courier.Message) (map[string]contract.BrokerMessage, map[string]string) {
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	testenv.Must(t, err, "open")
	t.Cleanup(func() { db.Close() })
	d := sqlite.NewDriver(db)
	ctx := context.Background()
	_, err = d.Migrate(ctx)
	testenv.Must(t, err, "migrate")
	ln := store.NewLocalNotifier()
	w := outbox.New(d.Inserter(), outbox.Config{Notify: ln.Signal})
	testenv.Must(t, d.InTx(ctx, func(tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) }), "write")
	st, err := d.RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "relay store")
	r, err := relay.New(st, pub, relay.Config{
		Notifier: ln, MaxAttempts: 2, PublishTimeout: 10 * time.Second, PollInterval: 50 * time.Millisecond,
		Backoff: relay.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
	})
	testenv.Must(t, err, "relay")
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("relay: %v", err)
		}
	}()
	var got map[string]contract.BrokerMessage
	var dead map[string]string
	// Until each message is published or a dead letter: counting what was
	// captured would end early when something else was captured too (on
	// NATS, JetStream's replies) while a message waits.
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		got, dead = c.snapshot(), deadLetters(t, db)
		missing := 0
		for _, m := range msgs {
			_, published := got[m.ID.String()]
			_, isDead := dead[m.ID.String()]
			if !published && !isDead {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d of %d neither, waiting: %s", missing, len(msgs), waiting(t, db))
	}, "the relay publishes or dead-letters each of %d messages", len(msgs))
	return got, dead
}

// brokers.json is what the relay publishes on each broker for the valid
// messages of messages.json, read with each broker's own client: a
// message a broker refuses for good is a dead letter with the error.
func TestBrokersVectors(t *testing.T) {
	names, msgs := validMessages(t)
	var topics []string
	for _, m := range msgs {
		if !slices.Contains(topics, m.Topic) {
			topics = append(topics, m.Topic)
		}
	}
	got := contract.Brokers{Contract: contract.Version, Brokers: map[string][]contract.Published{}}
	var mu sync.Mutex
	t.Run("brokers", func(t *testing.T) {
		for name, start := range brokerTargets {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				c := newCapture()
				pub := start(t, topics, c)
				published, dead := publishAll(t, pub, c, msgs)
				out := make([]contract.Published, len(msgs))
				for i, m := range msgs {
					out[i].Name = names[i]
					if bm, ok := published[m.ID.String()]; ok {
						out[i].Message = &bm
					} else if e, ok := dead[m.ID.String()]; ok {
						out[i].DeadLetter = e
					} else {
						t.Errorf("%q: neither published nor a dead letter", names[i])
					}
				}
				mu.Lock()
				got.Brokers[name] = out
				mu.Unlock()
			})
		}
	})
	if *update {
		if len(got.Brokers) != len(brokerTargets) {
			t.Fatalf("only %d of %d brokers ran: -update needs every broker (source the test environment)", len(got.Brokers), len(brokerTargets))
		}
		golden(t, "brokers.json", got)
		return
	}
	var want contract.Brokers
	if err := contract.Read("brokers.json", &want); err != nil {
		t.Fatal(err)
	}
	for name, ps := range got.Brokers {
		a, _ := contract.Encode(ps)
		b, _ := contract.Encode(want.Brokers[name])
		sameJSON(t, "brokers.json's "+name, a, b)
	}
}
