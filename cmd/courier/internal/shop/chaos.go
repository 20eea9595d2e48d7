package shop

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// ChaosConfig says how much chaos a [Chaos] subscriber adds.
type ChaosConfig struct {
	// Duplicate is the probability that a delivery is handed over a second
	// time, a little later, as a broker redelivery would. The copy's Ack,
	// Retry, Extend and Drop do nothing: the original settles the message.
	Duplicate float64
	// Reorder is the probability that a delivery is held back and handed
	// over after the next one.
	Reorder float64
	// Hold bounds how long a held-back delivery waits for a next one before
	// it is handed over anyway. Default 20ms; keep it well under the
	// subscription's ack wait.
	Hold time.Duration
}

// ChaosStats counts what a [Chaos] subscriber did.
type ChaosStats struct {
	// Duplicated counts deliveries handed over twice.
	Duplicated int64
	// Reordered counts deliveries handed over after a later one.
	Reordered int64
}

// Chaos is a broker.Subscriber decorator that duplicates and reorders
// deliveries, to show that the inbox applies each message once and that the
// saga copes with events in any order. It is safe for concurrent use.
type Chaos struct {
	sub  broker.Subscriber
	hold time.Duration

	mu        sync.Mutex
	dup, reor float64
	ready     []broker.Delivery // handed over next, in order
	held      []broker.Delivery // handed over after the next fresh delivery

	duplicated, reordered atomic.Int64
}

var (
	_ broker.Subscriber = (*Chaos)(nil)
	_ broker.KeySharer  = (*Chaos)(nil)
)

// NewChaos decorates sub.
func NewChaos(sub broker.Subscriber, cfg ChaosConfig) *Chaos {
	if cfg.Hold <= 0 {
		cfg.Hold = 20 * time.Millisecond
	}
	return &Chaos{sub: sub, hold: cfg.Hold, dup: cfg.Duplicate, reor: cfg.Reorder}
}

// Set changes the probabilities while the subscriber runs.
func (c *Chaos) Set(duplicate, reorder float64) {
	c.mu.Lock()
	c.dup, c.reor = duplicate, reorder
	c.mu.Unlock()
}

// Stats returns what the subscriber did so far.
func (c *Chaos) Stats() ChaosStats {
	return ChaosStats{Duplicated: c.duplicated.Load(), Reordered: c.reordered.Load()}
}

// Next implements broker.Subscriber. A held-back delivery is handed over
// after the next fresh one, or after Hold when none comes.
func (c *Chaos) Next(ctx context.Context) (broker.Delivery, error) {
	for {
		c.mu.Lock()
		if len(c.ready) > 0 {
			d := c.ready[0]
			c.ready = c.ready[1:]
			c.mu.Unlock()
			return d, nil
		}
		holding := len(c.held) > 0
		c.mu.Unlock()

		wait, cancel := ctx, context.CancelFunc(func() {})
		if holding {
			wait, cancel = context.WithTimeout(ctx, c.hold)
		}
		d, err := c.sub.Next(wait)
		cancel()
		if err != nil {
			if holding && ctx.Err() == nil && wait.Err() != nil { // nothing came: let the held ones go
				c.mu.Lock()
				c.ready, c.held = append(c.ready, c.held...), nil
				c.mu.Unlock()
				continue
			}
			return nil, err
		}

		c.mu.Lock()
		if chance(c.dup) {
			c.held = append(c.held, copyOf{d})
			c.duplicated.Add(1)
		}
		if chance(c.reor) {
			c.held = append(c.held, d)
			c.reordered.Add(1)
			c.mu.Unlock()
			continue
		}
		c.ready, c.held = append(c.ready, c.held...), nil
		c.mu.Unlock()
		return d, nil
	}
}

// Decode implements broker.Subscriber.
func (c *Chaos) Decode(raw broker.Raw) (courier.Message, error) { return c.sub.Decode(raw) }

// Close implements broker.Subscriber.
func (c *Chaos) Close() error { return c.sub.Close() }

// SharesKeys implements broker.KeySharer: whether the subscriber it
// decorates shares its consumer's keys among its instances.
func (c *Chaos) SharesKeys() bool { return broker.SharesKeys(c.sub) }

// Partitions implements broker.KeySharer: the decorated subscriber's, nil
// when it shares no keys.
func (c *Chaos) Partitions() []int {
	if k, ok := c.sub.(broker.KeySharer); ok {
		return k.Partitions()
	}
	return nil
}

// copyOf is a second delivery of a message: it carries the message but
// leaves settling it to the original.
type copyOf struct{ broker.Delivery }

func (copyOf) Ack(context.Context) error                  { return nil }
func (copyOf) Retry(context.Context, time.Duration) error { return nil }
func (copyOf) Extend(context.Context) error               { return nil }
func (copyOf) Drop(context.Context) error                 { return nil }
