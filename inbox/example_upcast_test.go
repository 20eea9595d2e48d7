package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/inbox"
)

// Version 1 of ShipmentBooked had one address line; version 2 splits it.
type ShipmentBookedV1 struct {
	Address string `json:"address"`
}

// MessageType keeps both versions one type.
func (ShipmentBookedV1) MessageType() string { return "ShipmentBooked" }

// ShipmentBooked is the newest shape, version 2.
type ShipmentBooked struct {
	Street string `json:"street"`
	City   string `json:"city"`
}

// MessageVersion says which shape it is: producers write it, the router
// dispatches on it.
func (ShipmentBooked) MessageVersion() int { return 2 }

// Read old and new shapes side by side: an upcaster turns version 1 into
// version 2, so the one handler sees every message in the newest shape,
// whichever producer wrote it; a version newer than the router knows is
// courier.ErrNewerVersion, which a Consumer retries, uncounted, until the
// consumer that knows it is deployed.
func ExampleUpcast() {
	r := inbox.NewRouter[any]()
	inbox.Upcast(r, func(v ShipmentBookedV1) (ShipmentBooked, error) {
		street, city, _ := strings.Cut(v.Address, ", ")
		return ShipmentBooked{Street: street, City: city}, nil
	})
	inbox.On(r, func(ctx context.Context, tx any, msg courier.Message, v ShipmentBooked) error {
		fmt.Printf("version %d: %s in %s\n", msg.Version, v.Street, v.City)
		return nil
	})
	handle := r.Handler()

	oldProducer, _ := courier.NewJSON("shipments", "s1", ShipmentBookedV1{Address: "1 Main St, Springfield"})
	newProducer, _ := courier.NewJSON("shipments", "s2", ShipmentBooked{Street: "2 High St", City: "Shelbyville"})
	fromTheFuture := courier.NewMessage("shipments", "s3", "ShipmentBooked", []byte(`{}`), courier.WithVersion(3))
	for _, m := range []courier.Message{oldProducer, newProducer, fromTheFuture} {
		if err := handle(context.Background(), nil, m); err != nil {
			fmt.Println("newer than this consumer knows:", errors.Is(err, courier.ErrNewerVersion))
		}
	}
	// Output:
	// version 2: 1 Main St in Springfield
	// version 2: 2 High St in Shelbyville
	// newer than this consumer knows: true
}
