package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/sqlite"
)

// Write an order and its message in one SQLite transaction; a relay in this
// process would be woken by the notifier and claim it.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "courier-example")
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	d := sqlite.NewDriver(db) // hands out every store of the database
	if _, err := d.Migrate(ctx); err != nil {
		panic(err)
	}
	if _, err := db.Exec("CREATE TABLE orders (id TEXT PRIMARY KEY, total INTEGER)"); err != nil {
		panic(err)
	}

	n := store.NewLocalNotifier() // give it to relay.Config.Notifier too
	w := outbox.New(d.Inserter(), outbox.Config{Notify: n.Signal})
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("INSERT INTO orders (id, total) VALUES (?, ?)", "order-42", 1999); err != nil {
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
	if err := tx.Commit(); err != nil { // the order and its message, or neither
		panic(err)
	}

	st, err := d.RelayStore(ctx, store.RelayConfig{})
	if err != nil {
		panic(err)
	}
	batch, err := st.Claim(ctx, "example-relay", 100, 30*time.Second)
	if err != nil {
		panic(err)
	}
	for _, r := range batch.Records {
		fmt.Println(r.Message.Type, r.Message.Key, string(r.Message.Payload))
	}
	// Output: OrderPlaced order-42 {"order_id":"order-42","total":1999}
}
