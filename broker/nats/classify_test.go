package nats_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
)

// countRequests counts the requests published on subject whose payload
// contains about (every request when about is empty). A plain subscription
// sees them next to JetStream's own API responder; about keeps out the
// requests of other tests sharing the server.
func countRequests(t *testing.T, nc *natsgo.Conn, subject, about string) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	sub, err := nc.Subscribe(subject, func(m *natsgo.Msg) {
		if strings.Contains(string(m.Data), about) {
			n.Add(1)
		}
	})
	testenv.Must(t, err, "subscribe "+subject)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	testenv.Must(t, nc.Flush(), "flush")
	return &n
}

// A subject no stream binds is the message's problem, not the broker's: on
// the machine's NATS server and on the embedded one alike, Publish fails such
// a message with ErrNoStream naming the subject and the fix, publishes the
// others, and asks JetStream once per subject.
func TestUnboundSubjectCountsAgainstTheMessage(t *testing.T) {
	servers := map[string]func(t *testing.T) string{
		"machine":  func(t *testing.T) string { return testenv.NATS(t) },
		"embedded": func(t *testing.T) string { return testenv.EmbeddedNATS(t).ClientURL() },
	}
	for name, url := range servers {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			nc := testenv.Connect(t, url(t))
			stream := testenv.Name("T")
			mapping := couriernats.Config{SubjectPrefix: stream + "."}
			testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: stream, Subjects: []string{mapping.Subject("bound")}, Memory: true}), "ensure stream")
			t.Cleanup(func() { deleteStream(nc, stream) })
			pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping, AckTimeout: 2 * time.Second})
			testenv.Must(t, err, "publisher")
			lookups := countRequests(t, nc, "$JS.API.STREAM.NAMES", stream+".") // only this test's subjects

			msg := func(topic, key string) courier.Message { return courier.NewMessage(topic, key, "T", []byte(key)) }
			msgs := []courier.Message{msg("bound", "a"), msg("unbound", "b"), msg("bound", "c"), msg("unbound", "d"), msg("elsewhere", "e")}
			errs := pub.Publish(ctx, msgs)
			for i, m := range msgs {
				err := errs[i]
				if m.Topic == "bound" {
					if err != nil {
						t.Errorf("message on a bound subject: %v", err)
					}
					continue
				}
				subject := mapping.Subject(m.Topic)
				switch {
				case !errors.Is(err, couriernats.ErrNoStream) || errors.Is(err, broker.ErrUnavailable):
					t.Errorf("message on unbound subject %s: %v; want ErrNoStream and not ErrUnavailable", subject, err)
				case !strings.Contains(err.Error(), `"`+subject+`"`) || !strings.Contains(err.Error(), "bind a stream") || !strings.Contains(err.Error(), "topic"):
					t.Errorf("error %q should name the subject %s and say to bind a stream or check the topic", err, subject)
				}
			}
			wantLookups := func(want int64, why string) {
				t.Helper()
				testenv.Eventually(t, 2*time.Second, func() bool { return lookups.Load() >= want }, "saw %v stream lookups, want %d", testenv.Lazy(func() any { return lookups.Load() }), want)
				time.Sleep(50 * time.Millisecond)
				if n := lookups.Load(); n != want {
					t.Errorf("asked JetStream %d times, want %d: %s", n, want, why)
				}
			}
			wantLookups(3, "once per subject of the call")
			again := pub.Publish(ctx, msgs)
			if again[0] != nil || !errors.Is(again[1], couriernats.ErrNoStream) {
				t.Errorf("second call: %v", again)
			}
			wantLookups(5, "a subject a stream acknowledged is not asked about again")
			t.Logf("server %s: %v", nc.ConnectedServerVersion(), errs[1])
		})
	}
}

