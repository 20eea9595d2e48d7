package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/brokertest"
	"github.com/courier-go/courier/broker/kafka"
	"github.com/courier-go/courier/internal/testenv"
)

func TestMain(m *testing.M) {
	brokertest.Child(openShared) // an instance of the pause sweep's consumer
	goleak.VerifyTestMain(testenv.M(m))
}

// features are what Kafka promises through this package, as its
// documentation (Features) states.
var features = brokertest.Features{
	PerKeyOrder:      true,
	OversizeBytes:    kafka.DefaultMaxMessageBytes + 1,
	OversizeRejected: true,
}

// cluster starts an in-process Kafka cluster (kfake speaks the real
// protocol) with three brokers, closed when the test ends.
func cluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(3), kfake.DefaultNumPartitions(4)}, opts...)...)
	testenv.Must(t, err, "start kfake")
	t.Cleanup(c.Close)
	return c
}

// admin returns a client on c for creating topics.
func admin(t testing.TB, c *kfake.Cluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	testenv.Must(t, err, "admin client")
	t.Cleanup(cl.Close)
	return cl
}

func publisher(t testing.TB, cfg kafka.PublisherConfig) *kafka.Publisher {
	t.Helper()
	p, err := kafka.NewPublisher(cfg)
	testenv.Must(t, err, "publisher")
	t.Cleanup(p.Close)
	return p
}

func subscriber(t testing.TB, cfg kafka.SubscriberConfig) *kafka.Subscriber {
	t.Helper()
	s, err := kafka.NewSubscriber(context.Background(), cfg)
	testenv.Must(t, err, "subscriber")
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// The conformance suite on one kfake cluster, a topic and a consumer group
// of its own per test.
func TestConformance(t *testing.T) {
	// Sessions as short as the pause sweep's timing.
	c := cluster(t, kfake.GroupMinSessionTimeout(shortTiming.Timeout))
	adm := admin(t, c)
	brokertest.Run(t, brokertest.Harness{
		Features: features,
		New: func(t testing.TB) brokertest.Instance {
			cfg := kafka.Config{Brokers: c.ListenAddrs(), TopicPrefix: testenv.Name("bt") + "."}
			testenv.Must(t, kafka.EnsureTopic(context.Background(), adm, cfg, "orders", kafka.TopicConfig{Partitions: 4}), "create topic")
			group := testenv.Name("g")
			shared := sharedRecipe{Config: cfg, Group: group + "-shared"}
			raw, err := json.Marshal(shared)
			testenv.Must(t, err, "recipe")
			return brokertest.Instance{
				Topic:     "orders",
				Publisher: publisher(t, kafka.PublisherConfig{Config: cfg}),
				Subscribe: func(t testing.TB) broker.Subscriber {
					return subscriber(t, kafka.SubscriberConfig{Config: cfg, Group: group, Topics: []string{"orders"}})
				},
				Unreachable: func(t testing.TB) broker.Publisher { return killed(t) },
				SubscribeShared: func(t testing.TB) broker.Subscriber {
					return subscriber(t, kafka.SubscriberConfig{Config: cfg, Group: shared.Group, Topics: []string{"orders"}})
				},
				SharedRecipe: string(raw),
				BrokerAddrs:  cfg.Brokers,
			}
		},
		// kgo's defaults: a heartbeat every 3s, a session of 45s.
		Timing:      brokertest.Timing{Heartbeat: 3 * time.Second, Timeout: 45 * time.Second},
		ShortTiming: shortTiming,
		Long:        testenv.Long(),
	})
}

// shortTiming is the consumer group's heartbeat interval and session
// timeout in the pause sweep by default.
var shortTiming = brokertest.Timing{Heartbeat: 250 * time.Millisecond, Timeout: 1250 * time.Millisecond}

// sharedRecipe describes the conformance suite's consumer group, for an
// instance that runs as a process of its own.
type sharedRecipe struct {
	Config kafka.Config
	Group  string
}

// openShared opens an instance of the consumer group p describes, in a
// process of its own, with p's timing, dialling the brokers where p says.
func openShared(ctx context.Context, p brokertest.Process) (broker.Subscriber, error) {
	var r sharedRecipe
	if err := json.Unmarshal([]byte(p.Recipe), &r); err != nil {
		return nil, err
	}
	var d net.Dialer
	return kafka.NewSubscriber(ctx, kafka.SubscriberConfig{Config: r.Config, Group: r.Group, Topics: []string{"orders"},
		Options: []kgo.Opt{
			// The rebalance timeout in kgo's proportion to the session
			// (60s to 45s).
			kgo.SessionTimeout(p.Timing.Timeout), kgo.HeartbeatInterval(p.Timing.Heartbeat), kgo.RebalanceTimeout(p.Timing.Timeout * 4 / 3),
			kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
				return d.DialContext(ctx, network, p.Addr(host))
			}),
		}})
}

