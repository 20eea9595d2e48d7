package amqp_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/internal/testenv"
)

func TestParseURL(t *testing.T) {
	cfg, err := amqp.ParseURL("amqp://u:p@host:5672/vh?exchange=events&prefix=shop.&heartbeat=5&connection_timeout=2000")
	testenv.Must(t, err, "parse")
	if cfg.Exchange != "events" || cfg.RoutingKeyPrefix != "shop." {
		t.Errorf("exchange %q prefix %q", cfg.Exchange, cfg.RoutingKeyPrefix)
	}
	if cfg.URL != "amqp://u:p@host:5672/vh?connection_timeout=2000" || cfg.Heartbeat != 5*time.Second {
		t.Errorf("URL %q, Heartbeat %s: want Courier's options out of the URL (the heartbeat in Heartbeat) and the client's kept", cfg.URL, cfg.Heartbeat)
	}
	if got := cfg.RoutingKey("orders"); got != "shop.orders" {
		t.Errorf("routing key %q", got)
	}
	if got := cfg.Topic("shop.orders"); got != "orders" {
		t.Errorf("topic %q", got)
	}
	cfg, err = amqp.ParseURL("amqp://127.0.0.1/")
	testenv.Must(t, err, "parse")
	if cfg.Exchange != amqp.DefaultExchange || cfg.RoutingKeyPrefix != "" || cfg.Heartbeat != 0 {
		t.Errorf("defaults: exchange %q prefix %q heartbeat %s; want the heartbeat left to what uses the Config", cfg.Exchange, cfg.RoutingKeyPrefix, cfg.Heartbeat)
	}
	for _, bad := range []string{"0", "x", "-1", "70000"} {
		if _, err := amqp.ParseURL("amqp://127.0.0.1/?heartbeat=" + bad); err == nil || !strings.Contains(err.Error(), "heartbeat") {
			t.Errorf("heartbeat=%s: %v; want it refused", bad, err)
		}
	}
	if _, err := amqp.ParseURL("nats://127.0.0.1"); err == nil || !strings.Contains(err.Error(), "amqp://") {
		t.Errorf("nats URL: %v", err)
	}
}

