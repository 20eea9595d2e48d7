package shop

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// Invariant is one property every run must end with, and the counts that
// show it.
type Invariant struct {
	Name   string
	OK     bool
	Detail string
}

// Audit is what the four databases say after a run: the orders' outcomes
// and whether the invariants hold. It reads the databases directly, as an
// auditor would; the services never do that to one another.
type Audit struct {
	// Orders counts the orders.
	Orders int
	// ByState counts orders by saga state (open orders by "open").
	ByState map[string]int
	// Reasons counts cancelled orders by reason.
	Reasons map[string]int
	// Latencies are the finished orders' times from placement to their end
	// state, sorted.
	Latencies []time.Duration
	// First and Last are when the first order was placed and the last one
	// finished.
	First, Last time.Time
	// Charges, Refunds, Shipments and Reservations count those rows.
	Charges, Refunds, Shipments, Reservations int
	// Parked counts the deliveries parked at payment, never replayed.
	Parked int
	// AnsweredOnce counts the orders whose charge request payment
	// answered once.
	AnsweredOnce int
	// Invariants are the properties checked, in order.
	Invariants []Invariant

	mismatch []string // orders whose effects do not match their outcome
}

// OK reports whether every invariant holds.
func (a *Audit) OK() bool {
	for _, inv := range a.Invariants {
		if !inv.OK {
			return false
		}
	}
	return true
}

// Open counts the orders whose saga has not ended.
func (a *Audit) Open() int { return a.ByState[StatusOpen] }

// order is an order as the orders database has it.
type auditOrder struct {
	id, sku, status, reason string
	qty                     int
	amount                  int64
}

// AuditShop reads the four databases and checks the invariants:
//
//   - no double charge: at most one charge per order;
//   - every charge request answered once, whatever its version: payment
//     answered each order's ChargeRequested once (the saga's history holds
//     one PaymentSucceeded or PaymentDeclined), or it is still in flight,
//     not parked;
//   - every refund matches a charge: same order, same amount, once;
//   - stock conserved: for every SKU, initial = available + reserved and not
//     released;
//   - no saga stuck: every order completed or cancelled;
//   - shipments only for completed orders, and one for each;
//   - effects match outcomes: a completed order is charged (its amount, not
//     refunded) and holds its stock; a cancelled one holds neither money nor
//     stock.
func AuditShop(ctx context.Context, dbs Databases) (*Audit, error) {
	open := map[string]*serviceDB{}
	defer func() {
		for _, db := range open {
			db.Close()
		}
	}()
	for _, s := range Services {
		db, err := openDB(ctx, dbs.URL(s))
		if err != nil {
			return nil, err
		}
		open[s] = db
	}
	a := &Audit{ByState: map[string]int{}, Reasons: map[string]int{}}
	orders, err := a.readOrders(ctx, open[Orders])
	if err != nil {
		return nil, fmt.Errorf("audit orders: %w", err)
	}
	if err := a.checkPayment(ctx, open[Payment], orders); err != nil {
		return nil, fmt.Errorf("audit payment: %w", err)
	}
	if err := a.checkAnswers(ctx, open[Orders], open[Payment], orders); err != nil {
		return nil, fmt.Errorf("audit charge requests: %w", err)
	}
	if err := a.checkInventory(ctx, open[Inventory], orders); err != nil {
		return nil, fmt.Errorf("audit inventory: %w", err)
	}
	stuck := []string{}
	for _, o := range orders {
		if o.status == StatusOpen {
			stuck = append(stuck, o.id)
		}
	}
	inv := Invariant{Name: "no saga stuck", OK: len(stuck) == 0,
		Detail: fmt.Sprintf("%d orders: %d completed, %d cancelled, %d still running", len(orders),
			a.ByState[StateShippingReady], a.ByState[StateCancelled], len(stuck))}
	if len(stuck) > 0 {
		inv.Detail += " (" + sample(stuck) + ")"
	}
	a.Invariants = append(a.Invariants, inv)
	if err := a.checkShipping(ctx, open[Shipping], orders); err != nil {
		return nil, fmt.Errorf("audit shipping: %w", err)
	}
	a.reorder()
	return a, nil
}

