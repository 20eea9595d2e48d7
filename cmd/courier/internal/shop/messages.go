package shop

// Topics: each service consumes one. Commands go to the service that carries
// them out; every reply goes to the orders service, keyed by the order id
// (the saga's id), so the saga finds its instance by the reply's key.
const (
	TopicOrders    = "orders"
	TopicPayment   = "payment"
	TopicInventory = "inventory"
	TopicShipping  = "shipping"
)

// Commands the orders saga sends.

// ChargeRequested asks payment to charge the customer for an order. This
// is its version 2, ChargeVersion: the amount carries its currency.
// Version 1, ChargeRequestedV1, still travels while the shop is deployed
// from one to the other: payment turns it into this shape (upcastCharge).
type ChargeRequested struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Amount   Money  `json:"amount"`
}

// MessageVersion makes ChargeRequested version 2 of its type.
func (ChargeRequested) MessageVersion() int { return ChargeVersion }

// ChargeVersion is the newest version of ChargeRequested: the one orders
// writes and payment handles unless Config.ChargeVersion says otherwise.
const ChargeVersion = 2

// Money is an amount in the minor unit (cents) of its currency.
type Money struct {
	Value    int64  `json:"value"`
	Currency string `json:"currency"`
}

// Currency is the shop's only currency: the one of every order's amount,
// and the one version 1 of ChargeRequested implied.
const Currency = "EUR"

// ChargeRequestedV1 is version 1 of ChargeRequested, as orders wrote it
// before version 2: the amount in cents of the shop's Currency, without
// naming it.
type ChargeRequestedV1 struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

// MessageType keeps both versions one type, ChargeRequested.
func (ChargeRequestedV1) MessageType() string { return "ChargeRequested" }

// MessageVersion makes ChargeRequestedV1 version 1.
func (ChargeRequestedV1) MessageVersion() int { return 1 }

// upcastCharge turns a version 1 request into version 2: its amount was in
// the shop's Currency.
func upcastCharge(v1 ChargeRequestedV1) (ChargeRequested, error) {
	return ChargeRequested{OrderID: v1.OrderID, Customer: v1.Customer, Amount: Money{Value: v1.Amount, Currency: Currency}}, nil
}

// RefundRequested asks payment to refund an order's charge, if there is
// one; it compensates ChargeRequested.
type RefundRequested struct {
	OrderID string `json:"order_id"`
}

// ReserveStock asks inventory to set stock aside for an order.
type ReserveStock struct {
	OrderID string `json:"order_id"`
	SKU     string `json:"sku"`
	Qty     int    `json:"qty"`
}

// ReleaseStock asks inventory to return an order's reservation, if there is
// one; it compensates ReserveStock.
type ReleaseStock struct {
	OrderID string `json:"order_id"`
}

// PrepareShipment asks shipping to prepare an order's parcel.
type PrepareShipment struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	SKU      string `json:"sku"`
	Qty      int    `json:"qty"`
}

// CancelShipment asks shipping to cancel an order's shipment, if there is
// one; it compensates PrepareShipment.
type CancelShipment struct {
	OrderID string `json:"order_id"`
}

// Replies. Failures carry their reason in the saga.HeaderReason header.

// PaymentSucceeded: the order is charged.
type PaymentSucceeded struct {
	OrderID  string `json:"order_id"`
	ChargeID string `json:"charge_id"`
}

// PaymentDeclined: the order could not be charged.
type PaymentDeclined struct {
	OrderID string `json:"order_id"`
}

// PaymentRefunded: the order holds no money any more; Refunded says whether
// there was a charge to refund.
type PaymentRefunded struct {
	OrderID  string `json:"order_id"`
	Refunded bool   `json:"refunded"`
}

// StockReserved: the order's items are set aside.
type StockReserved struct {
	OrderID string `json:"order_id"`
}

// StockUnavailable: the order's items could not be set aside.
type StockUnavailable struct {
	OrderID string `json:"order_id"`
}

// StockReleased: the order holds no stock any more; Released says whether
// there was a reservation to return.
type StockReleased struct {
	OrderID  string `json:"order_id"`
	Released bool   `json:"released"`
}

// ShipmentPrepared: the order's parcel is ready for the carrier.
type ShipmentPrepared struct {
	OrderID    string `json:"order_id"`
	ShipmentID string `json:"shipment_id"`
}

// ShipmentFailed: the order's parcel could not be prepared.
type ShipmentFailed struct {
	OrderID string `json:"order_id"`
}

// ShipmentCancelled: the order has no shipment any more; Cancelled says
// whether there was one to cancel.
type ShipmentCancelled struct {
	OrderID   string `json:"order_id"`
	Cancelled bool   `json:"cancelled"`
}
