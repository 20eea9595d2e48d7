package shop_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/cmd/courier/internal/shop"
	"github.com/courier-go/courier/internal/testenv"
)

// reply is a reply to order id, as a service would send it.
func reply(t *testing.T, id string, v any) courier.Message {
	m, err := courier.NewJSON(shop.TopicOrders, id, v)
	testenv.Must(t, err, "reply")
	return m
}

// ignored returns the reasons of the order's ignored events.
func ignored(v shop.OrderView) []string {
	var out []string
	for _, h := range v.History {
		if h.Outcome == "ignored" {
			out = append(out, h.EventType+": "+h.Reason)
		}
	}
	return out
}

// Out-of-order events: replies the saga is not waiting for (a StockReserved
// and a ShipmentPrepared while the payment is pending, a PaymentSucceeded
// after the order ended) are ignored and recorded in the order's history
// with the reason, and the order completes once, with its own shipment.
func TestOutOfOrderEventsAreIgnoredAndRecorded(t *testing.T) {
	onEachStack(t, func(t *testing.T, st *stack) {
		s := st.start(t, st.options(t))
		s.Payment.SetFaults(shop.Faults{FailureRate: 1}) // every order waits in PaymentPending
		c := newClient(t, s)
		id := c.place(uuid.NewString(), mug(1))
		st.publish(t, reply(t, id, shop.StockReserved{OrderID: id}), reply(t, id, shop.ShipmentPrepared{OrderID: id, ShipmentID: "sh_forged"}))
		var v shop.OrderView
		testenv.Eventually(t, 10*time.Second, func() bool { v = c.get(id); return len(ignored(v)) == 2 },
			"early replies not recorded as ignored: %v", testenv.Lazy(func() any { return v.History }))
		if v.State != shop.StatePaymentPending {
			t.Fatalf("early replies moved the order to %s", v.State)
		}
		for _, r := range ignored(v) {
			if !strings.Contains(r, "out of order") {
				t.Fatalf("ignored early reply, reason %q; want it called out of order", r)
			}
		}

		s.Payment.SetFaults(shop.Faults{})
		st.settle(t)
		v = c.get(id)
		if v.State != shop.StateShippingReady || v.ShipmentID == "sh_forged" || v.ChargeID == "" {
			t.Fatalf("order ended %s with shipment %q and charge %q; want ShippingReady with its own", v.State, v.ShipmentID, v.ChargeID)
		}

		st.publish(t, reply(t, id, shop.PaymentSucceeded{OrderID: id, ChargeID: "ch_again"}))
		testenv.Eventually(t, 10*time.Second, func() bool { v = c.get(id); return len(ignored(v)) == 3 },
			"late reply not recorded as ignored: %v", testenv.Lazy(func() any { return v.History }))
		if r := ignored(v)[2]; !strings.Contains(r, "after the saga ended") {
			t.Fatalf("reply after the end ignored with reason %q", r)
		}
		if v.ChargeID == "ch_again" || v.State != shop.StateShippingReady {
			t.Fatalf("a reply after the end changed the order: %+v", v)
		}
		var states []string
		for _, h := range v.History {
			if h.Outcome == "applied" {
				states = append(states, h.To)
			}
		}
		if got := strings.Join(states, ">"); got != "Placed>PaymentPending>Paid>InventoryReserved>ShippingReady" {
			t.Fatalf("applied transitions %s", got)
		}
	})
}