func TestDecodeMalformed(t *testing.T) {
	var cfg amqp.Config
	m := courier.NewMessage("orders", "k", "T", nil)
	pub := amqp.Publishing(&m)
	good := map[string][]string{amqp.RawMessageID: {pub.MessageId}, amqp.RawType: {pub.Type}}
	for k, v := range pub.Headers {
		good[k] = []string{v.(string)}
	}
	if _, err := cfg.Decode(broker.Raw{Subject: "orders", Headers: good}); err != nil {
		t.Fatalf("decode: %v", err)
	}
	for _, drop := range []string{amqp.RawMessageID, amqp.RawType, amqp.HeaderKey, amqp.HeaderVersion, amqp.HeaderOccurredAt} {
		h := map[string][]string{}
		for k, v := range good {
			if k != drop {
				h[k] = v
			}
		}
		if _, err := cfg.Decode(broker.Raw{Subject: "orders", Headers: h}); !errors.Is(err, courier.ErrMalformed) || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(drop)) {
			t.Errorf("without %s: %v", drop, err)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	cfg, q := setup(t, amqp.Topology{Queue: "rt", Topics: []string{"orders"}})
	pub := newPublisher(t, cfg)
	sub := newSubscriber(t, cfg, q, 10)

	payload := make([]byte, 256)
	for i := range payload {
		payload[i] = byte(i)
	}
	m := courier.NewMessage("orders", "order-1", "OrderPlaced", payload, courier.WithContentType("application/x-test"))
	m.Version = 3
	m.SetHeader(courier.HeaderTraceParent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	m.SetHeader("X-Tenant", "acme")
	mustPublish(t, pub, []courier.Message{m})

	d := next(t, sub, 10*time.Second)
	got, err := sub.Decode(d.Raw())
	testenv.Must(t, err, "decode")
	if got.ID != m.ID || got.Topic != m.Topic || got.Key != m.Key || got.Type != m.Type || got.Version != 3 ||
		got.ContentType != "application/x-test" || !bytes.Equal(got.Payload, payload) || !got.OccurredAt.Equal(m.OccurredAt) {
		t.Errorf("got %+v\nwant %+v", got, m)
	}
	if len(got.Headers) != 2 || got.Headers[courier.HeaderTraceParent] != m.Headers[courier.HeaderTraceParent] || got.Headers["X-Tenant"] != "acme" {
		t.Errorf("headers %v, want %v", got.Headers, m.Headers)
	}
	if d.Raw().Subject != "orders" || d.Attempt() != 1 {
		t.Errorf("subject %q attempt %d", d.Raw().Subject, d.Attempt())
	}
	testenv.Must(t, d.Ack(context.Background()), "ack")
	nothingWithin(t, sub, 300*time.Millisecond)
}

// The properties a consumer written for RabbitMQ, not for Courier, reads.
func TestPublishingProperties(t *testing.T) {
	cfg, q := setup(t, amqp.Topology{Queue: "props"})
	pub := newPublisher(t, cfg)
	m := courier.NewMessage("orders.created", "k", "OrderPlaced", []byte("{}"), courier.WithContentType(courier.ContentTypeJSON))
	mustPublish(t, pub, []courier.Message{m})
	var d amqp091.Delivery
	testenv.Eventually(t, 10*time.Second, func() bool {
		ok := false
		withChannel(t, cfg, func(ch *amqp091.Channel) error {
			var err error
			d, ok, err = ch.Get(q, true)
			return err
		})
		return ok
	}, "message not in the queue")
	if d.MessageId != m.ID.String() || d.Type != "OrderPlaced" || d.ContentType != courier.ContentTypeJSON ||
		d.DeliveryMode != amqp091.Persistent || d.RoutingKey != "orders.created" || d.Exchange != cfg.Exchange ||
		d.Timestamp.Unix() != m.OccurredAt.Unix() {
		t.Errorf("delivery properties: %+v", d)
	}
}

func TestUnroutableCountsAgainstTheMessage(t *testing.T) {
	cfg, q := setup(t, amqp.Topology{Queue: "unr", Topics: []string{"orders"}})
	pub := newPublisher(t, cfg)
	msgs := append(messages("orders", 3, 3), messages("nobody.listens", 2, 2)...)
	errs := pub.Publish(context.Background(), msgs)
	for i, err := range errs {
		if i < 3 {
			if err != nil {
				t.Errorf("routable message %d: %v", i, err)
			}
			continue
		}
		switch {
		case err == nil:
			t.Errorf("unroutable message %d acknowledged", i)
		case !errors.Is(err, amqp.ErrUnroutable) || errors.Is(err, broker.ErrUnavailable) || errors.Is(err, broker.ErrRejected):
			t.Errorf("unroutable message %d: %v: want ErrUnroutable, counted", i, err)
		case !strings.Contains(err.Error(), `"nobody.listens"`) || !strings.Contains(err.Error(), cfg.Exchange) || !strings.Contains(err.Error(), "bind a queue"):
			t.Errorf("error does not name the routing key, the exchange and the fix: %v", err)
		}
	}
	if n := queueDepth(t, cfg, q); n != 3 {
		t.Errorf("queue holds %d messages, want 3", n)
	}
	// The channel serves the next batch.
	mustPublish(t, pub, messages("orders", 2, 1))
}

func TestMissingExchangeCountsAgainstTheMessage(t *testing.T) {
	cfg, _ := setup(t, amqp.Topology{})
	pub := newPublisher(t, cfg)
	withChannel(t, cfg, func(ch *amqp091.Channel) error { return ch.ExchangeDelete(cfg.Exchange, false, false) })
	for range 2 { // and again on a new channel
		for i, err := range pub.Publish(context.Background(), messages("orders", 3, 1)) {
			if !errors.Is(err, amqp.ErrNoExchange) || errors.Is(err, broker.ErrUnavailable) || errors.Is(err, broker.ErrRejected) ||
				!strings.Contains(err.Error(), cfg.Exchange) || !strings.Contains(err.Error(), "EnsureTopology") {
				t.Errorf("message %d: %v: want ErrNoExchange naming the exchange and the fix", i, err)
			}
		}
	}
}

func TestManyInFlight(t *testing.T) {
	cfg, q := setup(t, amqp.Topology{Queue: "many"})
	pub := newPublisher(t, cfg)
	const n = 5000
	msgs := messages("orders", n, 50)
	start := time.Now()
	mustPublish(t, pub, msgs)
	t.Logf("%d messages confirmed in %s", n, time.Since(start).Round(time.Millisecond))
	if got := queueDepth(t, cfg, q); got != n {
		t.Errorf("queue holds %d messages, want %d", got, n)
	}
	// Concurrent batches share the channel pool.
	errc := make(chan error, 4)
	for range 4 {
		go func() { errc <- errors.Join(pub.Publish(context.Background(), messages("orders", 500, 10))...) }()
	}
	for range 4 {
		testenv.Must(t, <-errc, "concurrent publish")
	}
	if got := queueDepth(t, cfg, q); got != n+2000 {
		t.Errorf("queue holds %d messages, want %d", got, n+2000)
	}
}

func TestRedeliveryCountsAttempts(t *testing.T) {
	cfg, q := setup(t, amqp.Topology{Queue: "redel"})
	pub := newPublisher(t, cfg)
	sub := newSubscriber(t, cfg, q, 10)
	m := messages("orders", 1, 1)
	mustPublish(t, pub, m)
	ctx := context.Background()

	d := next(t, sub, 10*time.Second)
	if d.Attempt() != 1 {
		t.Fatalf("first delivery: attempt %d", d.Attempt())
	}
	testenv.Must(t, d.Retry(ctx, 0), "retry now")
	d = next(t, sub, 10*time.Second)
	if d.Attempt() != 2 || d.Raw().Headers["x-delivery-count"][0] != "1" {
		t.Fatalf("second delivery: attempt %d, headers %v", d.Attempt(), d.Raw().Headers)
	}
	got, err := sub.Decode(d.Raw())
	testenv.Must(t, err, "decode")
	if got.ID != m[0].ID || len(got.Headers) != 0 {
		t.Errorf("redelivery decodes as %+v: x- headers must not become message headers", got)
	}

	const delay = 500 * time.Millisecond
	retried := time.Now()
	testenv.Must(t, d.Retry(ctx, delay), "retry later")
	testenv.Must(t, d.Extend(ctx), "extend")
	d = next(t, sub, 10*time.Second)
	if waited := time.Since(retried); waited < delay-50*time.Millisecond {
		t.Errorf("redelivered after %s, before the delay of %s", waited, delay)
	}
	if d.Attempt() != 3 {
		t.Errorf("third delivery: attempt %d", d.Attempt())
	}

	// A delivery dropped, or taken and not acknowledged by a subscriber
	// that closes, counts too.
	sub2 := newSubscriber(t, cfg, q, 10)
	testenv.Must(t, sub.Close(), "close")
	d = next(t, sub2, 10*time.Second)
	if d.Attempt() != 4 {
		t.Errorf("after a close: attempt %d", d.Attempt())
	}
	testenv.Must(t, d.Drop(ctx), "drop")
	nothingWithin(t, sub2, 500*time.Millisecond)
	if n := queueDepth(t, cfg, q); n != 0 {
		t.Errorf("%d messages left after drop", n)
	}
}

func TestMissingQueue(t *testing.T) {
	cfg, _ := setup(t, amqp.Topology{})
	_, err := amqp.NewSubscriber(context.Background(), amqp.SubscriberConfig{Config: cfg, Queue: "no-such-queue-" + testenv.Name("")})
	if err == nil || errors.Is(err, broker.ErrUnavailable) || !strings.Contains(err.Error(), "EnsureTopology") {
		t.Fatalf("missing queue: %v", err)
	}
}

func TestUnreachableIsUnavailable(t *testing.T) {
	cfg := amqp.Config{URL: "amqp://guest:guest@127.0.0.1:1/", DialTimeout: time.Second}
	pub, err := amqp.NewPublisher(amqp.PublisherConfig{Config: cfg})
	testenv.Must(t, err, "new publisher") // does not connect
	defer pub.Close()
	if err := pub.Connect(); !errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("connect to a closed port: %v", err)
	}
	for range 2 { // dialling, then inside the backoff
		for i, err := range pub.Publish(context.Background(), messages("orders", 3, 1)) {
			if !errors.Is(err, broker.ErrUnavailable) || errors.Is(err, broker.ErrRejected) {
				t.Errorf("message %d: %v", i, err)
			}
		}
	}
}

func TestWrongCredentials(t *testing.T) {
	cfg, _ := setup(t, amqp.Topology{})
	cfg.URL = strings.Replace(cfg.URL, "guest:guest@", "guest:wrong@", 1)
	pub, err := amqp.NewPublisher(amqp.PublisherConfig{Config: cfg})
	testenv.Must(t, err, "new publisher")
	defer pub.Close()
	err = pub.Connect()
	if err == nil || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("connect with a wrong password: %v (and the password must not show)", err)
	}
	t.Logf("wrong password: %v", err)
}
