package shop

import (
	"fmt"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/saga"
)

// sagaType is the order saga's type in the saga store.
const sagaType = "order"

// States of an order. The happy path is Placed → PaymentPending → Paid →
// InventoryReserved → ShippingReady; a failure or a timeout goes through
// Compensating to Cancelled.
const (
	StatePlaced            = "Placed"
	StatePaymentPending    = "PaymentPending"
	StatePaid              = "Paid"
	StateInventoryReserved = "InventoryReserved"
	StateShippingReady     = "ShippingReady"
	StateCompensating      = "Compensating"
	StateCancelled         = "Cancelled"
)

// orderData is the saga's own data: what the commands need, and what the
// replies told it.
type orderData struct {
	Customer   string `json:"customer"`
	SKU        string `json:"sku"`
	Qty        int    `json:"qty"`
	Amount     int64  `json:"amount"`
	ChargeID   string `json:"charge_id,omitempty"`
	ShipmentID string `json:"shipment_id,omitempty"`
}

// Timeouts bound the saga's waits. Zero fields take the defaults given.
type Timeouts struct {
	// Step bounds the wait for each step's reply; a step that times out is
	// compensated with the steps before it. Default 30s.
	Step time.Duration
	// Compensation is how long a compensation waits for its confirmation
	// before it is sent again. Default: Step.
	Compensation time.Duration
}

func (t *Timeouts) setDefaults() {
	if t.Step <= 0 {
		t.Step = 30 * time.Second
	}
	if t.Compensation <= 0 {
		t.Compensation = t.Step
	}
}

// orderSaga returns the order saga: charge, reserve, ship. Every step has a
// timeout and a compensation; see the package documentation for why the
// shipping step can be undone. The charge is requested in version
// chargeVersion of ChargeRequested.
func orderSaga(t Timeouts, chargeVersion int) saga.Definition[orderData] {
	t.setDefaults()
	return saga.Definition[orderData]{
		Type:              sagaType,
		Initial:           StatePlaced,
		CompensatingState: StateCompensating,
		CancelledState:    StateCancelled,
		Steps: []saga.Step[orderData]{
			{
				Name: "payment", Pending: StatePaymentPending, Done: StatePaid,
				Command: command(TopicPayment, func(id string, d *orderData) any {
					if chargeVersion == 1 {
						return ChargeRequestedV1{OrderID: id, Customer: d.Customer, Amount: d.Amount}
					}
					return ChargeRequested{OrderID: id, Customer: d.Customer, Amount: Money{Value: d.Amount, Currency: Currency}}
				}),
				Succeeded: courier.TypeName(PaymentSucceeded{}), Failed: courier.TypeName(PaymentDeclined{}),
				OnReply: func(d *orderData, r courier.Message) error {
					if r.Type != courier.TypeName(PaymentSucceeded{}) {
						return nil
					}
					var ok PaymentSucceeded
					if err := r.DecodeJSON(&ok); err != nil {
						return fmt.Errorf("%w: %w", courier.ErrMalformed, err)
					}
					d.ChargeID = ok.ChargeID
					return nil
				},
				Timeout: t.Step, CompensationTimeout: t.Compensation,
				Compensate:  command(TopicPayment, func(id string, _ *orderData) any { return RefundRequested{OrderID: id} }),
				Compensated: courier.TypeName(PaymentRefunded{}),
			},
			{
				Name: "inventory", Done: StateInventoryReserved,
				Command: command(TopicInventory, func(id string, d *orderData) any {
					return ReserveStock{OrderID: id, SKU: d.SKU, Qty: d.Qty}
				}),
				Succeeded: courier.TypeName(StockReserved{}), Failed: courier.TypeName(StockUnavailable{}),
				Timeout: t.Step, CompensationTimeout: t.Compensation,
				Compensate:  command(TopicInventory, func(id string, _ *orderData) any { return ReleaseStock{OrderID: id} }),
				Compensated: courier.TypeName(StockReleased{}),
			},
			{
				Name: "shipping", Done: StateShippingReady,
				Command: command(TopicShipping, func(id string, d *orderData) any {
					return PrepareShipment{OrderID: id, Customer: d.Customer, SKU: d.SKU, Qty: d.Qty}
				}),
				Succeeded: courier.TypeName(ShipmentPrepared{}), Failed: courier.TypeName(ShipmentFailed{}),
				OnReply: func(d *orderData, r courier.Message) error {
					if r.Type != courier.TypeName(ShipmentPrepared{}) {
						return nil
					}
					var ok ShipmentPrepared
					if err := r.DecodeJSON(&ok); err != nil {
						return fmt.Errorf("%w: %w", courier.ErrMalformed, err)
					}
					d.ShipmentID = ok.ShipmentID
					return nil
				},
				Timeout: t.Step, CompensationTimeout: t.Compensation,
				Compensate:  command(TopicShipping, func(id string, _ *orderData) any { return CancelShipment{OrderID: id} }),
				Compensated: courier.TypeName(ShipmentCancelled{}),
			},
		},
	}
}

// command builds a step's command: build's value as JSON on topic, keyed by
// the order id.
func command(topic string, build func(id string, d *orderData) any) func(string, *orderData) (courier.Message, error) {
	return func(id string, d *orderData) (courier.Message, error) {
		return courier.NewJSON(topic, id, build(id, d))
	}
}
