package shop_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/cmd/courier/internal/shop"
)

// fakeSub delivers n numbered deliveries, then blocks.
type fakeSub struct {
	mu    sync.Mutex
	next  int
	n     int
	acked map[int]int
}

func (f *fakeSub) Next(ctx context.Context) (broker.Delivery, error) {
	f.mu.Lock()
	if f.next < f.n {
		f.next++
		d := &fakeDelivery{sub: f, i: f.next}
		f.mu.Unlock()
		return d, nil
	}
	f.mu.Unlock()
	<-ctx.Done()
	return nil, ctx.Err()
}

func (f *fakeSub) Decode(raw broker.Raw) (courier.Message, error) {
	return courier.Message{Type: raw.Subject}, nil
}
func (f *fakeSub) Close() error { return nil }

type fakeDelivery struct {
	sub *fakeSub
	i   int
}

func (d *fakeDelivery) Raw() broker.Raw { return broker.Raw{Subject: fmt.Sprint(d.i)} }
func (d *fakeDelivery) Attempt() int    { return 1 }
func (d *fakeDelivery) Ack(context.Context) error {
	d.sub.mu.Lock()
	d.sub.acked[d.i]++
	d.sub.mu.Unlock()
	return nil
}
func (d *fakeDelivery) Retry(context.Context, time.Duration) error { return nil }
func (d *fakeDelivery) Extend(context.Context) error               { return nil }
func (d *fakeDelivery) Drop(context.Context) error                 { return nil }

// The chaos decorator hands every delivery over, some twice and some after
// a later one; the copies leave acknowledging to the original, and a
// delivery held back is not held for ever when nothing follows it.
func TestChaosDuplicatesAndReorders(t *testing.T) {
	const n = 2000
	sub := &fakeSub{n: n, acked: map[int]int{}}
	c := shop.NewChaos(sub, shop.ChaosConfig{Duplicate: 0.2, Reorder: 0.2, Hold: 5 * time.Millisecond})
	seen := map[int]int{}
	var order []int
	for len(order) < n || len(seen) < n {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		d, err := c.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("after %d deliveries (%d distinct): %v", len(order), len(seen), err)
		}
		var i int
		fmt.Sscan(d.Raw().Subject, &i)
		seen[i]++
		order = append(order, i)
		if err := d.Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Drain the copies still held back.
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		d, err := c.Next(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		var i int
		fmt.Sscan(d.Raw().Subject, &i)
		seen[i]++
		_ = d.Ack(context.Background())
	}
	twice, late := 0, 0
	for i := 1; i <= n; i++ {
		if seen[i] == 0 || sub.acked[i] != 1 {
			t.Fatalf("delivery %d handed over %d times and acknowledged %d times; want at least once, and acknowledged once", i, seen[i], sub.acked[i])
		}
		if seen[i] > 1 {
			twice++
		}
	}
	for k := 1; k < len(order); k++ {
		if order[k] < order[k-1] {
			late++
		}
	}
	st := c.Stats()
	if twice != int(st.Duplicated) || st.Duplicated < n/10 || st.Reordered < n/10 || late < n/10 {
		t.Fatalf("%d handed over twice, %d out of order; stats %+v; want about a fifth each", twice, late, st)
	}
}
