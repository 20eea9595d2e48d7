package sqlite

import (
	"context"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqlstore"
)

// nowOf returns clock's time, or this process's when clock is nil.
func nowOf(clock store.Clock) time.Time {
	if clock == nil {
		return time.Now()
	}
	return clock()
}

// withClock returns d with clock's time instead of this process's; d
// itself when clock is nil.
func withClock(d sqlstore.Dialect, clock store.Clock) sqlstore.Dialect {
	if clock == nil {
		return d
	}
	d.NowArgs = func() []any { return []any{clock().UnixMicro()} }
	db := d.DB
	d.Stats = func(ctx context.Context) (store.Stats, error) { return stats(ctx, db, clock) }
	return d
}
