package amqp_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/internal/cetest"
	"github.com/courier-go/courier/internal/testenv"
)

// TestCloudEvents publishes with CloudEvents on, takes the raw message off
// a queue with basic.get and decodes it with the CloudEvents Go SDK (read
// as the SDK's AMQP binding reads a message: application properties and
// the content-type property); Courier's decoder still reads it as before,
// and reads it without Courier's headers, with either prefix.
func TestCloudEvents(t *testing.T) {
	cfg, q := setup(t, amqp.Topology{Queue: "ce", Topics: []string{"orders"}})
	pub, err := amqp.NewPublisher(amqp.PublisherConfig{Config: cfg, CloudEvents: &cloudevents.Config{Source: "/shop/orders"}})
	testenv.Must(t, err, "publisher")
	t.Cleanup(func() { _ = pub.Close() })
	m := courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"total":7}`),
		courier.WithContentType(courier.ContentTypeJSON), courier.WithVersion(3), courier.WithCorrelationID("c-1"))
	mustPublish(t, pub, []courier.Message{m})

	var d amqp091.Delivery
	testenv.Eventually(t, 10*time.Second, func() bool {
		var ok bool
		withChannel(t, cfg, func(ch *amqp091.Channel) error {
			var err error
			d, ok, err = ch.Get(q, true)
			return err
		})
		return ok
	}, "basic.get on %s", q)

	props := map[string]string{}
	for k, v := range d.Headers {
		props[k] = fmt.Sprint(v)
	}
	e, err := cetest.Event(&cetest.Message{Prefix: cloudevents.PrefixAMQP, Headers: props, ContentType: d.ContentType, Data: d.Body})
	testenv.Must(t, err, "SDK")
	if diff := cetest.Diff(e, m, "/shop/orders"); len(diff) > 0 {
		t.Fatalf("event %v:\n%s", e, strings.Join(diff, "\n"))
	}

	raw := broker.Raw{Subject: d.RoutingKey, Data: d.Body, Headers: map[string][]string{
		amqp.RawMessageID: {d.MessageId}, amqp.RawType: {d.Type}, amqp.RawContentType: {d.ContentType},
	}}
	for k, v := range props {
		raw.Headers[k] = []string{v}
	}
	back, err := cfg.Decode(raw)
	testenv.Must(t, err, "decode")
	if d := cetest.SameMessage(back, m); d != "" {
		t.Fatal(d)
	}

	// Without Courier's headers and properties but content-type, as a
	// CloudEvents producer sends it, with each of the binding's prefixes.
	for _, prefix := range []string{cloudevents.PrefixAMQP, cloudevents.PrefixAMQPUnderscore} {
		ceOnly := broker.Raw{Subject: d.RoutingKey, Data: d.Body, Headers: map[string][]string{amqp.RawContentType: {d.ContentType}}}
		for k, v := range props {
			switch {
			case k == amqp.HeaderKey, k == amqp.HeaderVersion, k == amqp.HeaderOccurredAt:
			case strings.HasPrefix(k, cloudevents.PrefixAMQP):
				ceOnly.Headers[prefix+strings.TrimPrefix(k, cloudevents.PrefixAMQP)] = []string{v}
			default:
				ceOnly.Headers[k] = []string{v}
			}
		}
		back, err = cfg.Decode(ceOnly)
		testenv.Must(t, err, "decode CloudEvents alone, prefix "+prefix)
		if d := cetest.SameMessage(back, m); d != "" {
			t.Fatal(d)
		}
	}
}

func TestCloudEventsNeedsSource(t *testing.T) {
	_, err := amqp.NewPublisher(amqp.PublisherConfig{Config: amqp.Config{URL: "amqp://127.0.0.1:9/"}, CloudEvents: &cloudevents.Config{}})
	if err == nil || !strings.Contains(err.Error(), "PublisherConfig.CloudEvents.Source") {
		t.Fatalf("got %v, want an error naming PublisherConfig.CloudEvents.Source", err)
	}
}
