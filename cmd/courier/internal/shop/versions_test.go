package shop_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/cmd/courier/internal/shop"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
)

// Payment meets each version of ChargeRequested as its build knows it: a
// payment that knows only version 1 neither applies nor loses a version 2
// request (it waits, uncounted, then is parked as newer_version); deployed
// with version 2, payment applies it on replay, charges a version 1
// request from a producer not yet deployed through its upcaster (its
// amount in the shop's currency), and a version 2 request in another
// currency is declined, not charged as euros.
func TestPaymentMeetsBothChargeVersions(t *testing.T) {
	onEachStack(t, func(t *testing.T, st *stack) {
		opts := st.options(t)
		opts.ChargeVersion, opts.NewerVersionWait = 1, 300*time.Millisecond
		s := st.start(t, opts)
		c := newClient(t, s)
		settled := func(id, state string) shop.OrderView {
			t.Helper()
			var v shop.OrderView
			testenv.Eventually(t, 30*time.Second, func() bool { v = c.get(id); return v.Phase == "completed" || v.Phase == "cancelled" },
				"order %s did not end: %v", id, testenv.Lazy(func() any { return v }))
			if v.State != state {
				t.Fatalf("order %s ended %s (%s); want %s", id, v.State, v.Reason, state)
			}
			return v
		}
		amount := func(order string) int {
			return st.count(t, shop.Payment, fmt.Sprintf(`SELECT COALESCE(SUM(amount), -1) FROM shop_charges WHERE status = 'charged' AND order_id = '%s'`, order))
		}

		// Version 1 throughout.
		first := c.place("v1", mug(1))
		settled(first, shop.StateShippingReady)

		// Orders writes version 2; payment does not know it yet.
		testenv.Must(t, s.Deploy(shop.Orders, 2, nil), "deploy orders")
		c.http.CloseIdleConnections()
		testenv.Eventually(t, 30*time.Second, func() bool {
			resp, err := c.http.Get(c.url + "/orders/" + first)
			if err == nil {
				resp.Body.Close()
			}
			return err == nil && resp.StatusCode == http.StatusOK
		}, "the orders service did not come back after its deploy")
		waiting := c.place("v2-early", mug(2))
		testenv.Eventually(t, 30*time.Second, func() bool { return s.Payment.Metrics().Charges.Parked > 0 },
			"the version 2 request was not parked: payment's counts %v", testenv.Lazy(func() any { return s.Payment.Metrics().Charges }))
		ch := s.Payment.Metrics().Charges
		if v := c.get(waiting); v.State != shop.StatePaymentPending || ch.Waited != 1 || ch.WaitRuns < 2 || ch.V1 != 1 || ch.V2 != 0 {
			t.Fatalf("order %s is %s, payment's counts %+v; want it waiting for payment, its request retried then parked, not applied", waiting, v.State, ch)
		}
		parked := parkedAt(t, st, shop.Payment)
		if len(parked) != 1 || parked[0].Reason != store.ReasonNewerVersion {
			t.Fatalf("parked at payment: %+v; want the version 2 request, as newer_version", parked)
		}

		// Payment deployed with version 2: the replay applies it.
		testenv.Must(t, s.Deploy(shop.Payment, 2, nil), "deploy payment")
		replay(t, st, shop.Payment, parked[0].ID)
		settled(waiting, shop.StateShippingReady)
		later := c.place("v2", mug(3))
		settled(later, shop.StateShippingReady)
		if a := st.settle(t); a.Parked != 0 || a.Charges != 3 {
			t.Fatalf("audit: %d parked, %d charges; want none parked, 3 charges", a.Parked, a.Charges)
		}

		// A producer still writing version 1, and one in another currency
		// (for orders the orders service does not know: it ignores the
		// replies).
		legacy, dollars := uuid.NewString(), uuid.NewString()
		v1, err := courier.NewJSON(shop.TopicPayment, legacy, shop.ChargeRequestedV1{OrderID: legacy, Customer: "ada", Amount: 1234})
		testenv.Must(t, err, "v1 request")
		v2, err := courier.NewJSON(shop.TopicPayment, dollars, shop.ChargeRequested{OrderID: dollars, Customer: "ada", Amount: shop.Money{Value: 1234, Currency: "USD"}})
		testenv.Must(t, err, "v2 request")
		if v1.Version != 1 || v2.Version != 2 || v1.Type != v2.Type {
			t.Fatalf("requests of type %s version %d and %s version %d; want ChargeRequested, 1 and 2", v1.Type, v1.Version, v2.Type, v2.Version)
		}
		st.publish(t, v1, v2)
		testenv.Eventually(t, 30*time.Second, func() bool { return s.Payment.Metrics().Charges.V2 >= 2 && s.Payment.Metrics().Charges.Upcast >= 1 },
			"payment's counts %v", testenv.Lazy(func() any { return s.Payment.Metrics().Charges }))

		for order, want := range map[string]int{first: 1500, waiting: 3000, later: 4500, legacy: 1234, dollars: -1} {
			if got := amount(order); got != want {
				t.Errorf("order %s charged %d; want %d (-1: not charged)", order, got, want)
			}
		}
		if ps := parkedAt(t, st, shop.Payment); len(ps) != 0 {
			t.Fatalf("parked at payment: %+v; want none", ps)
		}
		if ch := s.Payment.Metrics().Charges; ch.V1 != 1 || ch.Upcast != 1 || ch.V2 != 2 || ch.Replayed != 1 || ch.Parked != 1 {
			t.Fatalf("payment's counts %+v; want v1 1, upcast 1, v2 2 (one in dollars, declined), replayed 1, parked 1", ch)
		}
	})
}

// parkedAt lists the deliveries parked at service.
func parkedAt(t *testing.T, st *stack, service string) []store.ParkedSummary {
	t.Helper()
	db, err := dburl.Open(context.Background(), st.dbs.URL(service), dburl.Options{BarePaths: true})
	testenv.Must(t, err, "open "+service)
	defer db.Close()
	ps, err := db.Admin().ListParked(context.Background(), store.ListQuery{Consumer: service})
	testenv.Must(t, err, "list parked")
	return ps
}

// replay asks for the replay of a parked delivery, as courier dlq replay
// does, and waits until service applied it.
func replay(t *testing.T, st *stack, service string, id int64) {
	t.Helper()
	db, err := dburl.Open(context.Background(), st.dbs.URL(service), dburl.Options{BarePaths: true})
	testenv.Must(t, err, "open "+service)
	defer db.Close()
	testenv.Must(t, db.Admin().RequestReplay(context.Background(), id), "request the replay")
	testenv.Eventually(t, 30*time.Second, func() bool { return len(parkedAt(t, st, service)) == 0 }, "parked message %d was not replayed", id)
}
