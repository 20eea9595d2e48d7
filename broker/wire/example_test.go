package wire_test

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/wire"
)

// A broker package writes a message into its own header carrier, and reads
// it back from the carrier's map of names to values.
func Example() {
	m := courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"total":7}`),
		courier.WithID(uuid.MustParse("0192d5f0-7c1e-7a3b-8f00-000000000042")),
		courier.WithOccurredAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)),
		courier.WithContentType(courier.ContentTypeJSON))
	h := map[string][]string{}
	wire.Kafka.Encode(&m, nil, func(name, value string) { h[name] = []string{value} })
	fmt.Println(h[wire.HeaderID][0], h[wire.HeaderType][0], h[wire.HeaderOccurredAt][0])

	back, err := wire.Kafka.Decode(h, m.Payload)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(back.Key, back.Type, back.Version, string(back.Payload))
	// Output:
	// 0192d5f0-7c1e-7a3b-8f00-000000000042 OrderPlaced 2026-11-30T12:00:00Z
	// order-42 OrderPlaced 1 {"total":7}
}
