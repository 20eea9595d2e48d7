package webhook_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/webhook"
)

// captured is a request as a publisher sent it.
type captured struct {
	header http.Header
	body   []byte
}

// replay returns a new request with c's headers and body.
func (c captured) replay() *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(c.body))
	r.Header = c.header.Clone()
	return r
}

// capturer is an endpoint that records every request and answers 204.
type capturer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []captured
}

func newCapturer(t *testing.T) *capturer {
	c := &capturer{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.reqs = append(c.reqs, captured{r.Header.Clone(), b})
		c.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *capturer) last(t *testing.T) captured {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.reqs) == 0 {
		t.Fatal("no request captured")
	}
	return c.reqs[len(c.reqs)-1]
}

// serve runs r through h with a consumer that acknowledges at once; it
// returns the answer's status and what the consumer received, if anything.
func serve(t *testing.T, h *webhook.Handler, r *http.Request) (int, *courier.Message) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan courier.Message, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d, err := h.Next(ctx)
		if err != nil {
			return
		}
		m, err := h.Decode(d.Raw())
		if err != nil {
			t.Errorf("Decode of a delivered request: %v", err)
		}
		got <- m
		_ = d.Ack(ctx)
	}()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	cancel()
	<-done
	select {
	case m := <-got:
		return rec.Code, &m
	default:
		return rec.Code, nil
	}
}

func newHandler(t *testing.T, cfg webhook.HandlerConfig) *webhook.Handler {
	t.Helper()
	if cfg.Wait == 0 {
		cfg.Wait = 5 * time.Second
	}
	h, err := webhook.NewHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// A request captured on the way and sent again within the tolerance, with
// its type changed (OrderPlaced to OrderCancelled), is refused, however the
// type is changed: in a Courier-Type header (a raw request, or an envelope
// with the header added) or in the body. Only the request as sent is
// taken.
func TestReplayWithChangedTypeRefused(t *testing.T) {
	secret := newSecret(t)
	c := newCapturer(t)
	h := newHandler(t, webhook.HandlerConfig{VerifierConfig: webhook.VerifierConfig{Secrets: []string{secret}}})
	p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: c.srv.URL, Secrets: []string{secret}})
	m := msg("order-42")
	if err := publishOne(t, p, m); err != nil {
		t.Fatal(err)
	}
	sent := c.last(t)

	headerChanged := sent.replay()
	headerChanged.Header.Set(webhook.HeaderType, "OrderCancelled")
	if code, got := serve(t, h, headerChanged); code < 400 || got != nil {
		t.Errorf("Courier-Type changed to OrderCancelled: answered %d, consumer received %+v; want it refused", code, got)
	}

	bodyChanged := sent
	bodyChanged.body = bytes.Replace(sent.body, []byte("OrderPlaced"), []byte("OrderCancelled"), 1)
	if bytes.Equal(bodyChanged.body, sent.body) {
		t.Fatalf("the type is not in the body %s", sent.body)
	}
	if code, got := serve(t, h, bodyChanged.replay()); code != http.StatusUnauthorized || got != nil {
		t.Errorf("type changed in the body: answered %d, consumer received %+v; want 401", code, got)
	}

	code, got := serve(t, h, sent.replay())
	if code != http.StatusOK || got == nil || got.Type != "OrderPlaced" || got.ID != m.ID {
		t.Fatalf("the request as sent: answered %d, consumer received %+v", code, got)
	}

	// A raw request is refused whatever its headers say.
	raw := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: c.srv.URL, Secrets: []string{secret}, Body: webhook.BodyRaw})
	if err := publishOne(t, raw, msg("order-43")); err != nil {
		t.Fatal(err)
	}
	if code, got := serve(t, h, c.last(t).replay()); code != http.StatusBadRequest || got != nil {
		t.Errorf("raw request: answered %d, consumer received %+v; want 400", code, got)
	}
}

