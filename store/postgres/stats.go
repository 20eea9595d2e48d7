package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/courier-go/courier/store"
)

const statsSQL = `SELECT
    (SELECT count(*) FROM courier_outbox),
    (SELECT coalesce(sum(cardinality(ids)), 0) FROM courier_outbox_leases WHERE until > now()),
    (SELECT count(*) FROM courier_outbox WHERE retry_at > now()),
    (SELECT created_at FROM courier_outbox ORDER BY id LIMIT 1),
    now(),
    (SELECT count(*) FROM courier_outbox_dead_letters),
    (SELECT count(*) FROM courier_outbox_dead_letters WHERE holds),
    (SELECT count(*) FROM courier_outbox_held),
    (SELECT min(dead_at) FROM courier_outbox_dead_letters WHERE holds)`

// Stats implements store.RelayStore.
func (s *relayStore) Stats(ctx context.Context) (store.Stats, error) {
	return stats(ctx, s.pool, s.clock)
}

// stats reports the state of the outbox behind q at clock (nil: the
// server's).
func stats(ctx context.Context, q querier, clock store.Clock) (store.Stats, error) {
	var st store.Stats
	var oldest, oldestHold *time.Time
	query, args := clocked(clock, statsSQL)
	if err := q.QueryRow(ctx, query, args...).Scan(&st.Pending, &st.Leased, &st.InBackoff, &oldest, &st.Now, &st.DeadLetters,
		&st.HeldKeys, &st.Held, &oldestHold); err != nil {
		return st, fmt.Errorf("postgres: stats: %w", err)
	}
	if oldest != nil {
		st.OldestPending = oldest.UTC()
	}
	if oldestHold != nil {
		st.OldestHold = oldestHold.UTC()
	}
	st.Now = st.Now.UTC()
	return st, nil
}