// killed returns a publisher that has published to a cluster since closed.
func killed(t testing.TB) broker.Publisher {
	c := cluster(t)
	cfg := kafka.Config{Brokers: c.ListenAddrs()}
	testenv.Must(t, kafka.EnsureTopic(context.Background(), admin(t, c), cfg, "orders", kafka.TopicConfig{Partitions: 2}), "create topic")
	p := publisher(t, kafka.PublisherConfig{Config: cfg, AckTimeout: 3 * time.Second})
	ctx := context.Background()
	for _, err := range p.Publish(ctx, []courier.Message{courier.NewMessage("orders", "a", "T", []byte("x"))}) {
		testenv.Must(t, err, "publish before the cluster goes")
	}
	c.Close()
	return p
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url     string
		brokers []string
		prefix  string
		err     string
	}{
		{url: "kafka://h1:9092,h2:9093?topic_prefix=shop.", brokers: []string{"h1:9092", "h2:9093"}, prefix: "shop."},
		{url: "kafka://localhost", brokers: []string{"localhost:9092"}},
		{url: "kafka://[::1]:9092,[::2]", brokers: []string{"[::1]:9092", "[::2]:9092"}},
		{url: "nats://h:4222", err: "scheme"},
		{url: "kafka://", err: "no broker"},
		{url: "kafka://h/orders", err: "path"},
		{url: "kafka://h?group=x", err: `unknown parameter "group"`},
	} {
		cfg, err := kafka.ParseURL(tc.url)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseURL(%q): %v, want an error saying %q", tc.url, err, tc.err)
			}
			continue
		}
		if err != nil || strings.Join(cfg.Brokers, " ") != strings.Join(tc.brokers, " ") || cfg.TopicPrefix != tc.prefix {
			t.Errorf("ParseURL(%q) = %+v, %v; want brokers %v prefix %q", tc.url, cfg, err, tc.brokers, tc.prefix)
		}
	}
}

func TestRecordRoundTrip(t *testing.T) {
	cfg := kafka.Config{TopicPrefix: "shop."}
	m := courier.NewMessage("orders", "注文-1", "OrderPlaced", []byte(`{"a":1}`),
		courier.WithContentType(courier.ContentTypeJSON), courier.WithVersion(3), courier.WithCorrelationID("c-1"))
	r := cfg.ToRecord(&m)
	if r.Topic != "shop.orders" || string(r.Key) != m.Key {
		t.Fatalf("record topic %q key %q", r.Topic, r.Key)
	}
	back, err := cfg.FromRaw(kafka.Raw(r))
	testenv.Must(t, err, "decode")
	if back.ID != m.ID || back.Topic != "orders" || back.Key != m.Key || back.Version != 3 || back.Headers[courier.HeaderCorrelationID] != "c-1" || len(back.Headers) != 1 {
		t.Fatalf("round trip: %+v", back)
	}
	// A record of another producer without Courier-Key decodes with its
	// record key; one without Courier-Id is malformed.
	r.Headers = r.Headers[:1]
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: kafka.HeaderType, Value: []byte("T")}, kgo.RecordHeader{Key: kafka.HeaderVersion, Value: []byte("1")},
		kgo.RecordHeader{Key: kafka.HeaderOccurredAt, Value: []byte(time.Now().Format(time.RFC3339))})
	if back, err := cfg.FromRaw(kafka.Raw(r)); err != nil || back.Key != m.Key {
		t.Fatalf("record without Courier-Key: %+v, %v", back, err)
	}
	r.Headers = r.Headers[1:]
	if _, err := cfg.FromRaw(kafka.Raw(r)); !errors.Is(err, courier.ErrMalformed) || !strings.Contains(err.Error(), kafka.HeaderID) {
		t.Fatalf("record without Courier-Id: %v", err)
	}
}

// A record's time must be one RFC 3339 writes again in UTC: an offset past
// ±23:59, or a time past the year 9999 in UTC, is malformed, not a message
// that a consumer could not pass on.
func TestRecordTimeWritable(t *testing.T) {
	cfg := kafka.Config{}
	m := courier.NewMessage("orders", "k", "T", nil)
	for _, at := range []string{"2026-11-30T12:00:00+24:00", "9999-12-31T23:59:59-23:59"} {
		r := cfg.ToRecord(&m)
		for i := range r.Headers {
			if r.Headers[i].Key == kafka.HeaderOccurredAt {
				r.Headers[i].Value = []byte(at)
			}
		}
		if _, err := cfg.FromRaw(kafka.Raw(r)); !errors.Is(err, courier.ErrMalformed) || !strings.Contains(err.Error(), kafka.HeaderOccurredAt) {
			t.Errorf("occurred at %s: %v; want ErrMalformed naming %s", at, err, kafka.HeaderOccurredAt)
		}
	}
}
