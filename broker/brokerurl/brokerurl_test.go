package brokerurl_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/broker/brokerurl"
	"github.com/courier-go/courier/broker/kafka"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/broker/webhook"
	"github.com/courier-go/courier/internal/testenv"
)

func TestMain(m *testing.M) { testenv.M(m).Run() }

// secret is the Standard Webhooks example secret.
const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func TestParse(t *testing.T) {
	t.Setenv(brokerurl.DefaultWebhookSecretEnv, "")
	opts := brokerurl.Options{Flag: "--broker-url"}
	hooks := brokerurl.Options{Flag: "--broker-url", WebhookSecrets: []string{secret}}
	good := []struct {
		raw   string
		opts  brokerurl.Options
		kind  string
		where string
	}{
		{"kafka://k1:9092,k2:9092?topic_prefix=shop.", opts, "kafka", "kafka://k1:9092,k2:9092?topic_prefix=shop."},
		{"kafka://k1", opts, "kafka", "kafka://k1"},
		{"nats://127.0.0.1:4222", opts, "nats", "nats://127.0.0.1:4222"},
		{"tls://u:pw@nats.example:4222", opts, "nats", "tls://u:xxxxx@nats.example:4222"},
		{"nats://a:4222,nats://u:pw@b:4222", opts, "nats", "nats://a:4222,nats://u:xxxxx@b:4222"},
		{"amqp://guest:guest@127.0.0.1:5672/", opts, "amqp", "amqp://guest:xxxxx@127.0.0.1:5672/"},
		{"amqps://u:p%40ss@rabbit:5671/shop?exchange=events&prefix=shop.", opts, "amqp", "amqps://u:xxxxx@rabbit:5671/shop?exchange=events&prefix=shop."},
		{"https://hooks.example/courier", hooks, "webhook", "https://hooks.example/courier"},
		{"http://u:pw@127.0.0.1:8080/in", hooks, "webhook", "http://u:xxxxx@127.0.0.1:8080/in"},
		{"https://hooks.example/in?token=abc&tenant=7", hooks, "webhook", "https://hooks.example/in?token=xxxxx&tenant=xxxxx"},
		{"https://hooks.example/services/T0000000/B0000000/XXXXXXXXXXXXXXXXXXXXXXXX", hooks, "webhook", "https://hooks.example/services/xxxxx/xxxxx/xxxxx"},
		{"nats://s3cr3t@nats.example:4222", opts, "nats", "nats://xxxxx@nats.example:4222"},
		{"amqp://u:p%2Fss@rabbit/", opts, "amqp", "amqp://u:xxxxx@rabbit/"},
	}
	for _, c := range good {
		u, err := brokerurl.Parse(c.raw, c.opts)
		if err != nil || u.Kind != c.kind || u.Where != c.where {
			t.Errorf("Parse(%q) = %q %q, %v; want %q %q", c.raw, u.Kind, u.Where, err, c.kind, c.where)
		}
	}
	k, _ := brokerurl.Parse("kafka://k1,k2:9093?topic_prefix=shop.", opts)
	if kc := k.Config.(kafka.Config); strings.Join(kc.Brokers, " ") != "k1:9092 k2:9093" || kc.TopicPrefix != "shop." {
		t.Errorf("Kafka config: %+v", kc)
	}
	n, _ := brokerurl.Parse("nats://a:4222,nats://b:4222?batch_time=6ms&max_batches=8&atomic_batches=off", opts)
	if nc := n.Config.(couriernats.URLConfig); nc.Servers != "nats://a:4222,nats://b:4222" || nc.Publisher.BatchTime != 6*time.Millisecond || nc.Publisher.MaxBatches != 8 || !nc.Publisher.NoAtomicBatches {
		t.Errorf("NATS config: %+v", nc)
	}
	u, _ := brokerurl.Parse("amqp://guest:guest@127.0.0.1:5672/shop?exchange=events&prefix=shop.&heartbeat=5", opts)
	if ac := u.Config.(amqp.Config); ac.Exchange != "events" || ac.RoutingKeyPrefix != "shop." || strings.Contains(ac.URL, "exchange") {
		t.Errorf("AMQP config: %+v", ac)
	}

	bad := []struct {
		raw, want string
	}{
		{"", "--broker-url is empty: use " + brokerurl.Forms()},
		{"localhost:4222", "is not a broker URL: use amqp://user:password@host:5672/vhost"},
		{"redis://u:hunter2@x", `--broker-url "redis://u:xxxxx@x" is not a broker URL Courier knows: use amqp://user:password@host:5672/vhost, kafka://host1:9092,host2:9092, nats://host:4222 (or tls://), https://endpoint (or http://)`},
		{"kafka://", "is not a Kafka URL (URL \"kafka://\" names no broker: use kafka://host:9092): use kafka://host1:9092,host2:9092?topic_prefix="},
		{"kafka://k1:9092?prefix=shop.", `unknown parameter "prefix" (known: topic_prefix)`},
		{"kafka://k1:9092/shop", "is not a Kafka URL"},
		{"nats://", "is not a NATS URL"},
		{"nats://u:hunter2@a:4222?batch=1", `unknown parameter "batch" (known: batch_time, max_batches, atomic_batches=off)`},
		{"nats://a:4222?batch_time=0", `batch_time="0": want a duration above 0, such as 4ms`},
		{"nats://a:4222?batch_time=4", `batch_time="4": want a duration above 0`},
		{"nats://a:4222?max_batches=many", `max_batches="many": want a whole number above 0`},
		{"nats://a:4222?atomic_batches=no", `atomic_batches="no": want on or off`},
		{"amqp://u:hunter2@x:bad/", `"amqp://u:xxxxx@x:bad/" is not a RabbitMQ URL`},
		{"https://", "is not a webhook endpoint URL"},
		{"https://x/hook", "no secret signs its requests: set COURIER_WEBHOOK_SECRET to whsec_"},
		{"https://x/hook?webhook_secret=" + secret, `webhook secrets never go in the URL (query parameter "webhook_secret")`},
		{"amqp://u:hun/ter2@rabbit/", `--broker-url "amqp://u:xxxxx@rabbit/": the password (or token) holds an unencoded character that ends it`},
		{"amqp://u:hun?ter2@rabbit/", "; percent-encode it (/ as %2F, ? as %3F, # as %23, @ as %40)"},
		{"amqp://u:hun#ter2@rabbit/", "percent-encode"},
		{"nats://a:4222,nats://u:hun/ter2@b:4222", "percent-encode"},
		{"nats://hun/ter2@b:4222", "percent-encode"},
	}
	for _, c := range bad {
		_, err := brokerurl.Parse(c.raw, opts)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "ter2") || strings.Contains(err.Error(), "MfKQ") {
			t.Errorf("Parse(%q): %v; want an error containing %q, without the password", c.raw, err, c.want)
		}
	}

	t.Setenv("HOOK_KEYS", " "+secret+" , whsec_b2xk ")
	u, err := brokerurl.Parse("https://x/hook", brokerurl.Options{WebhookSecretEnv: "HOOK_KEYS"})
	if hc, _ := u.Config.(webhook.PublisherConfig); err != nil || len(hc.Secrets) != 2 || hc.Secrets[0] != secret || hc.Secrets[1] != "whsec_b2xk" {
		t.Errorf("secrets from HOOK_KEYS: %q, %v", hc.Secrets, err)
	}
	if _, err := brokerurl.Parse("https://x/hook", brokerurl.Options{WebhookSecretEnv: "NO_SUCH_KEYS"}); err == nil || !strings.Contains(err.Error(), "set NO_SUCH_KEYS") {
		t.Errorf("secrets from an unset variable: %v", err)
	}
}

