package shop_test

import (
	"bytes"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/cmd/courier/internal/shop"
	"github.com/courier-go/courier/idempotency"
)

// Entry idempotency: the same Idempotency-Key twice makes one order and one
// saga; the second response is the first one, replayed. The same key with
// another body is refused, and concurrent retries of one key still make one
// order.
func TestEntryIdempotency(t *testing.T) {
	onEachStack(t, func(t *testing.T, st *stack) {
		s := st.start(t, st.options(t))
		c := newClient(t, s)

		key := uuid.NewString()
		first, body1 := c.post(key, mug(2))
		second, body2 := c.post(key, mug(2))
		if first.StatusCode != http.StatusCreated || second.StatusCode != http.StatusCreated {
			t.Fatalf("POST, POST again: %s %s; %s %s", first.Status, body1, second.Status, body2)
		}
		if first.Header.Get(idempotency.HeaderReplayed) != "" || second.Header.Get(idempotency.HeaderReplayed) != "true" {
			t.Fatalf("Idempotent-Replayed: first %q, second %q; want none, then true",
				first.Header.Get(idempotency.HeaderReplayed), second.Header.Get(idempotency.HeaderReplayed))
		}
		if !bytes.Equal(body1, body2) || second.Header.Get("Location") != first.Header.Get("Location") {
			t.Fatalf("the replay differs: %s (%s) then %s (%s)", body1, first.Header.Get("Location"), body2, second.Header.Get("Location"))
		}
		if resp, body := c.post(key, mug(3)); resp.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("same key, another order: %s %s; want 422", resp.Status, body)
		}

		// A client that times out and retries at once, several times.
		key2 := uuid.NewString()
		var wg sync.WaitGroup
		ids := make(chan string, 8)
		for range 8 {
			wg.Go(func() {
				for {
					resp, body := c.post(key2, mug(1))
					if resp.StatusCode == http.StatusConflict {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					if resp.StatusCode != http.StatusCreated {
						t.Errorf("concurrent POST: %s %s", resp.Status, body)
					}
					ids <- string(body)
					return
				}
			})
		}
		wg.Wait()
		close(ids)
		seen := map[string]bool{}
		for id := range ids {
			seen[id] = true
		}
		if len(seen) != 1 {
			t.Fatalf("8 concurrent POSTs with one key answered %d different orders: %v", len(seen), seen)
		}

		a := st.settle(t)
		if a.Orders != 2 || st.count(t, shop.Orders, "SELECT COUNT(*) FROM courier_sagas") != 2 {
			t.Fatalf("%d orders and %d sagas for two keys", a.Orders, st.count(t, shop.Orders, "SELECT COUNT(*) FROM courier_sagas"))
		}
		if a.Charges != 2 || a.Shipments != 2 {
			t.Fatalf("%d charges, %d shipments for two orders", a.Charges, a.Shipments)
		}
		v := c.get(c.place(uuid.NewString(), shop.PlaceOrder{Customer: "bo", SKU: "mug", Qty: 1, Amount: 1500}))
		if v.Status != shop.StatusOpen && v.Status != shop.StatusCompleted || len(v.History) == 0 || v.History[0].To != shop.StatePlaced {
			t.Fatalf("GET /orders/{id}: %+v", v)
		}
		st.settle(t)
	})
}
