package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/memstore"
)

// A relay drains an outbox while RabbitMQ's application stops for a few
// seconds and starts again: every message arrives, each key's messages
// first arrive in the order they were written, and the outage makes no
// dead letter.
func TestBrokerRestartLosesNothing(t *testing.T) {
	// A node of the test's own, which the test stops and starts.
	srv := testenv.StartRabbitMQ(t)
	cfg, q := setupOn(t, srv.URL, amqp.Topology{Queue: "outage"})
	const total, keys = 2000, 50
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	st := memstore.New(memstore.Config{})
	pub, err := amqp.NewPublisher(amqp.PublisherConfig{Config: cfg})
	testenv.Must(t, err, "publisher")
	defer pub.Close()
	r, err := relay.New(st, pub, relay.Config{
		BatchSize:   100,
		MaxAttempts: 2, // however long the outage, it must not make dead letters
		Backoff:     relay.Backoff{Initial: 100 * time.Millisecond, Max: time.Second},
		Notifier:    st.NewNotifier(),
	})
	testenv.Must(t, err, "relay")
	runCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(runCtx) }()

	// The consumer: every delivery in arrival order, acknowledged.
	sub := newSubscriber(t, cfg, q, 200)
	var mu sync.Mutex
	var got []courier.Message
	seen := map[uuid.UUID]bool{}
	receiveErrs := 0
	consCtx, stopConsumer := context.WithCancel(ctx)
	consDone := make(chan struct{})
	go func() {
		defer close(consDone)
		for {
			d, err := sub.Next(consCtx)
			if consCtx.Err() != nil {
				return
			}
			if err != nil {
				mu.Lock()
				receiveErrs++
				mu.Unlock()
				time.Sleep(50 * time.Millisecond)
				continue
			}
			m, err := sub.Decode(d.Raw())
			if err != nil {
				t.Errorf("decode: %v", err)
				continue
			}
			mu.Lock()
			got = append(got, m)
			seen[m.ID] = true
			mu.Unlock()
			_ = d.Ack(consCtx) // lost with the connection: redelivered, a duplicate
		}
	}()
	received := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}

	// The writer: 2,000 messages over 50 keys, about 100 a second.
	var written []courier.Message
	writerDone := make(chan error, 1)
	go func() {
		for i := 0; i < total; i += 20 {
			batch := make([]courier.Message, 20)
			for j := range batch {
				n := i + j
				batch[j] = courier.NewMessage("orders", fmt.Sprintf("key-%d", n%keys), "Tick", []byte(fmt.Sprint(n)))
			}
			if err := st.InTx(ctx, func(tx *memstore.Tx) error { return st.Insert(ctx, tx, batch) }); err != nil {
				writerDone <- err
				return
			}
			written = append(written, batch...)
			time.Sleep(200 * time.Millisecond)
		}
		writerDone <- nil
	}()

	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { n := received(); return n >= 300, n }, "messages arrived of the first 300")
	stopped := time.Now()
	srv.Ctl("stop_app")
	t.Logf("stop_app done after %s, %d messages received", time.Since(stopped).Round(time.Millisecond), received())
	time.Sleep(3 * time.Second)
	srv.Ctl("start_app")
	t.Logf("start_app done %s after stop_app began", time.Since(stopped).Round(time.Millisecond))

	testenv.Must(t, <-writerDone, "write")
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { n := received(); return n == total, n },
		"messages arrived of %d; relay %+v, outbox %d pending", total,
		testenv.Lazy(func() any { return r.Metrics() }), testenv.Lazy(func() any { return len(st.Pending()) }))
	stopRelay()
	if err := <-relayDone; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("relay: %v", err)
	}
	time.Sleep(500 * time.Millisecond) // late duplicates
	stopConsumer()
	<-consDone

	mu.Lock()
	defer mu.Unlock()
	dups := testenv.CheckDelivery(t, written, got)
	m := r.Metrics()
	t.Logf("%d messages, %d deliveries (%d duplicates), %d receive errors; relay: %+v", total, len(got), dups, receiveErrs, m)
	if m.DeadLettered != 0 || len(st.DeadLetters()) != 0 {
		t.Errorf("the outage made %d dead letters: %+v", m.DeadLettered, st.DeadLetters())
	}
	if m.Retried == 0 {
		t.Errorf("no publish failed: the outage did not happen while the relay was draining")
	}
}
