package tenant_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/tenant"
)

// A fleet relays the outboxes of two tenants, each with a SQLite file of
// its own, to one broker; each message leaves with its tenant's name.
func ExampleFleet() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "tenants")
	defer os.RemoveAll(dir)
	var tenants []tenant.Tenant
	for _, name := range []string{"acme", "globex"} {
		t := tenant.Tenant{Name: name, URL: "sqlite:" + filepath.Join(dir, name+".db")}
		tenants = append(tenants, t)
		// Each tenant's application writes its outbox in its own database.
		d, err := dburl.Open(ctx, t.URL, dburl.Options{Create: true})
		if err != nil {
			panic(err)
		}
		if _, err := d.Migrate(ctx); err != nil {
			panic(err)
		}
		w := outbox.New(d.Inserter(), outbox.Config{})
		err = d.InTx(ctx, func(tx *sql.Tx) error {
			return w.Write(ctx, tx, courier.NewMessage("orders", "order-1", "OrderPlaced", []byte(`{"tenant":"`+name+`"}`)))
		})
		d.Close()
		if err != nil {
			panic(err)
		}
	}

	pub := memory.NewPublisher() // a NATS, Kafka, RabbitMQ or webhook publisher in production
	f, err := tenant.New(pub, tenant.Config{Source: tenant.List(tenants...), Relay: relay.Config{PollInterval: 10 * time.Millisecond}})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(runCtx) }()
	for len(pub.Messages()) < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}
	var lines []string
	for _, m := range pub.Messages() {
		lines = append(lines, fmt.Sprintf("%s %s %s", m.Headers[tenant.Header], m.Type, m.Payload))
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// acme OrderPlaced {"tenant":"acme"}
	// globex OrderPlaced {"tenant":"globex"}
}
