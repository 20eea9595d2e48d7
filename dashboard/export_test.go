package dashboard

import (
	"context"
	"fmt"
)

// TrendPending returns the pending rows of topic in each reading h's trend
// charts hold, oldest first; -1 where the reading does not know it.
func TrendPending(h *Handler, topic string) []int64 {
	var out []int64
	for _, r := range h.trend.readings() {
		t, ok := r.topic(topic)
		if !ok {
			t.pending = -1
		}
		out = append(out, t.pending)
	}
	return out
}

// WaitTrend waits until ok holds of TrendPending(h, topic), checking again
// after each reading added, or until ctx ends.
func WaitTrend(ctx context.Context, h *Handler, topic string, ok func(pending []int64) bool) error {
	wake := make(chan struct{}, 1)
	g := h.trend
	g.mu.Lock()
	g.added = func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.added = nil
		g.mu.Unlock()
	}()
	for {
		p := TrendPending(h, topic)
		if ok(p) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the readings of %s are %v: %w", topic, p, ctx.Err())
		case <-wake:
		}
	}
}