// With a secret per endpoint, a request signed for endpoint A does not
// verify at endpoint B: sent there again, it is refused with 401. Where
// endpoints share a secret, a Handler that names its topics refuses
// another endpoint's request with 403.
func TestCrossEndpointReplayRefused(t *testing.T) {
	secretA, secretB := newSecret(t), newSecret(t)
	a, b := newCapturer(t), newCapturer(t)
	p := newPublisher(t, webhook.PublisherConfig{
		Endpoints:       map[string]string{"orders": a.srv.URL, "payments": b.srv.URL},
		EndpointSecrets: map[string][]string{a.srv.URL: {secretA}, b.srv.URL: {secretB}},
		Secrets:         []string{},
	})
	if err := publishOne(t, p, msg("order-42")); err != nil {
		t.Fatal(err)
	}
	pay := courier.NewMessage("payments", "order-42", "PaymentCaptured", []byte(`{}`), courier.WithContentType(courier.ContentTypeJSON))
	if err := publishOne(t, p, pay); err != nil {
		t.Fatal(err)
	}
	forA, forB := a.last(t), b.last(t)

	hb := newHandler(t, webhook.HandlerConfig{VerifierConfig: webhook.VerifierConfig{Secrets: []string{secretB}}})
	if code, got := serve(t, hb, forA.replay()); code != http.StatusUnauthorized || got != nil {
		t.Errorf("A's request at B: answered %d, consumer received %+v; want 401", code, got)
	}
	if code, got := serve(t, hb, forB.replay()); code != http.StatusOK || got == nil || got.Topic != "payments" {
		t.Fatalf("B's own request: answered %d, consumer received %+v", code, got)
	}

	// Shared secret: the topic, signed in the body, tells them apart.
	shared := newSecret(t)
	sp := newPublisher(t, webhook.PublisherConfig{Endpoints: map[string]string{"orders": a.srv.URL, "payments": b.srv.URL}, Secrets: []string{shared}})
	if err := publishOne(t, sp, msg("order-44")); err != nil {
		t.Fatal(err)
	}
	hs := newHandler(t, webhook.HandlerConfig{VerifierConfig: webhook.VerifierConfig{Secrets: []string{shared}}, Topics: []string{"payments"}})
	code, got := serve(t, hs, a.last(t).replay())
	if code != http.StatusForbidden || got != nil {
		t.Errorf("orders request at a payments Handler sharing the secret: answered %d, consumer received %+v; want 403", code, got)
	}
}

