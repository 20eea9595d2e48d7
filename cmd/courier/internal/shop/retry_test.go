package shop_test

import (
	"testing"
	"time"

	"github.com/courier-go/courier/cmd/courier/internal/shop"
	"github.com/courier-go/courier/internal/testenv"
)

// Outbox and inbox retries: inventory's handler fails on every delivery for
// a while (and duplicates some), then recovers; every order still ends, with
// the failures retried and nothing parked.
func TestConvergesAfterHandlerFailures(t *testing.T) {
	onEachStack(t, func(t *testing.T, st *stack) {
		s := st.start(t, st.options(t))
		s.Inventory.SetFaults(shop.Faults{FailureRate: 1})
		res := load(t, s, 40, shop.LoadConfig{Concurrency: 8})
		testenv.Eventually(t, 20*time.Second, func() bool { return s.Inventory.Metrics().Inbox.Retried >= 40 },
			"inventory retried %v deliveries", testenv.Lazy(func() any { return s.Inventory.Metrics().Inbox.Retried }))
		s.Inventory.SetFaults(shop.Faults{FailureRate: 0.2, DuplicateRate: 0.2})
		a := st.settle(t)
		if a.Orders != len(res.Orders) || a.ByState[shop.StateShippingReady] != a.Orders {
			t.Fatalf("%d orders, %v; want all completed", a.Orders, a.ByState)
		}
		if m := s.Inventory.Metrics(); m.Inbox.Parked != 0 || m.Inbox.Applied != int64(a.Orders) {
			t.Fatalf("inventory: %+v; want one application per order and nothing parked", m.Inbox)
		}
	})
}

// Broker outage: the broker goes away mid-run while orders keep coming
// (they are stored with their commands in the outbox), then comes back;
// every relay drains its backlog and every order ends.
func TestConvergesAfterBrokerOutage(t *testing.T) {
	st := sqliteStack(t)
	s := st.start(t, st.options(t))
	c := newClient(t, s)
	first := load(t, s, 20, shop.LoadConfig{Concurrency: 4})

	st.nats.Shutdown()
	var during []string
	for i := range 10 {
		during = append(during, c.place("outage-"+string(rune('a'+i)), mug(1)))
	}
	time.Sleep(500 * time.Millisecond) // relays find the broker gone
	for _, id := range during {
		if v := c.get(id); v.State != shop.StatePaymentPending {
			t.Fatalf("order %s placed while the broker was down is %s; want %s", id, v.State, shop.StatePaymentPending)
		}
	}
	st.startNATS(t)

	a := st.settle(t)
	if a.Orders != len(first.Orders)+len(during) || a.ByState[shop.StateShippingReady] != a.Orders {
		t.Fatalf("%d orders, %v; want %d, all completed", a.Orders, a.ByState, len(first.Orders)+len(during))
	}
}
