package mysql

import (
	"context"
	"fmt"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// statsSQL reads the outbox's state; every UTC_TIMESTAMP(6) is the store's
// clock (see clocked).
const statsSQL = `SELECT
    (SELECT COUNT(*) FROM courier_outbox),
    (SELECT COALESCE(SUM(JSON_LENGTH(ids)), 0) FROM courier_outbox_leases WHERE until > UTC_TIMESTAMP(6)),
    (SELECT COUNT(*) FROM courier_outbox WHERE retry_at > UTC_TIMESTAMP(6)),
    (SELECT created_at FROM courier_outbox ORDER BY id LIMIT 1),
    UTC_TIMESTAMP(6),
    (SELECT COUNT(*) FROM courier_outbox_dead_letters),
    (SELECT COUNT(*) FROM courier_outbox_dead_letters WHERE holds = TRUE),
    (SELECT COUNT(*) FROM courier_outbox_held),
    (SELECT MIN(dead_at) FROM courier_outbox_dead_letters WHERE holds = TRUE)`

// Stats implements store.RelayStore.
func (s *relayStore) Stats(ctx context.Context) (store.Stats, error) {
	return stats(ctx, s.db, s.clock)
}

// stats reports the state of the outbox behind q at clock (nil: the
// server's).
func stats(ctx context.Context, q sqltx.Querier, clock store.Clock) (store.Stats, error) {
	var st store.Stats
	query, args := clocked(clock, statsSQL)
	if err := q.QueryRowContext(ctx, query, args...).Scan(&st.Pending, &st.Leased, &st.InBackoff, utcTime(&st.OldestPending), utcTime(&st.Now), &st.DeadLetters,
		&st.HeldKeys, &st.Held, utcTime(&st.OldestHold)); err != nil {
		return st, fmt.Errorf("mysql: stats: %w", err)
	}
	return st, nil
}
