package audit_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
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

// A Watcher audits over and over; here two passes are made by hand. A
// message the broker stores twice is found once, by the pass that judges
// it.
func ExampleWatcher() {
	ctx := context.Background()
	clock := memstore.NewClock()
	st := memstore.New(memstore.Config{KeepPublished: true, Clock: clock.Now})
	pub := memory.NewPublisher()
	pub.SetClock(clock.Now)
	w, err := audit.NewWatcher(st.Operations(), pub, audit.WatchConfig{
		Name: "example", Interval: 5 * time.Second, Slack: time.Second, Since: time.Second, Clock: clock.Now,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	msg := courier.NewMessage("orders", "order-1", "OrderPlaced", []byte(`{}`))
	_ = st.InTx(ctx, func(tx *memstore.Tx) error { return st.Insert(ctx, tx, []courier.Message{msg}) })
	r, _ := relay.New(st, pub, relay.Config{PollInterval: time.Millisecond, Clock: clock.Now})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- r.Run(runCtx) }()
	for len(st.Pending()) > 0 {
		time.Sleep(time.Millisecond)
	}
	stop()
	<-done
	pub.Publish(ctx, []courier.Message{msg}) // stored again: a duplicate

	for range 2 {
		clock.Advance(5 * time.Second)
		p, err := w.Pass(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("pass judged %d messages: %d duplicates\n", p.Judged, p.Count(audit.KindDuplicate))
	}
	s := w.State()
	fmt.Printf("passes %d, duplicates %d, alarms %v\n", s.Passes, s.Duplicates, s.Alarms())
	// Output:
	// pass judged 2 messages: 1 duplicates
	// pass judged 0 messages: 0 duplicates
	// passes 2, duplicates 1, alarms false
}
