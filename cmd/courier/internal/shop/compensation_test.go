package shop_test

import (
	"testing"
	"time"

	"github.com/courier-go/courier/cmd/courier/internal/shop"
)

// No double compensation: shipping fails every order, so each order's stock
// is released and its charge refunded. Payment and inventory fail half
// their deliveries (the inbox retries them), and the compensations'
// confirmation timeout is shorter than such a retry, so compensations are
// sent several times; some deliveries are duplicated on top. Each order is
// still released and refunded once: stock is conserved, one refund per
// charge, and each step compensated once in the saga's history.
func TestNoDoubleCompensation(t *testing.T) {
	onEachStack(t, func(t *testing.T, st *stack) {
		opts := st.options(t)
		opts.Timeouts = shop.Timeouts{Step: stepTimeout, Compensation: 60 * time.Millisecond}
		opts.DeadlineEvery = 20 * time.Millisecond
		opts.Faults = map[string]shop.Faults{
			shop.Shipping:  {ShipmentFailureRate: 1},
			shop.Payment:   {DuplicateRate: 0.3, FailureRate: 0.5},
			shop.Inventory: {DuplicateRate: 0.3, FailureRate: 0.5},
		}
		s := st.start(t, opts)
		res := load(t, s, 20, shop.LoadConfig{Concurrency: 4})
		a := st.settle(t)
		n := len(res.Orders)
		if a.ByState[shop.StateCancelled] != n || a.Charges != n || a.Refunds != n || a.Reservations != 0 {
			t.Fatalf("%d orders: %v, %d charges, %d refunds, %d reservations held; want all cancelled, charged and refunded once, none held",
				n, a.ByState, a.Charges, a.Refunds, a.Reservations)
		}
		for reason, count := range a.Reasons {
			if reason != "shipping: no courier available" {
				t.Fatalf("%d orders cancelled because %q", count, reason)
			}
		}
		refunds := s.Payment.Metrics().Inbox.Applied - int64(n) // less the charges
		releases := s.Inventory.Metrics().Inbox.Applied - int64(n)
		if refunds <= int64(n) && releases <= int64(n) {
			t.Fatalf("%d refund and %d release commands for %d orders: the compensations were not sent again, the test proves nothing", refunds, releases, n)
		}
		t.Logf("%d orders: %d RefundRequested and %d ReleaseStock applied, one refund and one release each", n, refunds, releases)

		c := newClient(t, s)
		for _, o := range res.Orders {
			compensated := map[string]int{}
			for _, h := range c.get(o.ID).History {
				if h.Outcome == "applied" && (h.Reason == "payment compensated" || h.Reason == "inventory compensated") {
					compensated[h.Reason]++
				}
			}
			if compensated["payment compensated"] != 1 || compensated["inventory compensated"] != 1 {
				t.Fatalf("order %s: compensations recorded %v; want each once", o.ID, compensated)
			}
		}
	})
}