func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"amqp://guest:guest@h:5672/":    "amqp://guest:xxxxx@h:5672/",
		"amqp://guest@h:5672/":          "amqp://guest@h:5672/",
		"https://h/a@b":                 "https://h/a@b",
		"https://u:p@h/a@b":             "https://u:xxxxx@h/a@b",
		"nats://a:1,tls://u:p@b:2":      "nats://a:1,tls://u:xxxxx@b:2",
		"kafka://h1:9092,h2:9092?x=y:z": "kafka://h1:9092,h2:9092?x=y:z",
	} {
		if got := brokerurl.Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func publish(t *testing.T, b *brokerurl.Broker, topic string, n int) []courier.Message {
	t.Helper()
	msgs := make([]courier.Message, n)
	for i := range msgs {
		msgs[i] = courier.NewMessage(topic, "k", "T", []byte{byte(i)})
	}
	for i, err := range b.Publish(ctx(t), msgs) {
		if err != nil {
			t.Fatalf("publish %d to %s: %v", i, b, err)
		}
	}
	return msgs
}

func TestOpenNATS(t *testing.T) {
	url := testenv.NATSOrEmbedded(t)
	stream := testenv.Name("BURL")
	mapping := couriernats.Config{SubjectPrefix: strings.ToLower(stream) + "."}
	opts := brokerurl.Options{Stream: stream, SubjectPrefix: mapping.SubjectPrefix}
	b, err := brokerurl.Open(ctx(t), url, opts)
	testenv.Must(t, err, "open")
	defer b.Close()
	nc := testenv.Connect(t, url)
	t.Cleanup(func() {
		if js, err := jetstream.New(nc); err == nil {
			_ = js.DeleteStream(context.Background(), stream)
		}
	})
	if b.Kind() != "nats" || b.MessagingSystem() != "nats" || b.String() != url || b.HealthCheck() == nil || b.HealthCheck()(ctx(t)) != nil {
		t.Errorf("kind %q, String %q", b.Kind(), b.String())
	}
	if broker.KeepsKeyOrder(b) != broker.KeepsKeyOrder(b.Publisher) {
		t.Error("the broker and its publisher disagree on keeping a key's order")
	}
	sent := publish(t, b, "orders", 3)
	got := testenv.StreamMessages(t, nc, stream, mapping)
	if len(got) != 3 || got[0].ID != sent[0].ID || got[0].Topic != "orders" {
		t.Fatalf("stream holds %v", got)
	}

	// Another stream over the same subjects: JetStream refuses it, and the
	// error names the stream that has them.
	_, err = brokerurl.Open(ctx(t), url, brokerurl.Options{Stream: stream + "_2", SubjectPrefix: mapping.SubjectPrefix})
	var se *couriernats.StreamError
	if !errors.As(err, &se) || len(se.Overlap) != 1 || se.Overlap[0] != stream || !strings.Contains(err.Error(), "overlap those of stream "+stream) {
		t.Fatalf("overlapping stream: %v", err)
	}
	// NoCreate leaves streams alone.
	nb, err := brokerurl.Open(ctx(t), url, brokerurl.Options{Stream: stream + "_2", SubjectPrefix: mapping.SubjectPrefix, NoCreate: true})
	testenv.Must(t, err, "open without creating")
	nb.Close()
}

func TestOpenUnreachable(t *testing.T) {
	opts := brokerurl.Options{Flag: "--broker-url", Env: "COURIER_BROKER_URL", NoCreate: true}
	for raw, want := range map[string]string{
		"nats://u:hunter2@127.0.0.1:1":  "cannot reach NATS at nats://u:xxxxx@127.0.0.1:1",
		"nats://hunter2@127.0.0.1:1":    "cannot reach NATS at nats://xxxxx@127.0.0.1:1",
		"amqp://u:hunter2@127.0.0.1:1/": "cannot reach RabbitMQ at amqp://u:xxxxx@127.0.0.1:1/",
		"kafka://127.0.0.1:1":           "cannot reach Kafka at kafka://127.0.0.1:1",
	} {
		_, err := brokerurl.Open(ctx(t), raw, opts)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "check --broker-url (COURIER_BROKER_URL)") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q): %v; want %q", raw, err, want)
		}
	}
	opts.NoCreate = false
	_, err := brokerurl.Open(ctx(t), "amqp://u:hunter2@127.0.0.1:1/", opts)
	if err == nil || !strings.Contains(err.Error(), "cannot declare exchange courier on RabbitMQ at amqp://u:xxxxx@127.0.0.1:1/") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Open AMQP, creating: %v", err)
	}
}

