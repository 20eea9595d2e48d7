package courier_test

import (
	"fmt"

	"github.com/courier-go/courier"
)

func ExampleNewJSON() {
	type OrderPlaced struct {
		OrderID string `json:"order_id"`
	}
	msg, err := courier.NewJSON("orders", "order-42", OrderPlaced{OrderID: "order-42"},
		courier.WithCorrelationID("checkout-7"))
	if err != nil {
		panic(err)
	}
	fmt.Println(msg.Topic, msg.Key, msg.Type, msg.ContentType, string(msg.Payload))
	fmt.Println(msg.Headers[courier.HeaderCorrelationID])
	// Output:
	// orders order-42 OrderPlaced application/json {"order_id":"order-42"}
	// checkout-7
}

func ExampleCausedBy() {
	placed := courier.NewMessage("orders", "order-42", "OrderPlaced", nil)
	charge := courier.NewMessage("payments", "order-42", "ChargeRequested", nil, courier.CausedBy(placed))
	fmt.Println(charge.Headers[courier.HeaderCausationID] == placed.ID.String())
	// Output: true
}

func ExampleMessage_Validate() {
	msg := courier.NewMessage("orders", "", "OrderPlaced", nil)
	fmt.Println(msg.Validate(courier.Limits{}))
	// Output: courier: message.Key is empty: set the ordering key, usually the aggregate id such as "order-42"
}
