package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/webhook"
)

// handlerServer runs a Handler with wait on an httptest server and returns
// it with a publisher to it.
func handlerServer(t *testing.T, wait time.Duration) (*webhook.Handler, *webhook.Publisher, *httptest.Server) {
	t.Helper()
	secret := newSecret(t)
	h, err := webhook.NewHandler(webhook.HandlerConfig{VerifierConfig: webhook.VerifierConfig{Secrets: []string{secret}}, Wait: wait})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = h.Close() })
	p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: srv.URL, Secrets: []string{secret}, Timeout: 5 * time.Second,
		Breaker: webhook.BreakerConfig{Disabled: true}})
	return h, p, srv
}

// publishAsync publishes m in the background; the result comes on the
// channel.
func publishAsync(p *webhook.Publisher, m courier.Message) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- p.Publish(context.Background(), []courier.Message{m})[0] }()
	return ch
}

func nextDelivery(t *testing.T, h *webhook.Handler) (broker.Delivery, courier.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := h.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	m, err := h.Decode(d.Raw())
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return d, m
}

// The request waits for the consumer's verdict: Ack and Drop answer 2xx,
// Retry answers 503 with its delay as Retry-After, and the next request of
// the message counts as attempt 2.
func TestHandlerVerdicts(t *testing.T) {
	h, p, _ := handlerServer(t, 5*time.Second)
	ctx := context.Background()

	m := msg("k")
	m.SetHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	res := publishAsync(p, m)
	d, got := nextDelivery(t, h)
	if got.ID != m.ID || got.Headers["traceparent"] != m.Headers["traceparent"] || d.Attempt() != 1 {
		t.Fatalf("delivery: %+v attempt %d; want message %s attempt 1", got, d.Attempt(), m.ID)
	}
	select {
	case err := <-res:
		t.Fatalf("Publish returned %v before the consumer's verdict", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := d.Retry(ctx, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	err := <-res
	after, ok := broker.RetryAfter(err)
	if !errors.Is(err, broker.ErrUnavailable) || !ok || after != 2*time.Second {
		t.Fatalf("after Retry(1.5s): %v, RetryAfter %s %v; want ErrUnavailable asking for 2s", err, after, ok)
	}
	time.Sleep(after)

	res = publishAsync(p, m)
	d, _ = nextDelivery(t, h)
	if d.Attempt() != 2 {
		t.Fatalf("second request: attempt %d, want 2", d.Attempt())
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatalf("after Ack: %v", err)
	}
	if err := d.Ack(ctx); err == nil {
		t.Fatal("a second verdict was accepted")
	}

	res = publishAsync(p, msg("dropped"))
	d, _ = nextDelivery(t, h)
	if err := d.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatalf("after Drop: %v", err)
	}
}

// Without a verdict within Wait the request is answered 503; Extend starts
// the wait again; Close answers the waiting requests 503 and ends Next.
func TestHandlerWait(t *testing.T) {
	h, p, _ := handlerServer(t, 300*time.Millisecond)
	ctx := context.Background()

	res := publishAsync(p, msg("nobody"))
	if err := <-res; !errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("no consumer: %v; want ErrUnavailable", err)
	}
	time.Sleep(1100 * time.Millisecond) // the 503's Retry-After: 1

	res = publishAsync(p, msg("slow"))
	d, _ := nextDelivery(t, h)
	for range 4 {
		time.Sleep(150 * time.Millisecond)
		if err := d.Extend(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatalf("extended for 600ms with a 300ms wait, then acknowledged: %v", err)
	}

	res = publishAsync(p, msg("closing"))
	_, _ = nextDelivery(t, h)
	_ = h.Close()
	if err := <-res; !errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("handler closed while the request waited: %v; want ErrUnavailable", err)
	}
	if _, err := h.Next(ctx); err == nil {
		t.Fatal("Next after Close returned a delivery")
	}
}

// Requests that are not signed Courier messages get 4xx problem+json
// answers naming the problem.
func TestHandlerRefuses(t *testing.T) {
	_, _, srv := handlerServer(t, time.Second)
	post := func(method string, h http.Header, body string) (int, map[string]any) {
		req, _ := http.NewRequest(method, srv.URL, strings.NewReader(body))
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var pr map[string]any
		if resp.StatusCode >= 400 {
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("%d answer with Content-Type %q", resp.StatusCode, ct)
			}
			if err := json.Unmarshal(b, &pr); err != nil {
				t.Errorf("problem body %q: %v", b, err)
			}
		}
		return resp.StatusCode, pr
	}
	if code, _ := post(http.MethodGet, nil, ""); code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", code)
	}
	code, pr := post(http.MethodPost, nil, "{}")
	if code != http.StatusBadRequest || !strings.Contains(pr["title"].(string), "webhook-") {
		t.Errorf("unsigned POST: %d %v", code, pr)
	}
	code, pr = post(http.MethodPost, http.Header{
		"webhook-id":        {"x"},
		"webhook-timestamp": {"1"},
		"webhook-signature": {"v1,AAAA"},
	}, "{}")
	if code != http.StatusBadRequest || !strings.Contains(pr["detail"].(string), "clock") {
		t.Errorf("ancient timestamp: %d %v", code, pr)
	}
}

// A correctly signed request that lacks Courier's headers is refused with
// 400 naming the header; Verify alone accepts it.
func TestHandlerNotCourier(t *testing.T) {
	secret := newSecret(t)
	h, err := webhook.NewHandler(webhook.HandlerConfig{VerifierConfig: webhook.VerifierConfig{Secrets: []string{secret}}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var captured *http.Request
	var body []byte
	capture := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
		captured = r
	}))
	defer capture.Close()
	p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: capture.URL, Secrets: []string{secret}})
	if err := publishOne(t, p, msg("k")); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(string(body)))
	req.Header = captured.Header.Clone()
	req.Header.Del(webhook.HeaderType)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), webhook.HeaderType) {
		t.Fatalf("without %s: %d %s", webhook.HeaderType, rec.Code, rec.Body)
	}
}