// A plain subscriber on a subject silences NATS's "no responders": the
// publish then times out. A subject without a stream still counts against
// the message, found out before publishing or, when the stream went away
// after it had acknowledged, after the timeout.
func TestUnboundSubjectWithListenerCountsAgainstTheMessage(t *testing.T) {
	ctx := context.Background()
	nc := testenv.Connect(t, testenv.EmbeddedNATS(t).ClientURL())
	mapping := couriernats.Config{}
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Subjects: []string{mapping.Subject("orders")}, Memory: true}), "ensure stream")
	tap, err := nc.SubscribeSync(mapping.Subjects())
	testenv.Must(t, err, "listen on every subject")
	t.Cleanup(func() { _ = tap.Unsubscribe() })
	testenv.Must(t, nc.Flush(), "flush")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{AckTimeout: 300 * time.Millisecond})
	testenv.Must(t, err, "publisher")

	msgs := []courier.Message{courier.NewMessage("orders", "a", "T", []byte("x")), courier.NewMessage("nowhere", "b", "T", []byte("x"))}
	errs := pub.Publish(ctx, msgs)
	if errs[0] != nil || !errors.Is(errs[1], couriernats.ErrNoStream) || errors.Is(errs[1], broker.ErrUnavailable) {
		t.Fatalf("publish with a listener: %v; want the bound subject acknowledged and ErrNoStream for the other", errs)
	}
	if _, err := tap.NextMsg(100 * time.Millisecond); err != nil {
		t.Fatalf("the bound message reached no listener: %v", err)
	}
	if m, err := tap.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("a message no stream takes was sent anyway: %s", m.Subject)
	}

	deleteStream(nc, couriernats.DefaultStream)
	if errs := pub.Publish(ctx, msgs[:1]); !errors.Is(errs[0], couriernats.ErrNoStream) || !strings.Contains(errs[0].Error(), `"courier.orders"`) {
		t.Fatalf("publish after the stream was deleted: %v; want ErrNoStream naming courier.orders", errs[0])
	}
}

func deleteStream(nc *natsgo.Conn, name string) {
	_, _ = nc.Request("$JS.API.STREAM.DELETE."+name, nil, 2*time.Second)
}

// startPlainNATS runs an in-process NATS server without JetStream, as a
// server whose JetStream is not (yet) there looks to a client.
func startPlainNATS(t *testing.T) *natsgo.Conn {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	testenv.Must(t, err, "new server")
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("plain nats server not ready")
	}
	return testenv.Connect(t, srv.ClientURL())
}

// Whenever JetStream cannot confirm that no stream binds the subject, a
// publish nobody answered is the broker's fault: no dead letters from
// outages.
func TestNoAnswerWithoutJetStreamIsUnavailable(t *testing.T) {
	ctx := context.Background()
	msgs := []courier.Message{
		courier.NewMessage("orders", "a", "T", []byte("x")),
		courier.NewMessage("payments", "b", "T", []byte("x")),
		courier.NewMessage("shipments", "c", "T", []byte("x")),
	}
	wantUnavailable := func(t *testing.T, errs []error, also string) {
		t.Helper()
		for i, err := range errs {
			if !errors.Is(err, broker.ErrUnavailable) || errors.Is(err, couriernats.ErrNoStream) {
				t.Errorf("message %d: %v; want ErrUnavailable, not ErrNoStream", i, err)
			} else if !strings.Contains(err.Error(), also) {
				t.Errorf("message %d: %q does not mention %q", i, err, also)
			}
		}
	}

	t.Run("JetStream off", func(t *testing.T) {
		nc := startPlainNATS(t)
		pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{AckTimeout: time.Second})
		testenv.Must(t, err, "publisher")
		wantUnavailable(t, pub.Publish(ctx, msgs), "is JetStream enabled")
	})

	t.Run("JetStream API silent", func(t *testing.T) {
		nc := startPlainNATS(t)
		asked := countRequests(t, nc, "$JS.API.>", "") // takes requests, never answers
		pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{AckTimeout: 300 * time.Millisecond})
		testenv.Must(t, err, "publisher")
		wantUnavailable(t, pub.Publish(ctx, msgs), "did not say which stream binds it")
		if n := asked.Load(); n != 1 {
			t.Errorf("%d stream lookups for 3 subjects while JetStream is silent, want 1 (then no more asking)", n)
		}
	})

	t.Run("server stopped", func(t *testing.T) {
		srv := testenv.EmbeddedNATS(t)
		nc, err := couriernats.Connect(srv.ClientURL())
		testenv.Must(t, err, "connect")
		t.Cleanup(nc.Close)
		testenv.Must(t, couriernats.EnsureStream(ctx, nc, couriernats.Config{}, couriernats.StreamConfig{}), "ensure stream")
		pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{AckTimeout: time.Second})
		testenv.Must(t, err, "publisher")
		if errs := pub.Publish(ctx, msgs[:1]); errs[0] != nil {
			t.Fatalf("publish before the stop: %v", errs[0])
		}
		srv.Shutdown()
		wantUnavailable(t, pub.Publish(ctx, msgs), "")
	})
}

