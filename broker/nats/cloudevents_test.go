package nats_test

import (
	"context"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/internal/cetest"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
)

// TestCloudEvents publishes with CloudEvents on, reads the raw message on a
// plain subscription and decodes it with the CloudEvents Go SDK; Courier's
// decoder still reads it as before, and reads it without Courier's headers.
func TestCloudEvents(t *testing.T) {
	nc, _ := startNATS(t)
	ctx := context.Background()
	cfg := couriernats.Config{}
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, cfg, couriernats.StreamConfig{}), "ensure")
	sub, err := nc.SubscribeSync(cfg.Subjects())
	testenv.Must(t, err, "subscribe")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{CloudEvents: &cloudevents.Config{Source: "/shop/orders"}})
	testenv.Must(t, err, "publisher")
	m := courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"total":7}`),
		courier.WithContentType(courier.ContentTypeJSON), courier.WithVersion(3), courier.WithCorrelationID("c-1"))
	if errs := pub.Publish(ctx, []courier.Message{m}); errs[0] != nil {
		t.Fatalf("publish: %v", errs[0])
	}
	raw, err := sub.NextMsg(5 * time.Second)
	testenv.Must(t, err, "receive")

	headers := map[string]string{}
	for k, vs := range raw.Header {
		headers[k] = vs[0]
	}
	e, err := cetest.Event(&cetest.Message{Prefix: cloudevents.PrefixNATS, Headers: headers,
		ContentType: raw.Header.Get(cloudevents.ContentTypeHeader), Data: raw.Data})
	testenv.Must(t, err, "SDK")
	if d := cetest.Diff(e, m, "/shop/orders"); len(d) > 0 {
		t.Fatalf("event %v:\n%s", e, strings.Join(d, "\n"))
	}

	back, err := cfg.FromNATS(raw)
	testenv.Must(t, err, "decode")
	if d := cetest.SameMessage(back, m); d != "" {
		t.Fatal(d)
	}

	ceOnly := &natsgo.Msg{Subject: raw.Subject, Header: natsgo.Header{}, Data: raw.Data}
	for k, vs := range raw.Header {
		switch k {
		case couriernats.HeaderKey, couriernats.HeaderType, couriernats.HeaderVersion, couriernats.HeaderOccurredAt,
			couriernats.HeaderContentType, "Nats-Msg-Id":
		default:
			ceOnly.Header[k] = vs
		}
	}
	back, err = cfg.FromNATS(ceOnly)
	testenv.Must(t, err, "decode CloudEvents alone")
	if d := cetest.SameMessage(back, m); d != "" {
		t.Fatal(d)
	}
}

func TestCloudEventsNeedsSource(t *testing.T) {
	nc, _ := startNATS(t)
	_, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{CloudEvents: &cloudevents.Config{}})
	if err == nil || !strings.Contains(err.Error(), "PublisherConfig.CloudEvents.Source") {
		t.Fatalf("got %v, want an error naming PublisherConfig.CloudEvents.Source", err)
	}
}