func (a *Audit) readOrders(ctx context.Context, db *serviceDB) (map[string]auditOrder, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT id, sku, qty, amount, status, reason, created_at, finished_at FROM shop_orders`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	orders := map[string]auditOrder{}
	for rows.Next() {
		var o auditOrder
		var created int64
		var finished sql.NullInt64
		if err := rows.Scan(&o.id, &o.sku, &o.qty, &o.amount, &o.status, &o.reason, &created, &finished); err != nil {
			return nil, err
		}
		orders[o.id] = o
		c := time.UnixMicro(created)
		if a.First.IsZero() || c.Before(a.First) {
			a.First = c
		}
		switch o.status {
		case StatusCompleted:
			a.ByState[StateShippingReady]++
		case StatusCancelled:
			a.ByState[StateCancelled]++
			a.Reasons[o.reason]++
		default:
			a.ByState[StatusOpen]++
		}
		if finished.Valid {
			f := time.UnixMicro(finished.Int64)
			a.Latencies = append(a.Latencies, f.Sub(c))
			if f.After(a.Last) {
				a.Last = f
			}
		}
	}
	slices.Sort(a.Latencies)
	a.Orders = len(orders)
	return orders, rows.Err()
}

func (a *Audit) checkPayment(ctx context.Context, db *serviceDB, orders map[string]auditOrder) error {
	type charge struct {
		id     string
		amount int64
	}
	charges := map[string][]charge{}
	chargeByID := map[string]string{}
	err := query(ctx, db, `SELECT id, order_id, amount FROM shop_charges WHERE status = 'charged'`, func(s scan) error {
		var c charge
		var order string
		if err := s(&c.id, &order, &c.amount); err != nil {
			return err
		}
		charges[order] = append(charges[order], c)
		chargeByID[c.id] = order
		a.Charges++
		return nil
	})
	if err != nil {
		return err
	}
	twice, unknown := 0, 0
	for order, cs := range charges {
		if len(cs) > 1 {
			twice++
		}
		if _, ok := orders[order]; !ok {
			unknown++
		}
	}
	a.Invariants = append(a.Invariants, Invariant{Name: "no double charge", OK: twice == 0 && unknown == 0,
		Detail: fmt.Sprintf("%d charges for %d orders: %d charged twice, %d for unknown orders", a.Charges, len(charges), twice, unknown)})

	refunded := map[string]bool{}
	bad := 0
	err = query(ctx, db, `SELECT order_id, charge_id, amount FROM shop_refunds`, func(s scan) error {
		var order, chargeID string
		var amount int64
		if err := s(&order, &chargeID, &amount); err != nil {
			return err
		}
		a.Refunds++
		cs := charges[order]
		if refunded[order] || chargeByID[chargeID] != order || len(cs) != 1 || cs[0].amount != amount {
			bad++
		}
		refunded[order] = true
		return nil
	})
	if err != nil {
		return err
	}
	a.Invariants = append(a.Invariants, Invariant{Name: "every refund matches a charge", OK: bad == 0,
		Detail: fmt.Sprintf("%d refunds: %d without a charge of the same order and amount", a.Refunds, bad)})

	// Money against outcomes, checked with the stock below.
	for id, o := range orders {
		cs := charges[id]
		switch o.status {
		case StatusCompleted:
			if len(cs) != 1 || cs[0].amount != o.amount || refunded[id] {
				a.mismatch = append(a.mismatch, id+" completed but not charged its amount once")
			}
		case StatusCancelled:
			if len(cs) > 0 && !refunded[id] {
				a.mismatch = append(a.mismatch, id+" cancelled but still charged")
			}
		}
	}
	return nil
}

// checkAnswers checks that payment answered every order's ChargeRequested
// once: the orders' saga history records every reply that arrived, applied
// or ignored, and a request not answered yet must be in flight, not parked
// at payment.
func (a *Audit) checkAnswers(ctx context.Context, ordersDB, paymentDB *serviceDB, orders map[string]auditOrder) error {
	answers := map[string]int{}
	err := query(ctx, ordersDB, ordersDB.q(`SELECT saga_id, COUNT(*) FROM courier_saga_history WHERE saga_type = ? AND event_type IN (?, ?) GROUP BY saga_id`),
		func(s scan) error {
			var id string
			var n int
			if err := s(&id, &n); err != nil {
				return err
			}
			answers[id] = n
			return nil
		}, sagaType, courier.TypeName(PaymentSucceeded{}), courier.TypeName(PaymentDeclined{}))
	if err != nil {
		return err
	}
	parked, err := paymentDB.Admin().ListParked(ctx, store.ListQuery{Consumer: Payment, Limit: store.MaxListLimit})
	if err != nil {
		return err
	}
	a.Parked = len(parked)
	once, pending := 0, 0
	var twice []string
	for id := range orders {
		switch n := answers[id]; {
		case n == 1:
			once++
		case n == 0:
			pending++
		default:
			twice = append(twice, id)
		}
	}
	sort.Strings(twice)
	a.AnsweredOnce = once
	inv := Invariant{Name: "every charge request answered once", OK: len(twice) == 0 && a.Parked == 0,
		Detail: fmt.Sprintf("%d orders: %d answered once, %d more than once, %d still in flight; %d deliveries parked at payment",
			len(orders), once, len(twice), pending, a.Parked)}
	if len(twice) > 0 {
		inv.Detail += " (" + sample(twice) + ")"
	}
	a.Invariants = append(a.Invariants, inv)
	return nil
}

func (a *Audit) checkInventory(ctx context.Context, db *serviceDB, orders map[string]auditOrder) error {
	type sku struct{ initial, available, reserved int64 }
	skus := map[string]*sku{}
	err := query(ctx, db, `SELECT sku, initial, available FROM shop_stock`, func(s scan) error {
		var name string
		k := &sku{}
		if err := s(&name, &k.initial, &k.available); err != nil {
			return err
		}
		skus[name] = k
		return nil
	})
	if err != nil {
		return err
	}
	held := map[string]int{}
	err = query(ctx, db, `SELECT order_id, sku, qty FROM shop_reservations WHERE released_at IS NULL`, func(s scan) error {
		var order, name string
		var qty int
		if err := s(&order, &name, &qty); err != nil {
			return err
		}
		a.Reservations++
		held[order] = qty
		if k := skus[name]; k != nil {
			k.reserved += int64(qty)
		} else {
			skus[name] = &sku{reserved: int64(qty), initial: -1}
		}
		return nil
	})
	if err != nil {
		return err
	}
	var initial, available, reserved int64
	var off []string
	for name, k := range skus {
		initial, available, reserved = initial+k.initial, available+k.available, reserved+k.reserved
		if k.initial != k.available+k.reserved || k.available < 0 {
			off = append(off, fmt.Sprintf("%s: %d ≠ %d + %d", name, k.initial, k.available, k.reserved))
		}
	}
	sort.Strings(off)
	inv := Invariant{Name: "stock conserved", OK: len(off) == 0,
		Detail: fmt.Sprintf("%d SKUs: initial %d = available %d + reserved %d", len(skus), initial, available, reserved)}
	if len(off) > 0 {
		inv.Detail = fmt.Sprintf("%d of %d SKUs off: %s", len(off), len(skus), strings.Join(off, "; "))
	}
	a.Invariants = append(a.Invariants, inv)

	for id, o := range orders {
		qty, holds := held[id]
		switch {
		case o.status == StatusCompleted && (!holds || qty != o.qty):
			a.mismatch = append(a.mismatch, id+" completed without its stock reserved")
		case o.status == StatusCancelled && holds:
			a.mismatch = append(a.mismatch, id+" cancelled but still holds stock")
		}
	}
	for id := range held {
		if _, ok := orders[id]; !ok {
			a.mismatch = append(a.mismatch, id+" holds stock but is no order")
		}
	}
	return nil
}

func (a *Audit) checkShipping(ctx context.Context, db *serviceDB, orders map[string]auditOrder) error {
	prepared := map[string]bool{}
	err := query(ctx, db, `SELECT order_id, status FROM shop_shipments`, func(s scan) error {
		var order, status string
		if err := s(&order, &status); err != nil {
			return err
		}
		if status == shipmentPrepared {
			prepared[order] = true
			a.Shipments++
		}
		return nil
	})
	if err != nil {
		return err
	}
	var wrong, missing []string
	for id := range prepared {
		if orders[id].status != StatusCompleted {
			wrong = append(wrong, id)
		}
	}
	completed := 0
	for id, o := range orders {
		if o.status == StatusCompleted {
			completed++
			if !prepared[id] {
				missing = append(missing, id)
			}
		}
	}
	inv := Invariant{Name: "shipments only for completed orders", OK: len(wrong) == 0 && len(missing) == 0,
		Detail: fmt.Sprintf("%d shipments prepared for %d completed orders: %d for other orders, %d completed orders without one",
			a.Shipments, completed, len(wrong), len(missing))}
	if len(wrong)+len(missing) > 0 {
		inv.Detail += " (" + sample(append(wrong, missing...)) + ")"
	}
	a.Invariants = append(a.Invariants, inv)

	inv = Invariant{Name: "effects match outcomes", OK: len(a.mismatch) == 0,
		Detail: "completed orders charged once and holding their stock, cancelled ones holding neither"}
	if len(a.mismatch) > 0 {
		sort.Strings(a.mismatch)
		inv.Detail = fmt.Sprintf("%d orders off: %s", len(a.mismatch), sample(a.mismatch))
	}
	a.Invariants = append(a.Invariants, inv)
	return nil
}

// reorder puts the invariants in the order the report lists them.
func (a *Audit) reorder() {
	order := []string{"no double charge", "every charge request answered once", "every refund matches a charge", "stock conserved", "no saga stuck",
		"shipments only for completed orders", "effects match outcomes"}
	slices.SortStableFunc(a.Invariants, func(x, y Invariant) int {
		return slices.Index(order, x.Name) - slices.Index(order, y.Name)
	})
}

// percentile returns the p-th percentile (0–100) of the sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return sorted[i]
}

type scan func(dest ...any) error

// query runs q with args and calls row for every row.
func query(ctx context.Context, db *serviceDB, q string, row func(scan) error, args ...any) error {
	rows, err := db.sql.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

// sample lists a few of ids.
func sample(ids []string) string {
	if len(ids) <= 3 {
		return strings.Join(ids, ", ")
	}
	return strings.Join(ids[:3], ", ") + fmt.Sprintf(" and %d more", len(ids)-3)
}
