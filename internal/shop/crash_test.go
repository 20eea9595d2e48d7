package shop_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-go/courier/internal/shop"
	"github.com/courier-go/courier/internal/testenv"
)

// Crashes mid-run: while orders flow, an instance of the orders service
// and one of inventory are killed (contexts cancelled, nothing drained:
// relay leases, unacknowledged deliveries and HTTP requests in flight are
// left behind) and restarted on the same databases, while the other
// instance of each goes on, and both instances of payment crash by
// themselves at once (Faults.CrashAfter); with duplicated, reordered and
// failing deliveries, declines, exhausted stock and failed shipments on
// top. Every order ends and every invariant holds.
func TestServicesCrashAndRestartMidRun(t *testing.T) {
	onEachStack(t, func(t *testing.T, st *stack) {
		opts := st.options(t)
		opts.Stock = map[string]int{"mug": 1000, "tee": 60}
		chaos := shop.Faults{FailureRate: 0.1, DuplicateRate: 0.1, ReorderRate: 0.1}
		payment, shipping := chaos, chaos
		payment.DeclineRate, payment.CrashAfter = 0.1, 1500*time.Millisecond
		shipping.ShipmentFailureRate = 0.05
		opts.Faults = map[string]shop.Faults{shop.Orders: chaos, shop.Payment: payment, shop.Inventory: chaos, shop.Shipping: shipping}
		s := st.start(t, opts)

		const n = 150
		var placed atomic.Int64
		// The last third of the orders waits for payment's crash, so that
		// it comes mid-run however fast the first two thirds go.
		paymentCrashed := make(chan struct{})
		go func() {
			defer close(paymentCrashed)
			for deadline := time.Now().Add(time.Minute); s.Crashes()[shop.Payment] == 0 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
		}()
		done := make(chan shop.LoadResult, 1)
		go func() {
			done <- load(t, s, n, shop.LoadConfig{Concurrency: 8, ReplayRate: 0.1, Placed: func(i int) {
				placed.Store(int64(i))
				if i >= 5*n/6 {
					<-paymentCrashed
				}
			}})
		}()
		for _, c := range []struct {
			at      int64
			service string
		}{{n / 3, shop.Orders}, {2 * n / 3, shop.Inventory}} {
			testenv.Eventually(t, 60*time.Second, func() bool { return placed.Load() >= c.at }, "only %v orders placed",
				testenv.Lazy(func() any { return placed.Load() }))
			testenv.Must(t, s.Restart(c.service), "restart "+c.service)
		}
		var res shop.LoadResult
		select {
		case res = <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("placing the orders took over a minute")
		}
		a := st.settle(t)
		crashes := s.Crashes()
		if crashes[shop.Orders] != 1 || crashes[shop.Inventory] != 1 || crashes[shop.Payment] != s.Instances() {
			t.Fatalf("crashes %v; want orders and inventory once each, and each instance of payment once", crashes)
		}
		if a.Orders != n || len(res.Orders) != n || res.ReplayMismatches != 0 {
			t.Fatalf("%d orders stored, %d placed, %d replays for another order; want %d, %d, 0", a.Orders, len(res.Orders), res.ReplayMismatches, n, n)
		}
		if a.ByState[shop.StateShippingReady] == 0 || a.ByState[shop.StateCancelled] == 0 {
			t.Fatalf("orders by state %v: want some completed and some cancelled", a.ByState)
		}
		t.Logf("%v, cancelled because %v", a.ByState, a.Reasons)
	})
}