func TestOpenAMQP(t *testing.T) {
	base := testenv.AMQP(t)
	exchange := testenv.Name("courier_burl_")
	raw := base + "?exchange=" + exchange + "&prefix=shop."
	b, err := brokerurl.Open(ctx(t), raw, brokerurl.Options{})
	testenv.Must(t, err, "open")
	defer b.Close()
	if b.Kind() != "amqp" || b.MessagingSystem() != "rabbitmq" || strings.Contains(b.String(), "guest:guest") {
		t.Errorf("kind %q, String %q", b.Kind(), b.String())
	}
	cfg, err := amqp.ParseURL(raw)
	testenv.Must(t, err, "parse")
	queue := testenv.Name("burl_")
	testenv.Must(t, amqp.EnsureTopology(ctx(t), cfg, amqp.Topology{Queue: queue, Topics: []string{"orders"}}), "queue")
	t.Cleanup(func() {
		conn, err := amqp091.Dial(cfg.URL)
		if err != nil {
			return
		}
		defer conn.Close()
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(queue, false, false, false)
			_ = ch.ExchangeDelete(exchange, false, false)
		}
	})
	publish(t, b, "orders", 5)
	sub, err := amqp.NewSubscriber(ctx(t), amqp.SubscriberConfig{Config: cfg, Queue: queue})
	testenv.Must(t, err, "subscriber")
	defer sub.Close()
	for i := range 5 {
		d, err := sub.Next(ctx(t))
		testenv.Must(t, err, "next")
		m, err := sub.Decode(d.Raw())
		testenv.Must(t, err, "decode")
		if m.Topic != "orders" || m.Payload[0] != byte(i) {
			t.Fatalf("delivery %d: %+v", i, m)
		}
		testenv.Must(t, d.Ack(ctx(t)), "ack")
	}

	// NoCreate: an exchange that does not exist is the message's failure,
	// not Open's.
	nb, err := brokerurl.Open(ctx(t), base+"?exchange="+exchange+"_none", brokerurl.Options{NoCreate: true})
	testenv.Must(t, err, "open without creating")
	defer nb.Close()
	errs := nb.Publish(ctx(t), []courier.Message{courier.NewMessage("orders", "k", "T", nil)})
	if !errors.Is(errs[0], amqp.ErrNoExchange) {
		t.Errorf("publish to a missing exchange: %v", errs[0])
	}
}

