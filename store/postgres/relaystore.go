package postgres

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/store"
)

// relayStore is the relay's view of a PostgreSQL outbox
// ([Driver.RelayStore]). It is safe for concurrent use by any number of
// relays in any number of processes.
type relayStore struct {
	pool *pgxpool.Pool
	// keepPublished copies each published message into
	// courier_outbox_published (with published_at) instead of only
	// deleting it. It costs about as much as the delete itself.
	keepPublished bool
	// clock is the time lease ends and retry times are compared with and
	// computed from, and the scan floor's (see Claiming); nil is the
	// server's now() and the process's time.Now.
	clock store.Clock
	floor scanFloor
}

var _ store.RelayStore = (*relayStore)(nil)

// newRelayStore checks that the database's schema is the one this binary
// knows and returns the relay's store on pool. The tables are resolved
// through the pool's search_path.
func newRelayStore(ctx context.Context, pool *pgxpool.Pool, cfg store.RelayConfig, clock store.Clock) (store.RelayStore, error) {
	if err := checkSchema(ctx, pool); err != nil {
		return nil, err
	}
	return &relayStore{pool: pool, keepPublished: cfg.KeepPublished, clock: clock}, nil
}

// asyncCommit makes the rest of a batch's implicit transaction commit without
// waiting for its WAL to reach the disk. The relay's own bookkeeping can
// afford it, and it takes a disk flush off every claim and every completion
// (and off the writers' queue for the disk): if the database crashes before
// the flush, a lost lease makes rows claimable again and a lost deletion
// makes them published again, a duplicate that JetStream drops by message id,
// never a loss. Messages themselves are written by the application's own
// transactions, under its own settings.
const asyncCommit = "SELECT set_config('synchronous_commit', 'off', true)"

// Release implements store.Releaser: one call of courier_release (see the
// migrations) on the store's clock.
func (s *relayStore) Release(ctx context.Context, limit int) (store.Released, error) {
	return release(ctx, s.pool, s.clock, limit)
}
