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

// Each service's endpoint has a secret of its own and takes only the
// topics its service consumes: a request signed for the payment endpoint
// is refused at inventory's (401), and one of the orders topic, signed
// with the payment endpoint's secret, at the payment endpoint (403).
func TestWebhookEndpointsApart(t *testing.T) {
	tr, err := NewWebhookTransport(WebhookConfig{})
	testenv.Must(t, err, "transport")
	testenv.Must(t, tr.Setup(context.Background()), "setup")
	t.Cleanup(func() { _ = tr.Close() })
	link, err := tr.Open(context.Background(), Payment, "", nil)
	testenv.Must(t, err, "open payment")
	t.Cleanup(func() { _ = link.Close() })
	inv, err := tr.Open(context.Background(), Inventory, "", nil)
	testenv.Must(t, err, "open inventory")
	t.Cleanup(func() { _ = inv.Close() })

	tr.mu.Lock()
	pay, invEP := tr.endpoints[Payment], tr.endpoints[Inventory]
	tr.mu.Unlock()
	if pay.secret == invEP.secret {
		t.Fatal("two endpoints share a secret")
	}
	send := func(url, secret, topic string) error {
		p, err := webhook.NewPublisher(webhook.PublisherConfig{DefaultEndpoint: url, Secrets: []string{secret}, Timeout: 2 * time.Second})
		testenv.Must(t, err, "publisher")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return p.Publish(ctx, []courier.Message{courier.NewMessage(topic, "k", "Note", []byte("{}"))})[0]
	}
	if err := send(invEP.url, pay.secret, TopicInventory); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("payment's secret at inventory's endpoint: %v; want 401", err)
	}
	if err := send(pay.url, pay.secret, TopicOrders); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("an orders message at payment's endpoint: %v; want 403", err)
	}
}
