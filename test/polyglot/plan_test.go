package polyglot

import (
	"encoding/base64"
	"fmt"
)

// standardPlan is the plan every writer carries out: committed and
// rolled-back transactions, written and scheduled messages, every kind of
// payload, defaults and explicit fields, several keys written across
// transactions (whose order must hold), and text beyond ASCII.
func standardPlan() []planTx {
	text := func(s string) *string { return &s }
	bin := func(b []byte) *string { s := base64.StdEncoding.EncodeToString(b); return &s }
	txs := []planTx{
		{Order: order{"order-1", "placed"}, Commit: true, Messages: []planMessage{
			{Topic: "orders", Key: "order-1", Type: "OrderPlaced", PayloadJSON: map[string]any{"order_id": "order-1", "total": 1999, "lines": []any{"book", "pen"}}},
			{Topic: "orders", Key: "order-1", Type: "OrderNoted", PayloadText: text("gift wrap, s'il vous plaît ✓")},
			{ID: "0190d6f8-2b3c-7d4e-8f60-7182a3b4c5d6", Topic: "orders", Key: "order-1", Type: "Blob", PayloadBase64: bin([]byte{0, 1, 2, 0xfe, 0xff}),
				Headers: map[string]string{
					"traceparent":            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
					"Courier-Correlation-Id": "checkout-77",
					"x-note":                 "ünïcødé <&> \"quoted\" \\ tab\there",
				}},
		}},
		{Order: order{"order-2", "rolled back"}, Commit: false, Messages: []planMessage{
			{Topic: "orders", Key: "order-2", Type: "OrderPlaced", PayloadJSON: map[string]any{"order_id": "order-2"}},
			{Topic: "payments", Key: "order-2", Type: "PaymentRequested", PayloadText: text("never")},
		}},
		{Order: order{"order-3", "paid"}, Commit: true, Messages: []planMessage{
			{Topic: "payments", Key: "order-3", Type: "PaymentTaken", Version: 2, ContentType: "application/vnd.shop.payment+json",
				PayloadText: text(`{"amount":1999}`), OccurredAt: "2026-03-04T05:06:07.123456Z"},
			{Topic: "orders", Key: "order-1", Type: "OrderPaid", PayloadJSON: []any{1, "two", 3.5, nil, true}},
			{Topic: "orders", Key: "заказ-ß", Type: "OrderPlaced", PayloadBase64: bin(nil)},
		}},
		{Order: order{"order-4", "reminder"}, Commit: true, Due: map[string]any{"after_ms": 300}, Messages: []planMessage{
			{Topic: "orders", Key: "order-4", Type: "ReminderDue", PayloadText: text("remind me"), Headers: map[string]string{"x-reason": "unpaid"}},
		}},
		{Order: order{"order-5", "reminder rolled back"}, Commit: false, Due: map[string]any{"after_ms": 1}, Messages: []planMessage{
			{Topic: "orders", Key: "order-5", Type: "ReminderDue", PayloadText: text("never")},
		}},
		{Order: order{"order-6", "archived"}, Commit: true, Due: map[string]any{"at": "2020-01-01T00:00:00Z"}, Messages: []planMessage{
			{Topic: "orders", Key: "order-6", Type: "Archived", PayloadText: text("due long ago")},
		}},
	}
	// A burst on a few keys: each key's messages must arrive in this order.
	var burst []planMessage
	for i := range 24 {
		burst = append(burst, planMessage{Topic: "orders", Key: fmt.Sprintf("order-%d", 10+i%4), Type: "Numbered",
			PayloadJSON: map[string]any{"seq": i}, Headers: map[string]string{"x-seq": fmt.Sprint(i)}})
	}
	txs = append(txs,
		planTx{Order: order{"order-10", "burst"}, Commit: true, Messages: burst[:12]},
		planTx{Order: order{"order-11", "burst rolled back"}, Commit: false, Messages: burst[12:16]},
		planTx{Order: order{"order-12", "burst"}, Commit: true, Messages: burst[16:]},
		planTx{Order: order{"order-13", "last"}, Commit: true, Messages: []planMessage{
			{Topic: "orders", Key: "order-1", Type: "OrderShipped", PayloadJSON: map[string]any{}},
		}},
	)
	return txs
}
