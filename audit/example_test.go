package audit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/memstore"
)

// A relay keeps a copy of what it publishes (KeepPublished); the broker
// then loses one message, and the audit names it.
func ExampleRun() {
	ctx := context.Background()
	st := memstore.New(memstore.Config{KeepPublished: true})
	pub := memory.NewPublisher()
	start := time.Now()

	msgs := []courier.Message{
		courier.NewMessage("orders", "order-1", "OrderPlaced", []byte(`{}`)),
		courier.NewMessage("orders", "order-2", "OrderPlaced", []byte(`{}`)),
	}
	_ = st.InTx(ctx, func(tx *memstore.Tx) error { return st.Insert(ctx, tx, msgs) })
	r, _ := relay.New(st, pub, relay.Config{PollInterval: time.Millisecond})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- r.Run(runCtx) }()
	for len(st.Pending()) > 0 {
		time.Sleep(time.Millisecond)
	}
	stop()
	<-done

	pub.Forget(msgs[1].ID) // the broker loses an acknowledged message

	rep, err := audit.Run(ctx, st.Operations(), pub, audit.Config{From: start, To: time.Now(), Slack: time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("published %d, stored %d, lost %d (key %s), alarm %v\n",
		rep.Published, rep.Stored, rep.Lost.Count, rep.Lost.Examples[0].Key, rep.Alarms())
	// Output: published 2, stored 1, lost 1 (key order-2), alarm true
}
