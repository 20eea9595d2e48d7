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

// PaymentService charges orders and refunds them:
//
//	ChargeRequested → PaymentSucceeded, or PaymentDeclined (Faults.DeclineRate, or the order was refunded first)
//	RefundRequested → PaymentRefunded, whether there was a charge to refund or not
//
// Built with version 2 of ChargeRequested (Config.ChargeVersion), it has
// one handler of version 2 and an upcaster from version 1, so requests
// written before orders was deployed with version 2 are charged alike.
// Built with version 1 only, it charges version 1 requests and meets
// version 2 ones as newer than it knows: they wait for its deploy.
//
// An order is charged at most once: the inbox applies each command once,
// the handler answers a repeated charge with the existing one, and a unique
// constraint on the order backs both up.
type PaymentService struct{ *base }

var _ Service = (*PaymentService)(nil)

// NewPayment returns the payment service.
func NewPayment(cfg Config) (*PaymentService, error) {
	b, err := newBase(Payment, cfg)
	if err != nil {
		return nil, err
	}
	p := &PaymentService{base: b}
	b.spec = spec{tables: paymentTables, topic: TopicPayment, setup: p.setup}
	return p, nil
}

func (p *PaymentService) setup(_ context.Context, n *node, _ time.Duration) (incarnation, error) {
	pn := &paymentNode{node: n, faults: p.Faults}
	version := p.ChargeVersion()
	r := inbox.NewRouter[*sql.Tx]()
	switch version {
	case 1:
		inbox.On(r, func(ctx context.Context, tx *sql.Tx, msg courier.Message, v1 ChargeRequestedV1) error {
			c, _ := upcastCharge(v1)
			return pn.charge(ctx, tx, msg, c)
		})
	default:
		inbox.Upcast(r, upcastCharge)
		inbox.On(r, pn.charge)
	}
	inbox.On(r, pn.refund)
	n.log.Info("payment handles ChargeRequested", "up_to_version", version)
	return incarnation{handler: r.Handler(), observer: p.charges.observer(version)}, nil
}

type paymentNode struct {
	*node
	faults func() Faults
}

// Charge statuses.
const (
	chargeCharged = "charged"
	// chargeVoid marks an order refunded before any charge arrived:
	// a late ChargeRequested is declined.
	chargeVoid = "void"
)

func (p *paymentNode) charge(ctx context.Context, tx *sql.Tx, msg courier.Message, c ChargeRequested) error {
	var chargeID, status string
	err := tx.QueryRowContext(ctx, p.db.q(`SELECT id, status FROM shop_charges WHERE order_id = ?`), c.OrderID).Scan(&chargeID, &status)
	switch {
	case err == nil && status == chargeCharged: // charged already: the same answer again
		return p.reply(ctx, tx, msg, PaymentSucceeded{OrderID: c.OrderID, ChargeID: chargeID}, "")
	case err == nil:
		return p.reply(ctx, tx, msg, PaymentDeclined{OrderID: c.OrderID}, "order was refunded before the charge arrived")
	case !errors.Is(err, sql.ErrNoRows):
		return err
	case c.Amount.Value < 1:
		return p.reply(ctx, tx, msg, PaymentDeclined{OrderID: c.OrderID}, "invalid amount")
	case c.Amount.Currency != Currency:
		return p.reply(ctx, tx, msg, PaymentDeclined{OrderID: c.OrderID}, "currency "+c.Amount.Currency+" not accepted")
	case chance(p.faults().DeclineRate):
		return p.reply(ctx, tx, msg, PaymentDeclined{OrderID: c.OrderID}, "card declined")
	}
	chargeID = "ch_" + uuid.NewString()
	if err := p.insertCharge(ctx, tx, chargeID, c.OrderID, c.Customer, c.Amount.Value, chargeCharged); err != nil {
		return err
	}
	return p.reply(ctx, tx, msg, PaymentSucceeded{OrderID: c.OrderID, ChargeID: chargeID}, "")
}

// insertCharge inserts the order's one row. A concurrent transaction that
// inserted it first makes this fail (unique order): the inbox retries, and
// the retry sees that row.
func (p *paymentNode) insertCharge(ctx context.Context, tx *sql.Tx, id, order, customer string, amount int64, status string) error {
	_, err := tx.ExecContext(ctx, p.db.q(`INSERT INTO shop_charges (id, order_id, customer, amount, status, created_at) VALUES (?, ?, ?, ?, ?, ?)`),
		id, order, customer, amount, status, time.Now().UnixMicro())
	return err
}

// refund compensates a charge. It refunds the order's charge once; with no
// charge it records the order as void, so a charge arriving late (after its
// step timed out) is declined instead of taking money nobody returns.
func (p *paymentNode) refund(ctx context.Context, tx *sql.Tx, msg courier.Message, c RefundRequested) error {
	var chargeID, status string
	var amount int64
	err := tx.QueryRowContext(ctx, p.db.q(`SELECT id, amount, status FROM shop_charges WHERE order_id = ?`), c.OrderID).Scan(&chargeID, &amount, &status)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if err := p.insertCharge(ctx, tx, "void_"+uuid.NewString(), c.OrderID, "", 0, chargeVoid); err != nil {
			return err
		}
		return p.reply(ctx, tx, msg, PaymentRefunded{OrderID: c.OrderID}, "")
	case err != nil:
		return err
	case status == chargeVoid:
		return p.reply(ctx, tx, msg, PaymentRefunded{OrderID: c.OrderID}, "")
	}
	refunded, err := exists(ctx, tx, p.db.q(`SELECT 1 FROM shop_refunds WHERE order_id = ?`), c.OrderID)
	if err != nil {
		return err
	}
	if !refunded {
		// Two refunds at once: the second insert fails (primary key) and
		// is retried by the inbox, then finds this one.
		if _, err := tx.ExecContext(ctx, p.db.q(`INSERT INTO shop_refunds (order_id, charge_id, amount, created_at) VALUES (?, ?, ?, ?)`),
			c.OrderID, chargeID, amount, time.Now().UnixMicro()); err != nil {
			return err
		}
	}
	return p.reply(ctx, tx, msg, PaymentRefunded{OrderID: c.OrderID, Refunded: true}, "")
}

// exists reports whether query returns a row.
func exists(ctx context.Context, tx *sql.Tx, query string, args ...any) (bool, error) {
	var one int
	err := tx.QueryRowContext(ctx, query, args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}
