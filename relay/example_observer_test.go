package relay_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/memstore"
)

// published counts recorded outcomes; embedding NopObserver leaves the
// other events to do nothing.
type published struct {
	relay.NopObserver
	n atomic.Int64
}

func (p *published) Completed(n, _, _ int) { p.n.Add(int64(n)) }

// Watch a relay with an Observer of your own: here a counter of the
// messages it published. Package metrics implements every event with
// Prometheus.
func ExampleObserver() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := memstore.New(memstore.Config{})
	obs := &published{}
	r, err := relay.New(st, memory.NewPublisher(), relay.Config{Observer: obs, Notifier: st.NewNotifier()})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()

	w := outbox.New(st, outbox.Config{})
	if err := st.InTx(ctx, func(tx *memstore.Tx) error {
		return w.Write(ctx, tx, courier.NewMessage("orders", "order-42", "OrderPlaced", nil))
	}); err != nil {
		panic(err)
	}
	for obs.n.Load() < 1 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}
	fmt.Println("published:", obs.n.Load())
	// Output: published: 1
}
