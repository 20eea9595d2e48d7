package outbox_test

import (
	"context"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/postgres"
)

// Write an order and the message announcing it in one transaction.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	w := outbox.New(postgres.Pgx(), outbox.Config{})

	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "INSERT INTO orders (id, total) VALUES ($1, $2)", "order-42", 1999); err != nil {
		panic(err)
	}
	msg, err := courier.NewJSON("orders", "order-42", map[string]any{"order_id": "order-42", "total": 1999},
		courier.WithType("OrderPlaced"))
	if err != nil {
		panic(err)
	}
	if err := w.Write(ctx, tx, msg); err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil { // the order and its message, or neither
		panic(err)
	}
}

// Aggregates record events while they change; one call writes and clears them.
func ExampleEvents() {
	type Order struct {
		outbox.Events
		ID string
	}
	o := &Order{ID: "order-42"}
	_ = o.RecordJSON("orders", o.ID, map[string]string{"order_id": o.ID}, courier.WithType("OrderPlaced"))

	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	w := outbox.New(postgres.Pgx(), outbox.Config{})
	tx, _ := pool.Begin(ctx)
	_ = w.WriteEvents(ctx, tx, o) // writes OrderPlaced and clears it from o
	_ = tx.Commit(ctx)
}
