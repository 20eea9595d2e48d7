package cloudevents_test

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/cloudevents"
)

// The attributes a Kafka record carries for a message when the publisher
// has CloudEvents on (kafka.PublisherConfig{CloudEvents: cfg}); the payload
// is the event's data and the content-type header its datacontenttype.
func ExampleConfig_Attributes() {
	cfg := &cloudevents.Config{Source: "/shop/orders"}
	m := courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"total":7}`),
		courier.WithID(uuid.MustParse("0192d5f0-7c1e-7a3b-8f00-000000000042")),
		courier.WithOccurredAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)),
		courier.WithContentType(courier.ContentTypeJSON))
	for _, a := range cfg.Attributes(cloudevents.PrefixKafka, &m) {
		fmt.Printf("%s: %s\n", a.Name, a.Value)
	}
	// Output:
	// ce_specversion: 1.0
	// ce_id: 0192d5f0-7c1e-7a3b-8f00-000000000042
	// ce_source: /shop/orders
	// ce_type: OrderPlaced
	// ce_subject: order-42
	// ce_time: 2026-11-30T12:00:00Z
	// ce_courierversion: 1
}

// A message as one event in the JSON event format: what a webhook
// publisher with CloudEvents on sends, signed, as the request body.
func ExampleConfig_JSON() {
	cfg := &cloudevents.Config{Source: "/shop/orders"}
	m := courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"total":7}`),
		courier.WithID(uuid.MustParse("0192d5f0-7c1e-7a3b-8f00-000000000042")),
		courier.WithOccurredAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)),
		courier.WithContentType(courier.ContentTypeJSON))
	b, err := cfg.JSON(&m)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(b))
	e, err := cloudevents.ParseJSON(b)
	if err != nil {
		panic(err)
	}
	back, err := e.Message()
	if err != nil {
		panic(err)
	}
	fmt.Println(back.Topic, back.Key, back.Type, string(back.Payload))
	// Output:
	// {"specversion":"1.0","id":"0192d5f0-7c1e-7a3b-8f00-000000000042","source":"/shop/orders","type":"OrderPlaced","subject":"order-42","time":"2026-11-30T12:00:00Z","courierversion":1,"datacontenttype":"application/json","couriertopic":"orders","data":{"total":7}}
	// orders order-42 OrderPlaced {"total":7}
}
