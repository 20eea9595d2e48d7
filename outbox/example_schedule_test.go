package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/memstore"
)

// Schedule a payment reminder for thirty minutes after the order, in the
// order's transaction, and cancel it in the transaction that records the
// payment. Here the outbox is in memory and its clock moves when told; on
// a database, the same calls take the caller's transaction and a relay
// publishes what falls due.
func ExampleWriter_Schedule() {
	ctx := context.Background()
	clock := memstore.NewClock()
	clock.Set(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	st := memstore.New(memstore.Config{Clock: clock.Now})
	w := outbox.New(st, outbox.Config{})

	reminder := courier.NewMessage("payments", "order-42", "PaymentReminder", []byte(`{"order_id":"order-42"}`))
	_ = st.InTx(ctx, func(tx *memstore.Tx) error { // the order's transaction
		return w.Schedule(ctx, tx, outbox.After(30*time.Minute), reminder)
	})
	for _, s := range st.Scheduled() {
		fmt.Println("waiting:", s.Type, "due", s.Due.Format("15:04"))
	}

	err := st.InTx(ctx, func(tx *memstore.Tx) error { // the payment's transaction
		return w.Cancel(ctx, tx, reminder.ID)
	})
	fmt.Println("cancelled:", err == nil, "waiting:", len(st.Scheduled()))

	// A second reminder is not cancelled in time: once due, a relay
	// releases it into the outbox, and cancelling it says so.
	late := courier.NewMessage("payments", "order-43", "PaymentReminder", []byte(`{"order_id":"order-43"}`))
	_ = st.InTx(ctx, func(tx *memstore.Tx) error { return w.Schedule(ctx, tx, outbox.After(30*time.Minute), late) })
	clock.Advance(30 * time.Minute)
	released, _ := st.Release(ctx, 100) // what a relay does when it falls due
	fmt.Println("released:", released.Count, "pending:", len(st.Pending()))
	err = st.InTx(ctx, func(tx *memstore.Tx) error { return w.Cancel(ctx, tx, late.ID) })
	fmt.Println("too late:", errors.Is(err, store.ErrAlreadyDue))
	// Output:
	// waiting: PaymentReminder due 09:30
	// cancelled: true waiting: 0
	// released: 1 pending: 1
	// too late: true
}