func TestOpenWebhook(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, err := webhook.VerifyMessage(r, secret)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		mu.Lock()
		got = append(got, m.Topic)
		mu.Unlock()
	}))
	defer srv.Close()
	t.Setenv("TEST_HOOK_SECRET", "whsec_YS1uZXdlci1rZXktb2YtMjQtYnl0ZXMh, "+secret) // rotation: a new key first
	b, err := brokerurl.Open(ctx(t), srv.URL+"/in", brokerurl.Options{WebhookSecretEnv: "TEST_HOOK_SECRET"})
	testenv.Must(t, err, "open")
	defer b.Close()
	if b.Kind() != "webhook" || b.String() != srv.URL+"/in" {
		t.Errorf("kind %q, String %q", b.Kind(), b.String())
	}
	publish(t, b, "orders", 2)
	publish(t, b, "payments", 1)
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, " ") != "orders orders payments" {
		t.Fatalf("endpoint received %q", got)
	}

	t.Setenv("TEST_HOOK_SECRET", "whsec_c2hvcnQ=")
	if _, err := brokerurl.Open(ctx(t), srv.URL, brokerurl.Options{WebhookSecretEnv: "TEST_HOOK_SECRET"}); err == nil ||
		!strings.Contains(err.Error(), "secret 1 has 5 bytes of key") || !strings.Contains(err.Error(), "(secrets from TEST_HOOK_SECRET)") || strings.Contains(err.Error(), "c2hvcnQ") {
		t.Errorf("short secret: %v", err)
	}
}

