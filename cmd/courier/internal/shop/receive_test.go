package shop_test

import (
	"testing"

	"github.com/courier-go/courier/cmd/courier/internal/shop"
)

// Receive idempotency: every command payment receives is delivered twice
// (the chaos broker duplicates them all, and reorders some), yet every order
// is charged once. The inbox skips the copies; the unique constraint on the
// order would refuse a second charge if it did not.
func TestReceiveIdempotency(t *testing.T) {
	onEachStack(t, func(t *testing.T, st *stack) {
		opts := st.options(t)
		opts.Faults = map[string]shop.Faults{shop.Payment: {DuplicateRate: 1, ReorderRate: 0.3}}
		s := st.start(t, opts)
		res := load(t, s, 30, shop.LoadConfig{Concurrency: 4})
		a := st.settle(t)
		if a.Orders != len(res.Orders) || a.Charges != a.Orders || a.Shipments != a.Orders {
			t.Fatalf("%d orders placed, %d stored, %d charged, %d shipped; want all charged and shipped once", len(res.Orders), a.Orders, a.Charges, a.Shipments)
		}
		m := s.Payment.Metrics()
		if m.Chaos.Duplicated < int64(a.Orders) || m.Inbox.Duplicates < int64(a.Orders) {
			t.Fatalf("payment: %d deliveries duplicated, %d skipped as duplicates; want at least one per order", m.Chaos.Duplicated, m.Inbox.Duplicates)
		}
		if m.Inbox.Applied != int64(a.Orders) {
			t.Fatalf("payment applied %d commands for %d orders", m.Inbox.Applied, a.Orders)
		}
	})
}
