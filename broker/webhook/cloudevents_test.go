package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/internal/cetest"
	"github.com/courier-go/courier/broker/webhook"
)

// TestCloudEvents publishes with CloudEvents on to a server that decodes
// each request with the CloudEvents Go SDK's HTTP binding: in the default
// mode the signed body is the event in the JSON format (structured content
// mode) and a Handler behind the server receives the message as before; in
// raw mode the attributes are headers (binary content mode), which the
// SDK reads too.
func TestCloudEvents(t *testing.T) {
	for _, mode := range []webhook.BodyMode{webhook.BodyEnvelope, webhook.BodyRaw} {
		t.Run(mode.String(), func(t *testing.T) {
			secret := newSecret(t)
			h, err := webhook.NewHandler(webhook.HandlerConfig{VerifierConfig: webhook.VerifierConfig{Secrets: []string{secret}}, Wait: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = h.Close() })
			events := make(chan binding.Message, 1)
			contentTypes := make(chan string, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(r.Body)
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				sdkReq := r.Clone(r.Context())
				sdkReq.Body = io.NopCloser(bytes.NewReader(body))
				events <- cehttp.NewMessageFromHttpRequest(sdkReq)
				contentTypes <- r.Header.Get("Content-Type")
				if mode == webhook.BodyRaw {
					w.WriteHeader(http.StatusNoContent)
					return
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
				h.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)
			p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: srv.URL, Secrets: []string{secret}, Timeout: 5 * time.Second, Body: mode,
				CloudEvents: &cloudevents.Config{Source: "https://shop.example.com/orders"}})

			m := msg("order-42")
			m.Version = 3
			m.SetHeader(courier.HeaderCorrelationID, "c-1")
			res := publishAsync(p, m)
			if mode == webhook.BodyEnvelope {
				d, got := nextDelivery(t, h)
				if err := d.Ack(context.Background()); err != nil {
					t.Fatal(err)
				}
				if d := cetest.SameMessage(got, m); d != "" {
					t.Fatalf("handler: %s", d)
				}
			}
			if err := <-res; err != nil {
				t.Fatalf("publish: %v", err)
			}
			wantCT := map[webhook.BodyMode]string{webhook.BodyEnvelope: cloudevents.MediaTypeJSON, webhook.BodyRaw: m.ContentType}[mode]
			if ct := <-contentTypes; ct != wantCT {
				t.Errorf("Content-Type %q, want %q", ct, wantCT)
			}
			e, err := cetest.Event(<-events)
			if err != nil {
				t.Fatalf("SDK: %v", err)
			}
			if diff := cetest.Diff(e, m, "https://shop.example.com/orders"); len(diff) > 0 {
				t.Fatalf("event %v:\n%s", e, strings.Join(diff, "\n"))
			}
		})
	}
}

func TestCloudEventsConfig(t *testing.T) {
	_, err := webhook.NewPublisher(webhook.PublisherConfig{DefaultEndpoint: "http://127.0.0.1:9/", Secrets: []string{newSecret(t)},
		CloudEvents: &cloudevents.Config{}})
	if err == nil || !strings.Contains(err.Error(), "PublisherConfig.CloudEvents.Source") {
		t.Fatalf("got %v, want an error naming PublisherConfig.CloudEvents.Source", err)
	}
	// In raw mode, a message header that would be an attribute is refused.
	p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: "http://127.0.0.1:9/", Body: webhook.BodyRaw, CloudEvents: &cloudevents.Config{Source: "/shop"}})
	m := msg("k")
	m.SetHeader("ce-source", "/elsewhere")
	if err := publishOne(t, p, m); !errors.Is(err, broker.ErrRejected) || !strings.Contains(err.Error(), "ce-source") {
		t.Fatalf("got %v, want a rejection naming ce-source", err)
	}
}
