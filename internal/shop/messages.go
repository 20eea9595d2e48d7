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

// ChargeRequested asks payment to charge the customer for an order.
type ChargeRequested struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
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
