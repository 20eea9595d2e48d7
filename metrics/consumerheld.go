package metrics

import (
	"context"
	"time"
)

// ConsumerHeldSource answers the gauges of the keys consumers hold
// (inbox.ConsumerConfig.HoldKeys): per consumer, the keys a parked delivery
// holds and the deliveries parked behind them. FromStatus answers it from
// store.Status.Consumers. The Collector reports, labelled with the
// consumer's name:
//
//	courier_consumer_held_keys                 keys the consumer holds
//	courier_consumer_held_messages             deliveries parked behind them
//	courier_consumer_oldest_hold_age_seconds   how long its oldest hold has lasted
type ConsumerHeldSource interface {
	// ConsumerHeldStats reports the held keys of each consumer that has
	// parked deliveries.
	ConsumerHeldStats(ctx context.Context) ([]ConsumerHeldStats, error)
}

// ConsumerHeldStats is one consumer's held keys (store.ConsumerStatus'
// HeldKeys, Held and OldestHold).
type ConsumerHeldStats struct {
	// Consumer is the consumer's name (inbox.ConsumerConfig.Name).
	Consumer string
	// Keys counts the keys it holds, each behind a parked delivery.
	Keys int64
	// Messages counts the deliveries parked behind them.
	Messages int64
	// OldestAge is how long its oldest hold has lasted (a hold passed on
	// keeps its age), 0 when it holds none.
	OldestAge time.Duration
}

// ConsumerHeldStats implements ConsumerHeldSource: one series per consumer
// of Status.Consumers (those with parked deliveries or failed runs), held
// keys or not, so that a consumer's gauges fall back to 0 when its holds
// are released while it has other parked deliveries.
func (s *StatusSource) ConsumerHeldStats(ctx context.Context) ([]ConsumerHeldStats, error) {
	st, err := s.status(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ConsumerHeldStats, 0, len(st.Consumers))
	for _, c := range st.Consumers {
		row := ConsumerHeldStats{Consumer: c.Consumer, Keys: c.HeldKeys, Messages: c.Held}
		if !c.OldestHold.IsZero() {
			row.OldestAge = max(st.Now.Sub(c.OldestHold), 0)
		}
		out = append(out, row)
	}
	return out, nil
}

var _ ConsumerHeldSource = (*StatusSource)(nil)
