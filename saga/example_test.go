package saga_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/saga"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/sqlite"
)

// An order saga of two steps, payment then shipping, on SQLite. Shipping
// fails, so the payment is compensated (refunded) and the saga ends
// cancelled. A duplicate reply is ignored and recorded. Each command the saga
// sends goes through the outbox in the transition's own transaction; a relay
// publishes them.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "courier-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "orders.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	d := sqlite.NewDriver(db) // hands out every store of the database
	if _, err := d.Migrate(ctx); err != nil {
		panic(err)
	}

	type Order struct {
		Total int `json:"total"`
	}
	send := func(topic, typ string) func(id string, o *Order) (courier.Message, error) {
		return func(id string, o *Order) (courier.Message, error) {
			return courier.NewJSON(topic, id, o, courier.WithType(typ))
		}
	}
	def := saga.Definition[Order]{
		Type: "order", Initial: "Placed",
		Steps: []saga.Step[Order]{{
			Name: "payment", Pending: "PaymentPending", Done: "Paid",
			Command:   send("payments", "ChargeRequested"),
			Succeeded: "PaymentSucceeded", Failed: "PaymentDeclined", Timeout: time.Minute,
			Compensate: send("payments", "RefundRequested"), Compensated: "PaymentRefunded",
		}, {
			Name: "shipping", Pending: "ShippingPending", Done: "Shipped",
			Command:   send("shipping", "PrepareShipment"),
			Succeeded: "ShipmentPrepared", Failed: "ShipmentFailed", Timeout: time.Minute,
			Compensate: send("shipping", "CancelShipment"), Compensated: "ShipmentCancelled",
		}},
	}
	orders, err := saga.New(def, d.Sagas(), outbox.New(d.Inserter(), outbox.Config{}), saga.Config{})
	if err != nil {
		panic(err)
	}

	// Start the saga in the transaction that stores the order.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	inst, err := orders.Start(ctx, tx, "order-42", Order{Total: 1999})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	fmt.Println("started:", inst.State)

	// Apply replies, each in a transaction of its own (an inbox handler's).
	handle := func(reply courier.Message) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			panic(err)
		}
		defer tx.Rollback()
		out, err := orders.Handle(ctx, tx, reply)
		if err != nil {
			panic(err)
		}
		if err := tx.Commit(); err != nil {
			panic(err)
		}
		if out.Applied {
			fmt.Printf("%s: %s -> %s\n", reply.Type, out.From, out.To)
		} else {
			fmt.Printf("%s: ignored (%s)\n", reply.Type, out.Reason)
		}
	}
	paid := courier.NewMessage("orders", "order-42", "PaymentSucceeded", nil)
	handle(paid)
	handle(paid) // delivered again
	handle(courier.NewMessage("orders", "order-42", "ShipmentFailed", nil,
		courier.WithHeader(saga.HeaderReason, "address unknown")))
	handle(courier.NewMessage("orders", "order-42", "PaymentRefunded", nil))

	inst, err = orders.Get(ctx, "order-42")
	if err != nil {
		panic(err)
	}
	fmt.Println("ended:", inst.State, inst.Phase, inst.Reason)

	// The commands the saga wrote to the outbox, in order, as a relay
	// claims them.
	st, err := d.RelayStore(ctx, store.RelayConfig{})
	if err != nil {
		panic(err)
	}
	batch, err := st.Claim(ctx, "example-relay", 100, 30*time.Second)
	if err != nil {
		panic(err)
	}
	for _, r := range batch.Records {
		fmt.Println("sent:", r.Message.Topic, r.Message.Type)
	}
	// Output:
	// started: PaymentPending
	// PaymentSucceeded: PaymentPending -> ShippingPending
	// PaymentSucceeded: ignored (PaymentSucceeded is a duplicate: step payment is done (ShippingPending))
	// ShipmentFailed: ShippingPending -> Compensating
	// PaymentRefunded: Compensating -> Cancelled
	// ended: Cancelled cancelled shipping: address unknown
	// sent: payments ChargeRequested
	// sent: shipping PrepareShipment
	// sent: payments RefundRequested
}
