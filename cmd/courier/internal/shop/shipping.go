package shop

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/inbox"
)

// Shipment statuses.
const (
	shipmentPrepared  = "prepared"
	shipmentCancelled = "cancelled"
	// shipmentVoid marks an order whose shipment was cancelled before
	// it was prepared: a late PrepareShipment is refused.
	shipmentVoid = "void"
)

// ShippingService prepares parcels and cancels them:
//
//	PrepareShipment → ShipmentPrepared, or ShipmentFailed (Faults.ShipmentFailureRate, or cancelled first)
//	CancelShipment  → ShipmentCancelled, whether there was a shipment to cancel or not
//
// A prepared shipment waits in the warehouse until the carrier collects it,
// after the saga completed; until then cancelling it undoes it completely.
type ShippingService struct{ *base }

var _ Service = (*ShippingService)(nil)

// NewShipping returns the shipping service.
func NewShipping(cfg Config) (*ShippingService, error) {
	b, err := newBase(Shipping, cfg)
	if err != nil {
		return nil, err
	}
	s := &ShippingService{base: b}
	b.spec = spec{tables: shippingTables, topic: TopicShipping, setup: s.setup}
	return s, nil
}

func (s *ShippingService) setup(_ context.Context, n *node, _ time.Duration) (incarnation, error) {
	sn := &shippingNode{node: n, faults: s.Faults}
	r := inbox.NewRouter[*sql.Tx]()
	inbox.On(r, sn.prepare)
	inbox.On(r, sn.cancel)
	return incarnation{handler: r.Handler()}, nil
}

type shippingNode struct {
	*node
	faults func() Faults
}

func (s *shippingNode) prepare(ctx context.Context, tx *sql.Tx, msg courier.Message, c PrepareShipment) error {
	var id, status string
	err := tx.QueryRowContext(ctx, s.db.q(`SELECT id, status FROM shop_shipments WHERE order_id = ?`), c.OrderID).Scan(&id, &status)
	switch {
	case err == nil && status == shipmentPrepared: // prepared already: the same answer again
		return s.reply(ctx, tx, msg, ShipmentPrepared{OrderID: c.OrderID, ShipmentID: id}, "")
	case err == nil:
		return s.reply(ctx, tx, msg, ShipmentFailed{OrderID: c.OrderID}, "shipment was cancelled before it was prepared")
	case !errors.Is(err, sql.ErrNoRows):
		return err
	}
	if chance(s.faults().ShipmentFailureRate) {
		return s.reply(ctx, tx, msg, ShipmentFailed{OrderID: c.OrderID}, "no courier available")
	}
	id = "sh_" + uuid.NewString()
	now := time.Now().UnixMicro()
	if _, err := tx.ExecContext(ctx, s.db.q(`INSERT INTO shop_shipments (order_id, id, customer, sku, qty, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
		c.OrderID, id, c.Customer, c.SKU, c.Qty, shipmentPrepared, now, now); err != nil {
		return err
	}
	return s.reply(ctx, tx, msg, ShipmentPrepared{OrderID: c.OrderID, ShipmentID: id}, "")
}

// cancel compensates a shipment: a prepared one is cancelled once; with
// none, a void one is recorded, so a PrepareShipment arriving late is
// refused.
func (s *shippingNode) cancel(ctx context.Context, tx *sql.Tx, msg courier.Message, c CancelShipment) error {
	var status string
	now := time.Now().UnixMicro()
	err := tx.QueryRowContext(ctx, s.db.q(`SELECT status FROM shop_shipments WHERE order_id = ?`), c.OrderID).Scan(&status)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := tx.ExecContext(ctx, s.db.q(`INSERT INTO shop_shipments (order_id, id, customer, sku, qty, status, created_at, updated_at) VALUES (?, ?, '', '', 0, ?, ?, ?)`),
			c.OrderID, "sh_"+uuid.NewString(), shipmentVoid, now, now); err != nil {
			return err
		}
		return s.reply(ctx, tx, msg, ShipmentCancelled{OrderID: c.OrderID}, "")
	case err != nil:
		return err
	case status == shipmentPrepared:
		if _, err := tx.ExecContext(ctx, s.db.q(`UPDATE shop_shipments SET status = ?, updated_at = ? WHERE order_id = ? AND status = ?`),
			shipmentCancelled, now, c.OrderID, shipmentPrepared); err != nil {
			return err
		}
	}
	return s.reply(ctx, tx, msg, ShipmentCancelled{OrderID: c.OrderID, Cancelled: status != shipmentVoid}, "")
}
