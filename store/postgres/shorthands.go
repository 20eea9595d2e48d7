package postgres

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/store"
)

// The functions below are shorthands for a Driver's methods, for code that
// holds a pool and needs one store of it; each is exactly the call it
// names, so it cannot differ from the Driver's.

// Admin is NewDriver(pool).Admin(): the operators' view of the database, on
// the server's clock. A Driver given a clock ([Driver.WithClock]) hands out
// an Admin on that clock.
func Admin(pool *pgxpool.Pool) store.Admin { return NewDriver(pool).Admin() }

// StoreConfig configures the relay's store that [NewStore] returns. The
// zero value is ready to use.
type StoreConfig struct {
	// KeepPublished copies each published message into
	// courier_outbox_published (with published_at) instead of only deleting
	// it. It costs about as much as the delete itself; trim the table with a
	// retention job.
	KeepPublished bool
	// Clock is the time lease ends and retry times are compared with and
	// computed from, and the scan floor's (see Claiming); nil is the
	// server's now() and the process's time.Now. See [store.Clock].
	Clock store.Clock
}

// NewStore is NewDriver(pool).WithClock(cfg.Clock).RelayStore(ctx,
// store.RelayConfig{KeepPublished: cfg.KeepPublished}): the relay's store,
// after checking the schema. The tables are resolved through the pool's
// search_path.
func NewStore(ctx context.Context, pool *pgxpool.Pool, cfg StoreConfig) (store.RelayStore, error) {
	return NewDriver(pool).WithClock(cfg.Clock).RelayStore(ctx, store.RelayConfig{KeepPublished: cfg.KeepPublished})
}
