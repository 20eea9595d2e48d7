package sqlite

import (
	"context"
	"database/sql"

	"github.com/courier-go/courier/store"
)

// The functions below are shorthands for a Driver's methods, for code that
// holds a *sql.DB and needs one store of it; each is exactly the call it
// names, so it cannot differ from the Driver's.

// Migrate is NewDriver(db).Migrate(ctx): it applies the migrations the
// database lacks and returns the versions it applied (see [Driver]).
func Migrate(ctx context.Context, db *sql.DB) ([]int, error) { return NewDriver(db).Migrate(ctx) }

// Admin is NewDriver(db).Admin(): the operators' view of the database, on
// this process's clock. A Driver given a clock ([Driver.WithClock]) hands
// out an Admin on that clock.
func Admin(db *sql.DB) store.Admin { return NewDriver(db).Admin() }

// StoreConfig configures the relay's store that [NewStore] returns. The
// zero value is ready to use.
type StoreConfig struct {
	// KeepPublished copies each published message into
	// courier_outbox_published (with published_at) instead of only deleting
	// it. Trim the table with a retention job.
	KeepPublished bool
	// Clock is the time lease ends and retry times are compared with and
	// computed from, and the time the store records; nil is this process's
	// time.Now. See [store.Clock].
	Clock store.Clock
}

// NewStore is NewDriver(db).WithClock(cfg.Clock).RelayStore(ctx,
// store.RelayConfig{KeepPublished: cfg.KeepPublished}): the relay's store,
// after checking the schema and that db's connections have a busy timeout.
func NewStore(ctx context.Context, db *sql.DB, cfg StoreConfig) (store.RelayStore, error) {
	return NewDriver(db).WithClock(cfg.Clock).RelayStore(ctx, store.RelayConfig{KeepPublished: cfg.KeepPublished})
}
