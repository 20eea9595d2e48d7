package nats_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/broker/nats/embedded"
	"github.com/courier-go/courier/internal/testenv"
)

func TestRoundTrip(t *testing.T) {
	cfg := couriernats.Config{}
	m := courier.NewMessage("orders", "注文-1", "OrderPlaced", []byte(`{"a":1}`),
		courier.WithContentType(courier.ContentTypeJSON), courier.WithVersion(3), courier.WithCorrelationID("c-1"))
	nm := cfg.ToNATS(&m)
	if nm.Subject != "courier.orders" || nm.Header.Get(jetstream.MsgIDHeader) != m.ID.String() {
		t.Fatalf("subject %q, msg id %q", nm.Subject, nm.Header.Get(jetstream.MsgIDHeader))
	}
	back, err := cfg.FromNATS(nm)
	testenv.Must(t, err, "decode")
	if back.ID != m.ID || back.Topic != m.Topic || back.Key != m.Key || back.Type != m.Type || back.Version != 3 ||
		back.ContentType != m.ContentType || string(back.Payload) != string(m.Payload) || !back.OccurredAt.Equal(m.OccurredAt) ||
		back.Headers[courier.HeaderCorrelationID] != "c-1" || len(back.Headers) != 1 {
		t.Fatalf("round trip: got %+v, want %+v", back, m)
	}
	if (couriernats.Config{NoPrefix: true}).Subject("orders") != "orders" {
		t.Fatal("NoPrefix ignored")
	}
	delete(nm.Header, couriernats.HeaderType)
	if _, err := cfg.FromNATS(nm); !errors.Is(err, couriernats.ErrMalformed) || !strings.Contains(err.Error(), couriernats.HeaderType) {
		t.Fatalf("missing type header: %v", err)
	}
}

func startNATS(t *testing.T) (*natsgo.Conn, jetstream.JetStream) {
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), NoSync: true})
	testenv.Must(t, err, "start")
	t.Cleanup(srv.Shutdown)
	nc, err := couriernats.Connect(srv.ClientURL())
	testenv.Must(t, err, "connect")
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	return nc, js
}

func TestPublishAcksAndErrorKinds(t *testing.T) {
	nc, js := startNATS(t)
	ctx := context.Background()
	cfg := couriernats.Config{}
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, cfg, couriernats.StreamConfig{}), "ensure")
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, cfg, couriernats.StreamConfig{}), "ensure again")
	_, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: couriernats.DefaultStream, Subjects: []string{"courier.>"}, MaxMsgSize: 4096})
	testenv.Must(t, err, "limit size")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{AckTimeout: time.Second})
	testenv.Must(t, err, "publisher")

	ok := courier.NewMessage("orders", "k", "T", []byte("fine"))
	tooBigForStream := courier.NewMessage("orders", "k2", "T", make([]byte, 8192))
	tooBigForServer := courier.NewMessage("orders", "k3", "T", make([]byte, 2<<20))
	noStream := courier.NewMessage("orders", "k4", "T", []byte("x")) // published below under a prefix no stream has
	errs := pub.Publish(ctx, []courier.Message{ok, tooBigForStream, tooBigForServer, ok})
	if errs[0] != nil || errs[3] != nil {
		t.Fatalf("good messages failed: %v", errs)
	}
	for _, i := range []int{1, 2} {
		if errs[i] == nil || errors.Is(errs[i], broker.ErrUnavailable) {
			t.Fatalf("oversized message %d: %v, want a message error", i, errs[i])
		}
	}
	info, err := js.Stream(ctx, couriernats.DefaultStream)
	testenv.Must(t, err, "stream")
	if st, _ := info.Info(ctx); st.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages, want 1: the repeated message must be deduplicated", st.State.Msgs)
	}

	other, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: couriernats.Config{SubjectPrefix: "nostream."}, AckTimeout: time.Second})
	testenv.Must(t, err, "publisher")
	if errs := other.Publish(ctx, []courier.Message{noStream}); !errors.Is(errs[0], couriernats.ErrNoStream) || errors.Is(errs[0], broker.ErrUnavailable) {
		t.Fatalf("publish with no stream: %v, want ErrNoStream, not ErrUnavailable", errs[0])
	}
	nc.Close()
	if errs := pub.Publish(ctx, []courier.Message{ok}); !errors.Is(errs[0], broker.ErrUnavailable) {
		t.Fatalf("publish on a closed connection: %v, want ErrUnavailable", errs[0])
	}
}

func TestEmbeddedNeedsDir(t *testing.T) {
	if _, err := embedded.Start(embedded.Config{}); err == nil || !strings.Contains(err.Error(), "Dir") {
		t.Fatalf("Start without Dir: %v", err)
	}
}

// FromNATS never panics, and whatever it accepts is a message the outbox
// would accept too (so a consumer can pass it on).
func FuzzFromNATS(f *testing.F) {
	good := couriernats.Config{}.ToNATS(&[]courier.Message{courier.NewMessage("orders", "k", "T", []byte("x"))}[0])
	f.Add("courier.orders", good.Header.Get("Nats-Msg-Id"), "k", "T", "1", good.Header.Get(couriernats.HeaderOccurredAt), []byte("x"))
	f.Add("courier.", "", "", "", "", "", []byte(nil))
	f.Add("courier.o", "not-a-uuid", "\x00", "T\r\nX: y", "-1", "yesterday", []byte("{"))
	f.Fuzz(func(t *testing.T, subject, id, key, typ, version, occurred string, data []byte) {
		h := natsgo.Header{}
		for name, v := range map[string]string{"Nats-Msg-Id": id, couriernats.HeaderKey: key, couriernats.HeaderType: typ,
			couriernats.HeaderVersion: version, couriernats.HeaderOccurredAt: occurred} {
			if v != "" {
				h.Set(name, v)
			}
		}
		m, err := couriernats.Config{}.FromNATS(&natsgo.Msg{Subject: subject, Header: h, Data: data})
		if err != nil {
			if !errors.Is(err, courier.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if m.Key != key || m.Type != typ || string(m.Payload) != string(data) {
			t.Fatalf("decoded %+v from key %q type %q", m, key, typ)
		}
	})
}
