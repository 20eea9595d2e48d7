package shop

import (
	"context"
	"sync"
	"time"

	"github.com/courier-go/courier/broker"
)

// handback is a broker.Subscriber decorator that keeps the deliveries it
// handed over until they are settled (acknowledged, retried or dropped), so
// that an incarnation that stopped without settling some, as a crash does,
// can give them back to the broker before it closes the subscriber (see
// Link.GiveBack).
type handback struct {
	broker.Subscriber

	mu  sync.Mutex
	out map[*heldDelivery]struct{}
}

var (
	_ broker.Subscriber = (*handback)(nil)
	_ broker.KeySharer  = (*handback)(nil)
)

func newHandback(sub broker.Subscriber) *handback {
	return &handback{Subscriber: sub, out: map[*heldDelivery]struct{}{}}
}

// Next implements broker.Subscriber.
func (h *handback) Next(ctx context.Context) (broker.Delivery, error) {
	d, err := h.Subscriber.Next(ctx)
	if err != nil {
		return nil, err
	}
	hd := &heldDelivery{Delivery: d, h: h}
	h.mu.Lock()
	h.out[hd] = struct{}{}
	h.mu.Unlock()
	return hd, nil
}

// SharesKeys implements broker.KeySharer.
func (h *handback) SharesKeys() bool { return broker.SharesKeys(h.Subscriber) }

// Partitions implements broker.KeySharer.
func (h *handback) Partitions() []int {
	if k, ok := h.Subscriber.(broker.KeySharer); ok {
		return k.Partitions()
	}
	return nil
}

// giveBack asks the broker to deliver again at once every delivery handed
// over and not settled, and returns how many there were. Call it once
// nothing handles them any more.
func (h *handback) giveBack(ctx context.Context) int {
	h.mu.Lock()
	out := make([]*heldDelivery, 0, len(h.out))
	for d := range h.out {
		out = append(out, d)
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for _, d := range out {
		_ = d.Retry(ctx, 0)
	}
	return len(out)
}

// heldDelivery is a delivery handback keeps until it is settled.
type heldDelivery struct {
	broker.Delivery
	h *handback
}

func (d *heldDelivery) settled() {
	d.h.mu.Lock()
	delete(d.h.out, d)
	d.h.mu.Unlock()
}

func (d *heldDelivery) Ack(ctx context.Context) error {
	d.settled()
	return d.Delivery.Ack(ctx)
}

func (d *heldDelivery) Retry(ctx context.Context, delay time.Duration) error {
	d.settled()
	return d.Delivery.Retry(ctx, delay)
}

func (d *heldDelivery) Drop(ctx context.Context) error {
	d.settled()
	return d.Delivery.Drop(ctx)
}
