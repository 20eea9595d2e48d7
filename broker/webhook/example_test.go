package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/webhook"
)

// A Publisher POSTs a message to a Handler; the consumer takes it with
// Next, as from any broker, and the request is answered 200 once the
// consumer acknowledges it. In a service, the Handler is mounted on the
// service's mux and an inbox consumer reads it:
//
//	mux.Handle("POST /webhooks/orders", h)
//	cons, _ := inbox.NewConsumer(ib, h, consumerStore, router.Handler(), inbox.ConsumerConfig{KeepOrder: true})
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // shared by sender and receiver

	h, err := webhook.NewHandler(webhook.HandlerConfig{VerifierConfig: webhook.VerifierConfig{Secrets: []string{secret}}})
	if err != nil {
		panic(err)
	}
	defer h.Close()
	srv := httptest.NewServer(h)
	defer srv.Close()

	pub, err := webhook.NewPublisher(webhook.PublisherConfig{
		Endpoints: map[string]string{"orders": srv.URL},
		Secrets:   []string{secret},
	})
	if err != nil {
		panic(err)
	}
	msg, err := courier.NewJSON("orders", "order-42", map[string]string{"order_id": "order-42"}, courier.WithType("OrderPlaced"))
	if err != nil {
		panic(err)
	}
	published := make(chan error, 1)
	go func() { published <- pub.Publish(ctx, []courier.Message{msg})[0] }()

	d, err := h.Next(ctx)
	if err != nil {
		panic(err)
	}
	got, err := h.Decode(d.Raw())
	if err != nil {
		panic(err)
	}
	fmt.Println(got.Topic, got.Key, got.Type, string(got.Payload))
	if err := d.Ack(ctx); err != nil {
		panic(err)
	}
	fmt.Println("published:", <-published)
	// Output:
	// orders order-42 OrderPlaced {"order_id":"order-42"}
	// published: <nil>
}

// VerifyMessage checks a request in a handler of one's own and returns the
// message of its signed body; the topic, key and type come from the
// signature-covered envelope, never from a header.
func ExampleVerifyMessage() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	hook := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, err := webhook.VerifyMessage(r, secret)
		if err != nil {
			http.Error(w, err.Error(), err.(*webhook.VerifyError).Status)
			return
		}
		fmt.Printf("verified %s %s on %s: %s\n", m.Type, m.Key, m.Topic, m.Payload)
	})
	srv := httptest.NewServer(hook)
	defer srv.Close()

	pub, err := webhook.NewPublisher(webhook.PublisherConfig{DefaultEndpoint: srv.URL, Secrets: []string{secret}})
	if err != nil {
		panic(err)
	}
	msg := courier.NewMessage("orders", "order-42", "OrderPlaced", []byte("hello"))
	fmt.Println(pub.Publish(context.Background(), []courier.Message{msg}))
	// Output:
	// verified OrderPlaced order-42 on orders: hello
	// [<nil>]
}

// The body a publisher sends by default: Standard Webhooks' type,
// timestamp and data, with Courier's fields beside them, all under the
// signature. Verify checks the signature and returns the body.
func ExampleVerify() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	hook := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := webhook.Verify(r, secret)
		if err != nil {
			http.Error(w, err.Error(), err.(*webhook.VerifyError).Status)
			return
		}
		fmt.Printf("%s %s\n", r.Header.Get("Content-Type"), body)
	})
	srv := httptest.NewServer(hook)
	defer srv.Close()

	pub, err := webhook.NewPublisher(webhook.PublisherConfig{DefaultEndpoint: srv.URL, Secrets: []string{secret}})
	if err != nil {
		panic(err)
	}
	msg := courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"order_id":"order-42"}`),
		courier.WithContentType(courier.ContentTypeJSON), courier.WithOccurredAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)),
		courier.WithHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	fmt.Println(pub.Publish(context.Background(), []courier.Message{msg}))
	// Output:
	// application/json {"type":"OrderPlaced","timestamp":"2026-11-30T12:00:00Z","topic":"orders","key":"order-42","version":1,"content_type":"application/json","headers":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},"data":{"order_id":"order-42"}}
	// [<nil>]
}
