package tenant_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/broker/nats/embedded"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/tenant"
)

// Consume the messages of every tenant with one consumer: each message is
// applied in the database of the tenant its Courier-Tenant header names
// (the relays of a Fleet set it), in the transaction that records its
// inbox marker there. A message of no tenant is parked in the service's
// own database. The broker is an embedded NATS server; the databases are
// SQLite files (PostgreSQL schemas and MySQL databases work alike).
func ExampleNewConsumer() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "courier-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Config{Dir: filepath.Join(dir, "nats")})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	nc, err := couriernats.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	if err := couriernats.EnsureStream(ctx, nc, couriernats.Config{}, couriernats.StreamConfig{}); err != nil {
		panic(err)
	}

	// The tenants' databases, and the service's own, which keeps the
	// messages of no tenant: each migrated.
	open := func(url string) *dburl.DB {
		db, err := dburl.Open(ctx, url, dburl.Options{Create: true})
		if err != nil {
			panic(err)
		}
		if _, err := db.Migrate(ctx); err != nil {
			panic(err)
		}
		return db
	}
	var tenants []tenant.Tenant
	for _, name := range []string{"acme", "globex"} {
		t := tenant.Tenant{Name: name, URL: "sqlite:" + filepath.Join(dir, name+".db")}
		db := open(t.URL)
		if _, err := db.SQL().Exec("CREATE TABLE charges (order_id TEXT PRIMARY KEY, tenant TEXT)"); err != nil {
			panic(err)
		}
		db.Close()
		tenants = append(tenants, t)
	}
	service := open("sqlite:" + filepath.Join(dir, "billing.db"))
	defer service.Close()

	charge := func(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
		t, _ := tenant.From(ctx) // the message's tenant; tx is in its database
		_, err := tenant.DB(ctx).Exec(ctx, tx, "INSERT INTO charges (order_id, tenant) VALUES (?, ?)", msg.Key, t.Name)
		return err
	}
	sub, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{Consumer: "billing", Topics: []string{"orders"}})
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	c, err := tenant.NewConsumer(sub, "billing", charge, tenant.ConsumerConfig{
		Source:  tenant.List(tenants...),
		Refused: service.ConsumerStore(),
	})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()

	// The tenants' relays would publish these from their outboxes; here
	// they go straight to JetStream.
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{})
	if err != nil {
		panic(err)
	}
	order := func(t, id string) courier.Message {
		m := courier.NewMessage("orders", id, "OrderPlaced", nil)
		if t != "" {
			m.SetHeader(tenant.Header, t)
		}
		return m
	}
	msgs := []courier.Message{order("acme", "order-1"), order("globex", "order-2"), order("acme", "order-3"), order("", "order-4")}
	for _, err := range pub.Publish(ctx, msgs) {
		if err != nil {
			panic(err)
		}
	}

	for m := c.Metrics(); (m.Applied < 3 || m.Parked < 1) && ctx.Err() == nil; m = c.Metrics() {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}
	for _, t := range tenants {
		db, err := dburl.Open(ctx, t.URL, dburl.Options{})
		if err != nil {
			panic(err)
		}
		rows, err := db.SQL().Query("SELECT order_id, tenant FROM charges ORDER BY order_id")
		if err != nil {
			panic(err)
		}
		for rows.Next() {
			var id, by string
			if err := rows.Scan(&id, &by); err != nil {
				panic(err)
			}
			fmt.Printf("%s's database: %s, charged for %s\n", t.Name, id, by)
		}
		rows.Close()
		db.Close()
	}
	parked, err := service.Admin().Parked(ctx, "billing", 10)
	if err != nil {
		panic(err)
	}
	for _, p := range parked {
		fmt.Println("parked in the service's database:", p.Reason)
	}
	// Output:
	// acme's database: order-1, charged for acme
	// acme's database: order-3, charged for acme
	// globex's database: order-2, charged for globex
	// parked in the service's database: malformed
}