func TestOpenKafka(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(2))
	testenv.Must(t, err, "kfake")
	defer c.Close()
	raw := "kafka://" + strings.Join(c.ListenAddrs(), ",") + "?topic_prefix=shop."
	b, err := brokerurl.Open(ctx(t), raw, brokerurl.Options{})
	testenv.Must(t, err, "open")
	defer b.Close()
	if b.Kind() != "kafka" || b.String() != raw {
		t.Errorf("kind %q, String %q", b.Kind(), b.String())
	}
	if !broker.KeepsKeyOrder(b) {
		t.Error("the Kafka broker hides that its publisher keeps a key's order: the relay would not pipeline it")
	}
	cfg, err := kafka.ParseURL(raw)
	testenv.Must(t, err, "parse")
	adm, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	testenv.Must(t, err, "admin")
	defer adm.Close()
	testenv.Must(t, kafka.EnsureTopic(ctx(t), adm, cfg, "orders", kafka.TopicConfig{Partitions: 2}), "topic")
	sent := publish(t, b, "orders", 3)

	sub, err := kafka.NewSubscriber(ctx(t), kafka.SubscriberConfig{Config: cfg, Group: "billing", Topics: []string{"orders"}})
	testenv.Must(t, err, "subscriber")
	defer sub.Close()
	seen := map[[16]byte]bool{}
	for range sent {
		d, err := sub.Next(ctx(t))
		testenv.Must(t, err, "next")
		m, err := sub.Decode(d.Raw())
		testenv.Must(t, err, "decode")
		seen[m.ID] = m.Topic == "orders"
		testenv.Must(t, d.Ack(ctx(t)), "ack")
	}
	for _, m := range sent {
		if !seen[m.ID] {
			t.Errorf("message %s not received on topic orders", m.ID)
		}
	}
}

// Parse never shows a password or token, wherever it sits and whatever it
// holds, in the URL it keeps for messages (Where) or in its error; and it
// never panics, whatever it is given.
func FuzzParse(f *testing.F) {
	for _, s := range [][3]string{
		{"amqp", "guest", "rabbit:5672/shop?exchange=events"},
		{"amqp", "pa/ss", "rabbit/"},
		{"nats", "t0k#en", "nats:4222"},
		{"nats", "secret", "nats:4222?batch_time=4ms&atomic_batches=off"},
		{"kafka", "secret", "k1:9092,k2:9092?topic_prefix=shop."},
		{"https", "p?w", "hooks.example/in?token=abc"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	opts := brokerurl.Options{Flag: "--broker-url", WebhookSecrets: []string{secret}}
	f.Fuzz(func(t *testing.T, scheme, password, rest string) {
		_, _ = brokerurl.Parse(scheme+password+rest, opts)
		if len(password) < 4 || strings.Contains(password, "://") || strings.Trim(password, "x") == "" ||
			strings.Contains(rest, "@") || strings.ContainsAny(scheme, "@:/?#,") || !plain(scheme+password+rest) {
			return // messages quote with %q: keep to what it leaves as it is
		}
		web := strings.HasPrefix(strings.ToLower(scheme), "http")
		if web && strings.ContainsAny(password, "@/?#") {
			return // read as host:port and a path (internal/redact documents it)
		}
		forms := []func(pw string) string{func(pw string) string { return scheme + "://u:" + pw + "@" + rest }}
		switch strings.ToLower(scheme) {
		case "nats", "tls", "http", "https": // a user name alone is a token
			forms = append(forms, func(pw string) string { return scheme + "://" + pw + "@" + rest })
		}
		for _, form := range forms {
			raw, skeleton := form(password), form("xxxxx")
			u, err := brokerurl.Parse(raw, opts)
			shown := u.Where
			if err != nil {
				shown = err.Error()
			}
			if strings.Count(shown, password) > strings.Count(skeleton, password) {
				t.Fatalf("Parse(%q) shows the password %q: %q", raw, password, shown)
			}
		}
	})
}

// plain reports whether s is printable ASCII without quotes or backslashes.
func plain(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e || r == '"' || r == '\\' })
}
