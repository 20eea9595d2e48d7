package kafka_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/internal/cetest"
	"github.com/courier-go/courier/broker/kafka"
	"github.com/courier-go/courier/internal/testenv"
)

// TestCloudEvents publishes with CloudEvents on, consumes the raw record
// and decodes it with the CloudEvents Go SDK (read as the SDK's Kafka
// bindings read a record); Courier's decoder still reads it as before, and
// reads it without Courier's headers.
func TestCloudEvents(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	cfg := kafka.Config{Brokers: c.ListenAddrs()}
	testenv.Must(t, kafka.EnsureTopic(ctx, admin(t, c), cfg, "orders", kafka.TopicConfig{Partitions: 1}), "create topic")
	pub := publisher(t, kafka.PublisherConfig{Config: cfg, CloudEvents: &cloudevents.Config{Source: "/shop/orders"}})
	m := courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"total":7}`),
		courier.WithContentType(courier.ContentTypeJSON), courier.WithVersion(3), courier.WithCorrelationID("c-1"))
	if errs := pub.Publish(ctx, []courier.Message{m}); errs[0] != nil {
		t.Fatalf("publish: %v", errs[0])
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("orders"))
	testenv.Must(t, err, "consumer")
	defer cl.Close()
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var rec *kgo.Record
	for rec == nil && fctx.Err() == nil {
		cl.PollFetches(fctx).EachRecord(func(r *kgo.Record) { rec = r })
	}
	if rec == nil {
		t.Fatal("no record")
	}

	// As the SDK's Kafka bindings do: header names in lower case, the
	// content type from the content-type header.
	headers := map[string]string{}
	for _, h := range rec.Headers {
		headers[strings.ToLower(h.Key)] = string(h.Value)
	}
	e, err := cetest.Event(&cetest.Message{Prefix: cloudevents.PrefixKafka, Headers: headers,
		ContentType: headers[cloudevents.ContentTypeHeader], Data: rec.Value})
	testenv.Must(t, err, "SDK")
	if d := cetest.Diff(e, m, "/shop/orders"); len(d) > 0 {
		t.Fatalf("event %v:\n%s", e, strings.Join(d, "\n"))
	}

	back, err := cfg.FromRaw(kafka.Raw(rec))
	testenv.Must(t, err, "decode")
	if d := cetest.SameMessage(back, m); d != "" {
		t.Fatal(d)
	}

	ceOnly := *rec
	ceOnly.Headers = nil
	for _, h := range rec.Headers {
		if !strings.HasPrefix(h.Key, "Courier-") || h.Key == courier.HeaderCorrelationID {
			ceOnly.Headers = append(ceOnly.Headers, h)
		}
	}
	back, err = cfg.FromRaw(kafka.Raw(&ceOnly))
	testenv.Must(t, err, "decode CloudEvents alone")
	if d := cetest.SameMessage(back, m); d != "" {
		t.Fatal(d)
	}
}

func TestCloudEventsNeedsSource(t *testing.T) {
	_, err := kafka.NewPublisher(kafka.PublisherConfig{Config: kafka.Config{Brokers: []string{"127.0.0.1:9"}}, CloudEvents: &cloudevents.Config{}})
	if err == nil || !strings.Contains(err.Error(), "PublisherConfig.CloudEvents.Source") {
		t.Fatalf("got %v, want an error naming PublisherConfig.CloudEvents.Source", err)
	}
}
