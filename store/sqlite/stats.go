package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqltx"
)

const statsSQL = `SELECT
    (SELECT count(*) FROM courier_outbox),
    (SELECT coalesce(sum(json_array_length(ids)), 0) FROM courier_outbox_leases WHERE until > ?1),
    (SELECT count(*) FROM courier_outbox WHERE retry_at > ?1),
    (SELECT created_at FROM courier_outbox ORDER BY id LIMIT 1),
    (SELECT count(*) FROM courier_outbox_dead_letters),
    (SELECT count(*) FROM courier_outbox_dead_letters WHERE holds),
    (SELECT count(*) FROM courier_outbox_held),
    (SELECT min(dead_at) FROM courier_outbox_dead_letters WHERE holds)`

// Stats implements store.RelayStore. Now is this process's clock, or the
// store's.
func (s *relayStore) Stats(ctx context.Context) (store.Stats, error) {
	return stats(ctx, s.db, s.clock)
}

// stats reports the state of the outbox behind q; Now is clock's time, or
// this process's when clock is nil.
func stats(ctx context.Context, q sqltx.Querier, clock store.Clock) (store.Stats, error) {
	var st store.Stats
	now := nowOf(clock)
	var oldest, oldestHold sql.NullInt64
	if err := q.QueryRowContext(ctx, statsSQL, now.UnixMicro()).Scan(&st.Pending, &st.Leased, &st.InBackoff, &oldest, &st.DeadLetters,
		&st.HeldKeys, &st.Held, &oldestHold); err != nil {
		return st, fmt.Errorf("sqlite: stats: %w", err)
	}
	if oldest.Valid {
		st.OldestPending = time.UnixMicro(oldest.Int64).UTC()
	}
	if oldestHold.Valid {
		st.OldestHold = time.UnixMicro(oldestHold.Int64).UTC()
	}
	st.Now = now.UTC().Truncate(time.Microsecond)
	return st, nil
}
