package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/courier-go/courier/store"
)

// HeldSource answers the gauges of held keys: the keys that dead letters
// hold (relay.Config.HoldKeys) and the messages waiting behind them. An
// OutboxSource that implements it (StoreStats's and FromStatus's do)
// gives the Collector these gauges too:
//
//	courier_outbox_held_keys                 keys held by a dead letter
//	courier_outbox_held_messages             messages waiting behind them
//	courier_outbox_oldest_hold_age_seconds   how long the oldest has held its key
type HeldSource interface {
	// HeldStats reports the held keys of the whole outbox.
	HeldStats(ctx context.Context) (HeldStats, error)
}

// HeldStats is the outbox's held keys (store.Stats' HeldKeys, Held and
// OldestHold).
type HeldStats struct {
	// Keys counts the dead letters that hold their key.
	Keys int64
	// Messages counts the messages waiting behind them.
	Messages int64
	// OldestAge is how long the oldest of them has held its key, 0 when
	// none does.
	OldestAge time.Duration
}

// heldStats returns the held keys of st.
func heldStats(st store.Stats) HeldStats {
	h := HeldStats{Keys: st.HeldKeys, Messages: st.Held}
	if !st.OldestHold.IsZero() {
		h.OldestAge = max(st.Now.Sub(st.OldestHold), 0)
	}
	return h
}

// HeldStats implements HeldSource from the Stats the last OutboxStats
// read, or from a Stats of its own when there is none.
func (s *storeStats) HeldStats(ctx context.Context) (HeldStats, error) {
	s.mu.Lock()
	st, ok := s.last, s.fresh
	s.fresh = false
	s.mu.Unlock()
	if !ok {
		var err error
		if st, err = s.s.Stats(ctx); err != nil {
			return HeldStats{}, err
		}
	}
	return heldStats(st), nil
}

// HeldStats implements HeldSource from the Status the other sources
// read (Status.Outbox).
func (s *StatusSource) HeldStats(ctx context.Context) (HeldStats, error) {
	st, err := s.status(ctx)
	if err != nil {
		return HeldStats{}, err
	}
	return heldStats(st.Outbox), nil
}

var (
	_ HeldSource = (*storeStats)(nil)
	_ HeldSource = (*StatusSource)(nil)
)

// lastStats is what storeStats keeps of its last Stats, for HeldStats.
type lastStats struct {
	mu    sync.Mutex
	last  store.Stats
	fresh bool // last was read by OutboxStats and not yet used by HeldStats
}
