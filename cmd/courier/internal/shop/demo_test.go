package shop_test

import (
	"context"
	"strings"
	"testing"

	"github.com/courier-go/courier/cmd/courier/internal/shop"
	"github.com/courier-go/courier/internal/testenv"
)

// The demo end to end, small: every fault, a crash, and a report whose
// invariants all hold.
func TestRunDemo(t *testing.T) {
	onEachStack(t, func(t *testing.T, st *stack) {
		f := shop.Faults{FailureRate: 0.05, DuplicateRate: 0.1, ReorderRate: 0.1}
		payment, shipping := f, f
		payment.DeclineRate, shipping.ShipmentFailureRate = 0.1, 0.05
		rep, err := shop.RunDemo(context.Background(), shop.DemoConfig{
			Databases: st.dbs, BrokerURL: st.brokerURL, Stream: st.stream, SubjectPrefix: st.prefix,
			Orders: 100, Faults: map[string]shop.Faults{shop.Orders: f, shop.Payment: payment, shop.Inventory: f, shop.Shipping: shipping},
			// Five vinyls for some twenty orders of one to three: certainly exhausted.
			Stock:      map[string]int{"mug": 200, "tee": 200, "cap": 200, "poster": 200, "vinyl": 5},
			ReplayRate: 0.1, Crash: shop.Payment, InFlight: demoInFlight, Timeouts: shop.Timeouts{Step: stepTimeout}, Logger: testLogger(t),
		})
		testenv.Must(t, err, "demo")
		checkInstances(t, rep)
		var out strings.Builder
		_, err = rep.WriteTo(&out)
		testenv.Must(t, err, "report")
		if !rep.OK() || rep.TimedOut {
			t.Fatalf("demo failed:\n%s", out.String())
		}
		for _, want := range []string{"ShippingReady (completed)", "inventory: out of stock: vinyl", "payment: card declined",
			"Throughput", "p99", "each service ran as 2 instances", "messages applied by each", "one order per Idempotency-Key", "payment ×1", "All 8 invariants hold."} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("report lacks %q:\n%s", want, out.String())
			}
		}
	})
}
