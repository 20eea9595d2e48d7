package nats_test

import (
	"context"
	"encoding/json"
	neturl "net/url"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/brokertest"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
)

// ackWait is the consumers' AckWait in the conformance suite: JetStream
// redelivers an unacknowledged message after it.
const ackWait = time.Second

// features are what JetStream promises, as package nats documents them:
// Nats-Msg-Id deduplication within the stream's window, per-key order (one
// stream, one publisher, acknowledgements in order), a payload over the
// server's max_payload refused for good by the client, redelivery after
// AckWait counted by the server.
func features(maxPayload int64) brokertest.Features {
	return brokertest.Features{
		Dedup:                true,
		PerKeyOrder:          true,
		OversizeBytes:        int(maxPayload) + 1,
		OversizeRejected:     true,
		RedeliversAfter:      ackWait,
		AttemptsSurviveClose: true,
	}
}

// The conformance suite on the machine's NATS server (embedded when
// COURIER_TEST_NATS_URL is unset), a stream of its own per test.
func TestConformance(t *testing.T) {
	conformance(t, testenv.NATSOrEmbedded(t), stoppedServer, false)
}

// The conformance suite on a current nats-server, run as a process of the
// test (COURIER_TEST_NATS_SERVER); unreachable is that process killed.
// EnsureStream creates its streams with atomic batches allowed, so the
// publisher keeps a key's order when pipelined and PipelinedKeyOrder runs.
// Its messages carry their keys in their subjects (Config.KeySubjects), and
// SharedKeys runs on subscribers with Partitions.
func TestConformanceCurrentServer(t *testing.T) {
	srv := testenv.StartNATSServer(t, testenv.NATSServerConfig{})
	conformance(t, srv.URL, func(t testing.TB) broker.Publisher {
		dead := testenv.StartNATSServer(t, testenv.NATSServerConfig{})
		nc, err := couriernats.Connect(dead.URL, natsgo.MaxReconnects(-1))
		testenv.Must(t, err, "connect")
		t.Cleanup(nc.Close)
		testenv.Must(t, couriernats.EnsureStream(context.Background(), nc, couriernats.Config{}, couriernats.StreamConfig{}), "ensure stream")
		pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{AckTimeout: time.Second})
		testenv.Must(t, err, "publisher")
		dead.Kill()
		return pub
	}, true)
}

// conformance runs the suite on the server at url, a stream of its own per
// test; unreachable gives a publisher whose server has gone. With
// keySubjects, messages carry their keys in their subjects, and subscribers
// with Partitions share them.
func conformance(t *testing.T, url string, unreachable func(testing.TB) broker.Publisher, keySubjects bool) {
	nc := testenv.Connect(t, url)
	brokertest.Run(t, brokertest.Harness{
		Features: features(nc.MaxPayload()),
		New: func(t testing.TB) brokertest.Instance {
			ctx := context.Background()
			stream := testenv.Name("BT")
			mapping := couriernats.Config{SubjectPrefix: stream + ".", KeySubjects: keySubjects}
			testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: stream, Memory: true}), "ensure stream")
			t.Cleanup(func() { deleteStream(nc, stream) })
			pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping, AckTimeout: 5 * time.Second})
			testenv.Must(t, err, "publisher")
			in := brokertest.Instance{
				Topic:     "orders",
				Publisher: pub,
				Subscribe: func(t testing.TB) broker.Subscriber {
					s, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{
						Config: mapping, Stream: stream, Consumer: "brokertest", AckWait: ackWait,
					})
					testenv.Must(t, err, "subscriber")
					t.Cleanup(func() { _ = s.Close() })
					return s
				},
				Stored: func(t testing.TB) []courier.Message {
					return testenv.StreamMessages(t, nc, stream, mapping)
				},
				Unreachable: unreachable,
			}
			if keySubjects {
				shared := sharedRecipe{URL: url, Stream: stream}
				in.SubscribeShared = func(t testing.TB) broker.Subscriber {
					s, err := couriernats.NewSubscriber(ctx, nc, shared.config(brokertest.Timing{Heartbeat: 200 * time.Millisecond, Timeout: 2 * time.Second}))
					testenv.Must(t, err, "subscriber sharing keys")
					t.Cleanup(func() { _ = s.Close() })
					return s
				}
				raw, err := json.Marshal(shared)
				testenv.Must(t, err, "recipe")
				in.SharedRecipe = string(raw)
				in.BrokerAddrs = []string{hostPort(t, url)}
			}
			return in
		},
		Timing:      brokertest.Timing{Heartbeat: couriernats.DefaultMemberHeartbeat, Timeout: couriernats.DefaultMemberTimeout},
		ShortTiming: brokertest.Timing{Heartbeat: 250 * time.Millisecond, Timeout: 1250 * time.Millisecond},
		Long:        testenv.Long(),
	})
}

// sharedRecipe describes the conformance suite's consumer that shares
// keys, for an instance that runs as a process of its own.
type sharedRecipe struct {
	URL    string // the server
	Stream string // the stream, and the prefix of its subjects
}

// config is the consumer's, with timing. Its partitions' pulls hold few
// deliveries, so that one that stalls overflows them (see Key partitions
// in the package documentation).
func (r sharedRecipe) config(timing brokertest.Timing) couriernats.SubscriberConfig {
	return couriernats.SubscriberConfig{
		Config: couriernats.Config{SubjectPrefix: r.Stream + ".", KeySubjects: true}, Stream: r.Stream, Consumer: "shared",
		Topics: []string{"orders"}, AckWait: ackWait, Prefetch: 10, Partitions: 6,
		MemberHeartbeat: timing.Heartbeat, MemberTimeout: timing.Timeout,
	}
}

// openShared opens an instance of the consumer p describes, in a process
// of its own.
func openShared(ctx context.Context, p brokertest.Process) (broker.Subscriber, error) {
	var r sharedRecipe
	if err := json.Unmarshal([]byte(p.Recipe), &r); err != nil {
		return nil, err
	}
	u, err := neturl.Parse(r.URL)
	if err != nil {
		return nil, err
	}
	u.Host = p.Addr(u.Host)
	nc, err := couriernats.Connect(u.String())
	if err != nil {
		return nil, err
	}
	sub, err := couriernats.NewSubscriber(ctx, nc, r.config(p.Timing))
	if err != nil {
		nc.Close()
		return nil, err
	}
	return testenv.Closing{Subscriber: sub, Also: nc.Close}, nil
}

// hostPort returns the host:port of url.
func hostPort(t testing.TB, url string) string {
	u, err := neturl.Parse(url)
	testenv.Must(t, err, "parse "+url)
	return u.Host
}

// stoppedServer returns a publisher connected to an embedded server that
// has then been shut down.
func stoppedServer(t testing.TB) broker.Publisher {
	srv := testenv.EmbeddedNATS(t)
	nc, err := couriernats.Connect(srv.ClientURL(), natsgo.MaxReconnects(-1))
	testenv.Must(t, err, "connect")
	t.Cleanup(nc.Close)
	testenv.Must(t, couriernats.EnsureStream(context.Background(), nc, couriernats.Config{}, couriernats.StreamConfig{Memory: true}), "ensure stream")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{AckTimeout: time.Second})
	testenv.Must(t, err, "publisher")
	srv.Shutdown()
	return pub
}