// What the broker refuses for what the message is (its size, its headers,
// its subject) is refused for good: the error wraps broker.ErrRejected,
// gives the broker's reason and the fix, and the other messages of the call
// are published. A subject no stream binds stays a counted, not a
// permanent, failure: an operator may bind it.
func TestPermanentRejections(t *testing.T) {
	servers := map[string]func(t *testing.T) string{
		"machine":  func(t *testing.T) string { return testenv.NATS(t) },
		"embedded": func(t *testing.T) string { return testenv.EmbeddedNATS(t).ClientURL() },
	}
	for name, url := range servers {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			nc := testenv.Connect(t, url(t))
			stream := testenv.Name("T")
			mapping := couriernats.Config{SubjectPrefix: stream + "."}
			// Topic "small" goes to a stream that takes at most 1 KiB a
			// message, topic "large" to one without a limit.
			testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: stream, Subjects: []string{mapping.Subject("large")}, Memory: true}), "ensure stream")
			t.Cleanup(func() { deleteStream(nc, stream) })
			js, err := jetstream.New(nc)
			testenv.Must(t, err, "jetstream")
			_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: stream + "_SMALL", Subjects: []string{mapping.Subject("small")}, Storage: jetstream.MemoryStorage, MaxMsgSize: 1024})
			testenv.Must(t, err, "create the limited stream")
			t.Cleanup(func() { deleteStream(nc, stream+"_SMALL") })
			pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping, AckTimeout: 2 * time.Second})
			testenv.Must(t, err, "publisher")

			msg := func(topic, key string, size int, opts ...courier.Option) courier.Message {
				return courier.NewMessage(topic, key, "T", make([]byte, size), opts...)
			}
			cases := []struct {
				msg  courier.Message
				want []string // nil: published; else what the rejection says
			}{
				{msg("small", "fits", 100), nil},
				{msg("small", "over-stream-limit", 2048), []string{"maximum", "max_msg_size", "2048 bytes", `"` + mapping.Subject("small") + `"`, "replay"}},
				{msg("large", "over-server-limit", int(nc.MaxPayload())+1), []string{"maximum payload", "max_payload", fmt.Sprint(nc.MaxPayload()), "replay"}},
				{msg("large", "huge-headers", 10, courier.WithHeader("X-Big", strings.Repeat("h", 70<<10))), []string{"header", "64 KiB"}},
				{msg("large bad", "space", 10), []string{"not a valid NATS subject", "topic"}},
				{msg("large.", "trailing-dot", 10), []string{"not a valid NATS subject", "topic"}},
				{msg("unbound", "no-stream", 10), nil},
				{msg("large", "fits-too", 100_000), nil},
			}
			msgs := make([]courier.Message, len(cases))
			for i, c := range cases {
				msgs[i] = c.msg
			}
			errs := pub.Publish(ctx, msgs)
			for i, c := range cases {
				err := errs[i]
				switch {
				case c.msg.Topic == "unbound":
					if !errors.Is(err, couriernats.ErrNoStream) || errors.Is(err, broker.ErrRejected) || errors.Is(err, broker.ErrUnavailable) {
						t.Errorf("%s: %v; want ErrNoStream, neither permanent nor unavailable", c.msg.Key, err)
					}
				case c.want == nil:
					if err != nil {
						t.Errorf("%s: %v; want it published", c.msg.Key, err)
					}
				case !broker.Permanent(err):
					t.Errorf("%s: %v; want ErrRejected and not ErrUnavailable", c.msg.Key, err)
				default:
					for _, w := range c.want {
						if !strings.Contains(err.Error(), w) {
							t.Errorf("%s: %q does not say %q", c.msg.Key, err, w)
						}
					}
				}
			}
			t.Logf("server %s: %v; %v", nc.ConnectedServerVersion(), errs[1], errs[3])
		})
	}
}
