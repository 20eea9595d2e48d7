package webhook_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// signedRequest returns a POST of body signed with secret ("whsec_" +
// base64) the Standard Webhooks way, by this test's own HMAC, at now.
func signedRequest(t testing.TB, secret, id string, body []byte) *http.Request {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, webhook.SecretPrefix))
	if err != nil {
		t.Fatal(err)
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	r.Header.Set(webhook.HeaderID, id)
	r.Header.Set(webhook.HeaderTimestamp, ts)
	r.Header.Set(webhook.HeaderSignature, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	return r
}

// Correctly signed requests that are not signed Courier messages are
// refused with 400 naming what is wrong: a raw request (its topic, key and
// type in unsigned headers), an envelope with a Courier header added, an
// envelope without its type, a body that is not JSON. Verify alone accepts
// them all.
func TestHandlerNotCourier(t *testing.T) {
	secret := newSecret(t)
	h, err := webhook.NewHandler(webhook.HandlerConfig{VerifierConfig: webhook.VerifierConfig{Secrets: []string{secret}}, Wait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	id := msg("k").ID.String()
	envelope := `{"type":"OrderPlaced","timestamp":"2026-11-30T12:00:00Z","topic":"orders","key":"k","version":1}`
	raw := signedRequest(t, secret, id, []byte(`{"n":1}`))
	for name, v := range map[string]string{webhook.HeaderTopic: "orders", webhook.HeaderKey: "k", webhook.HeaderType: "OrderPlaced",
		webhook.HeaderVersion: "1", webhook.HeaderOccurredAt: "2026-11-30T12:00:00Z"} {
		raw.Header.Set(name, v)
	}
	added := signedRequest(t, secret, id, []byte(envelope))
	added.Header.Set(webhook.HeaderType, "OrderCancelled")
	cases := map[string]struct {
		r    *http.Request
		says string
	}{
		"raw":           {raw, "Courier-"},
		"header added":  {added, webhook.HeaderType},
		"no type":       {signedRequest(t, secret, id, []byte(strings.Replace(envelope, `"type":"OrderPlaced",`, "", 1))), `"type"`},
		"no topic":      {signedRequest(t, secret, id, []byte(strings.Replace(envelope, `"topic":"orders",`, "", 1))), `"topic"`},
		"id not a UUID": {signedRequest(t, secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", []byte(envelope)), "UUID"},
		"not JSON":      {signedRequest(t, secret, id, []byte(`hello`)), "JSON"},
		"event without topic": {signedRequest(t, secret, id, []byte(`{"specversion":"1.0","id":"`+id+`","source":"/s","type":"T","subject":"k","time":"2026-11-30T12:00:00Z"}`)),
			"couriertopic"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			body, _ := io.ReadAll(tc.r.Body)
			tc.r.Body = io.NopCloser(bytes.NewReader(body))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, tc.r)
			var pr struct{ Title, Detail string }
			_ = json.Unmarshal(rec.Body.Bytes(), &pr)
			if rec.Code != http.StatusBadRequest || !strings.Contains(pr.Title+pr.Detail, tc.says) {
				t.Fatalf("%d %s; want 400 naming %s", rec.Code, rec.Body, tc.says)
			}
			again := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
			again.Header = tc.r.Header.Clone()
			if _, err := webhook.Verify(again, secret); err != nil {
				t.Fatalf("Verify: %v", err)
			}
		})
	}
	// The envelope itself passes verification and decoding (no consumer:
	// 503 after Wait).
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, signedRequest(t, secret, id, []byte(envelope)))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("the envelope: %d %s", rec.Code, rec.Body)
	}
}
