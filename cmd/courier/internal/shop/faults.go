package shop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/inbox"
)

// ErrInjected is the transient failure Faults.FailureRate injects.
var ErrInjected = errors.New("shop: injected failure (Faults.FailureRate); the inbox retries the delivery")

// chance reports true with probability p.
func chance(p float64) bool { return p > 0 && rand.Float64() < p }

// withFaults wraps a handler with the service's latency and failure rate.
// The failure comes after the handler did its work, so it proves that the
// work rolls back with the inbox marker.
func withFaults(faults func() Faults, h inbox.Handler[*sql.Tx]) inbox.Handler[*sql.Tx] {
	return func(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
		f := faults()
		if f.Latency > 0 {
			d := f.Latency/2 + rand.N(f.Latency+1)
			if !sleep(ctx, d) {
				return ctx.Err()
			}
		}
		if err := h(ctx, tx, msg); err != nil {
			return err
		}
		if chance(f.FailureRate) {
			return fmt.Errorf("%w: %s %s", ErrInjected, msg.Type, msg.ID)
		}
		return nil
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
