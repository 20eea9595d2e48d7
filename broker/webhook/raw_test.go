package webhook_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/webhook"
	"github.com/courier-go/courier/broker/wire"
)

// Raw mode sends the payload as the body and the rest of the message in
// the headers package wire writes: Courier's, the message's own (listed,
// sorted, in Courier-Header-Names), the CloudEvents attributes with CloudEvents
// on, Courier-Topic; the message id once, in the signed webhook-id.
func TestRawModeHeaders(t *testing.T) {
	got := make(chan *http.Request, 1)
	bodies := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- string(b)
	}))
	defer srv.Close()
	p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: srv.URL, Body: webhook.BodyRaw, CloudEvents: &cloudevents.Config{Source: "/shop"}})
	m := courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"n":1}`), courier.WithContentType(courier.ContentTypeJSON),
		courier.WithVersion(2), courier.WithHeader("X-Tenant", "acme"), courier.WithHeader("traceparent", "00-1-2-01"))
	if err := publishOne(t, p, m); err != nil {
		t.Fatal(err)
	}
	r, body := <-got, <-bodies
	want := map[string]string{}
	wire.HTTP.Encode(&m, &cloudevents.Config{Source: "/shop"}, func(name, value string) { want[name] = value })
	want[webhook.HeaderTopic] = m.Topic
	want[webhook.HeaderNames] = "X-Tenant traceparent"
	for name, v := range want {
		if vs := r.Header.Values(name); len(vs) != 1 || vs[0] != v {
			t.Errorf("header %s: %q, want once %q", name, vs, v)
		}
	}
	if body != string(m.Payload) || r.Header.Get(webhook.HeaderSignature) == "" {
		t.Errorf("body %q, signature %q", body, r.Header.Get(webhook.HeaderSignature))
	}
}

// Raw mode refuses a message it cannot carry with an error that names the
// same problem every time: the first header by name, then the topic, key
// and type.
func TestRawModeRefusalNamesTheFirstProblem(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: srv.URL, Body: webhook.BodyRaw})
	m := courier.NewMessage("orders", "key ", "T", nil,
		courier.WithHeader("x-c", "\x01"), courier.WithHeader("x-a", "\x01"), courier.WithHeader("x-b", "\x01"))
	for range 20 {
		err := publishOne(t, p, m)
		if err == nil || !strings.Contains(err.Error(), `header "x-a"`) {
			t.Fatalf("Publish = %v, want the refusal of header x-a", err)
		}
	}
	m.Headers = nil
	m.Topic = "orders "
	if err := publishOne(t, p, m); err == nil || !strings.Contains(err.Error(), `Topic "orders "`) {
		t.Fatalf("Publish = %v, want the refusal of the topic, before the key", err)
	}
}
