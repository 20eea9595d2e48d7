package mysql_test

import (
	"context"
	"database/sql"
	"os"

	_ "github.com/go-sql-driver/mysql"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/mysql"
)

// Write an order and its message in one MySQL transaction. A relay in
// another process picks it up by polling (relay.Config with no Notifier).
func Example() {
	ctx := context.Background()
	db, err := sql.Open("mysql", os.Getenv("DATABASE_DSN")) // e.g. app:secret@tcp(127.0.0.1:3306)/app
	if err != nil {
		panic(err)
	}
	defer db.Close()
	d := mysql.NewDriver(db) // hands out every store of the database
	if _, err := d.Migrate(ctx); err != nil {
		panic(err)
	}
	w := outbox.New(d.Inserter(), outbox.Config{})

	// The order and its message are committed together, or neither is.
	err = d.InTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, total) VALUES (?, ?)", "order-42", 1999); err != nil {
			return err
		}
		msg, err := courier.NewJSON("orders", "order-42", map[string]any{"order_id": "order-42", "total": 1999},
			courier.WithType("OrderPlaced"))
		if err != nil {
			return err
		}
		return w.Write(ctx, tx, msg)
	})
	if err != nil {
		panic(err)
	}
}
