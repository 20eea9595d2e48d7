package brokerurl_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/brokerurl"
	"github.com/courier-go/courier/broker/webhook"
)

// Open the broker a URL names and publish to it. Here the URL is a webhook
// endpoint, so the secrets come from COURIER_WEBHOOK_SECRET; a
// kafka://, amqp:// or nats:// URL opens those brokers the same way.
func ExampleOpen() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, err := webhook.VerifyMessage(r, secret)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Printf("received %s on %s\n", m.Payload, m.Topic)
	}))
	defer endpoint.Close()
	os.Setenv(brokerurl.DefaultWebhookSecretEnv, secret)
	defer os.Unsetenv(brokerurl.DefaultWebhookSecretEnv)

	ctx := context.Background()
	b, err := brokerurl.Open(ctx, endpoint.URL+"/courier", brokerurl.Options{})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	fmt.Println("broker:", b.Kind())
	msg := courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"order_id":"order-42"}`))
	for _, err := range b.Publish(ctx, []courier.Message{msg}) {
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// broker: webhook
	// received {"order_id":"order-42"} on orders
}
