package shop

import (
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/webhook"
	"github.com/courier-go/courier/internal/testenv"
)

// A topic consumed by two services reaches both: the webhook transport's
// fan-out POSTs each message to every consumer's endpoint, in order per
// key, and a topic nobody consumes fails with an error naming it.
func TestWebhookFanout(t *testing.T) {
	secret := NewWebhookSecret()
	f := &fanout{routes: map[string][]*webhook.Publisher{}}
	got := make([]chan string, 2)
	for i := range got {
		h, err := webhook.NewHandler(webhook.HandlerConfig{VerifierConfig: webhook.VerifierConfig{Secrets: []string{secret}}})
		testenv.Must(t, err, "handler")
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		t.Cleanup(func() { _ = h.Close() })
		got[i] = make(chan string, 10)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				d, err := h.Next(ctx)
				if err != nil {
					return
				}
				m, err := h.Decode(d.Raw())
				testenv.Must(t, err, "decode")
				got[i] <- string(m.Payload)
				_ = d.Ack(ctx)
			}
		}()
		t.Cleanup(func() { cancel(); <-done })
		p, err := webhook.NewPublisher(webhook.PublisherConfig{Endpoints: map[string]string{"news": srv.URL}, Secrets: []string{secret}, Client: srv.Client()})
		testenv.Must(t, err, "publisher")
		f.routes["news"] = append(f.routes["news"], p)
	}
	var msgs []courier.Message
	for _, body := range []string{"1", "2", "3"} {
		msgs = append(msgs, courier.NewMessage("news", "k", "Note", []byte(body)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, err := range f.Publish(ctx, msgs) {
		testenv.Must(t, err, "publish "+string(msgs[i].Payload))
	}
	for i, ch := range got {
		var bodies []string
		for range msgs {
			bodies = append(bodies, <-ch)
		}
		if !slices.Equal(bodies, []string{"1", "2", "3"}) {
			t.Errorf("consumer %d received %v, want 1 2 3 in order", i, bodies)
		}
	}

	lost := courier.NewMessage("gossip", "k", "Note", []byte("x"))
	if err := f.Publish(ctx, []courier.Message{lost})[0]; err == nil || !strings.Contains(err.Error(), `"gossip"`) {
		t.Errorf("a message of a topic nobody consumes: %v; want an error naming the topic", err)
	}
}