// EndpointSecrets must cover every endpoint when there are no Secrets, and
// name only URLs a topic uses; an endpoint Endpoint returns without a
// secret fails its messages, naming the endpoint.
func TestEndpointSecretsConfig(t *testing.T) {
	s := newSecret(t)
	for name, tc := range map[string]struct {
		cfg  webhook.PublisherConfig
		says string
	}{
		"endpoint without secret": {webhook.PublisherConfig{Endpoints: map[string]string{"a": "http://a.example/", "b": "http://b.example/"},
			EndpointSecrets: map[string][]string{"http://a.example/": {s}}}, "http://b.example/ has no secret"},
		"typo": {webhook.PublisherConfig{Endpoints: map[string]string{"a": "http://a.example/"}, Secrets: []string{s},
			EndpointSecrets: map[string][]string{"http://a.example": {s}}}, "no topic uses"},
		"bad key": {webhook.PublisherConfig{DefaultEndpoint: "http://a.example/",
			EndpointSecrets: map[string][]string{"http://a.example/": {"whsec_c2hvcnQ="}}}, "EndpointSecrets of http://a.example/"},
		"password in URL": {webhook.PublisherConfig{DefaultEndpoint: "http://u:hunter2@a.example/", Secrets: []string{s},
			EndpointSecrets: map[string][]string{"http://u:hunter2@b.example/": {s}}}, "u:xxxxx@b.example"},
		"no secret at all":  {webhook.PublisherConfig{DefaultEndpoint: "http://a.example/"}, "no secret"},
		"unknown body mode": {webhook.PublisherConfig{DefaultEndpoint: "http://a.example/", Secrets: []string{s}, Body: 7}, "Body"},
	} {
		_, err := webhook.NewPublisher(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: %v; want an error saying %q", name, err, tc.says)
		}
	}

	c := newCapturer(t)
	p, err := webhook.NewPublisher(webhook.PublisherConfig{
		Endpoint:        func(topic string) string { return c.srv.URL + "/" + topic },
		EndpointSecrets: map[string][]string{c.srv.URL + "/orders": {s}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := publishOne(t, p, msg("k")); err != nil {
		t.Fatalf("endpoint with a secret: %v", err)
	}
	pay := courier.NewMessage("payments", "k", "T", nil)
	if err := publishOne(t, p, pay); err == nil || errors.Is(err, broker.ErrUnavailable) || !strings.Contains(err.Error(), "/payments of topic \"payments\" has no secret") {
		t.Fatalf("endpoint without a secret: %v; want a counted failure naming it", err)
	}
}

// A publisher holding an Ed25519 private key (whsk_) signs v1a; a Handler
// holding the public key (whpk_) takes the request, one holding another
// public key refuses it.
func TestEd25519(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	whpk := webhook.PublicKeyPrefix + base64.StdEncoding.EncodeToString(pub)
	whsk := webhook.PrivateKeyPrefix + base64.StdEncoding.EncodeToString(priv.Seed())
	c := newCapturer(t)
	p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: c.srv.URL, Secrets: []string{whsk}})
	if err := publishOne(t, p, msg("k")); err != nil {
		t.Fatal(err)
	}
	sent := c.last(t)
	if sig := sent.header.Get(webhook.HeaderSignature); !strings.HasPrefix(sig, "v1a,") {
		t.Fatalf("signature %q, want v1a", sig)
	}
	h := newHandler(t, webhook.HandlerConfig{VerifierConfig: webhook.VerifierConfig{Secrets: []string{whpk}}})
	if code, got := serve(t, h, sent.replay()); code != http.StatusOK || got == nil {
		t.Fatalf("public key: answered %d", code)
	}
	other := newHandler(t, webhook.HandlerConfig{VerifierConfig: webhook.VerifierConfig{
		Secrets: []string{webhook.PublicKeyPrefix + base64.StdEncoding.EncodeToString(otherPub)}}})
	if code, _ := serve(t, other, sent.replay()); code != http.StatusUnauthorized {
		t.Fatalf("another public key: answered %d, want 401", code)
	}
	if _, err := webhook.NewHandler(webhook.HandlerConfig{VerifierConfig: webhook.VerifierConfig{Secrets: []string{whsk}}}); err == nil {
		t.Fatal("a Handler took the private key")
	}
}

// The default wire format: the Standard Webhooks headers and Content-Type,
// nothing else of the message in a header, and the envelope as the body,
// a JSON payload as it is and anything else in base64.
func TestEnvelopeWire(t *testing.T) {
	c := newCapturer(t)
	p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: c.srv.URL})
	m := msg("order-42")
	m.Payload = []byte(`{"n": 1, "s": "<&>"}`)
	m.Version = 2
	m.SetHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if err := publishOne(t, p, m); err != nil {
		t.Fatal(err)
	}
	sent := c.last(t)
	for name := range sent.header {
		switch name {
		case "Webhook-Id", "Webhook-Timestamp", "Webhook-Signature", "Content-Type", "Content-Length", "User-Agent", "Accept-Encoding":
		default:
			t.Errorf("header %s sent", name)
		}
	}
	if ct := sent.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(sent.body, &env); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"type": `"OrderPlaced"`, "topic": `"orders"`, "key": `"order-42"`, "version": `2`, "content_type": `"application/json"`,
		"timestamp": `"` + m.OccurredAt.UTC().Format(time.RFC3339Nano) + `"`, "data": string(m.Payload),
		"headers": `{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`,
	}
	for k, v := range want {
		if string(env[k]) != v {
			t.Errorf("member %s = %s, want %s", k, env[k], v)
		}
	}
	if len(env) != len(want) {
		t.Errorf("envelope %s has other members", sent.body)
	}

	bin := courier.NewMessage("orders", "k", "Blob", []byte{0, 1, 0xfe, 0xff})
	if err := publishOne(t, p, bin); err != nil {
		t.Fatal(err)
	}
	env = nil
	if err := json.Unmarshal(c.last(t).body, &env); err != nil {
		t.Fatal(err)
	}
	if string(env["data_base64"]) != `"AAH+/w=="` || env["data"] != nil {
		t.Errorf("binary payload: %s", c.last(t).body)
	}
}
