package store

import (
	"context"
	"errors"
	"time"

	"github.com/courier-go/courier"
)

// Inserter writes messages into the outbox table inside the caller's
// transaction. TTx is the transaction type of the caller's driver, for
// example pgx.Tx or *sql.Tx, so the compiler rejects a mismatched driver.
type Inserter[TTx any] interface {
	// Insert adds msgs to the outbox in tx. Messages are already validated.
	Insert(ctx context.Context, tx TTx, msgs []courier.Message) error
}

// Record is a claimed outbox row.
type Record struct {
	// Seq is the row's outbox sequence number, allocated when the row is
	// inserted, not when it commits. A claim returns a key's committed rows
	// in Seq order; what that means for the order of publication is the
	// contract in package relay's documentation (Ordering).
	Seq int64
	// Attempts counts the failed publish attempts so far.
	Attempts int
	// Message is the stored message.
	Message courier.Message
}

// Failure is a claimed row whose publication failed.
type Failure struct {
	// Seq identifies the row.
	Seq int64
	// Error is the broker's error text, kept as last_error and in the row's
	// attempt history.
	Error string
	// Delay is how long the row waits before it may be claimed again.
	Delay time.Duration
	// Counted says whether this failure counts as a publish attempt.
	// Failures that are not the message's fault (broker unreachable) are not
	// counted, so an outage never turns messages into dead letters.
	Counted bool
	// Hold, on a Dead failure, makes the dead letter hold its key: the
	// key's later messages wait behind it (courier_outbox_held) until it
	// is replayed or discarded, instead of moving on. The relay sets it
	// for the topics its HoldKeys names.
	Hold bool
}

// Batch is a claimed set of rows and the lease that holds them.
type Batch struct {
	// Lease identifies the claim; pass it to Complete.
	Lease int64
	// Records are the claimed rows in Seq order.
	Records []Record
}

// Outcome tells the store what became of a claimed batch. Rows of the batch
// it does not mention are released: claimable again at once, attempts
// unchanged (shutdown, or an earlier message of their key failed).
type Outcome struct {
	// Published rows were acknowledged by the broker.
	Published []int64
	// Retry rows failed and wait for another attempt; their key waits too.
	Retry []Failure
	// Dead rows failed for the last time and become dead letters.
	Dead []Failure
}

// RelayStore is what the relay needs from a database. Implementations must
// make Claim safe for any number of concurrent relays: a row is leased to one
// owner at a time, a row is only claimable when no other row of its key is
// leased or waiting for a retry, and a claim sees every row and lease
// committed before it, so the committed rows of a key go out in Seq order
// (package relay, Ordering, states the resulting contract).
type RelayStore interface {
	// Claim leases up to limit claimable rows to owner for lease and returns
	// them in Seq order. Several rows of one key may be returned together,
	// in order. An empty batch means there is nothing to do right now.
	Claim(ctx context.Context, owner string, limit int, lease time.Duration) (Batch, error)
	// Complete records the outcome of a batch and ends its lease. It does
	// nothing once the lease has expired: the rows may belong to another
	// relay by then.
	Complete(ctx context.Context, owner string, lease int64, o Outcome) error
	// Stats reports the outbox's state.
	Stats(ctx context.Context) (Stats, error)
	// Releaser moves scheduled messages that have fallen due into the
	// outbox, where Claim finds them.
	Releaser
}

// Notifier wakes a relay soon after messages are committed, so it need not
// poll often. The protocol avoids lost wake-ups: a relay that finds no work
// calls Arm, and once Arm reports true it claims once more before it waits
// on Wake; writers that commit after Arm signal Wake. Disarm stops the
// signals while the relay is busy, so busy writers pay nothing for them.
type Notifier interface {
	// Run delivers wake-ups until ctx is done. It returns ctx's error, or an
	// error if the notifier cannot start at all.
	Run(ctx context.Context) error
	// Wake receives a value when messages may have been committed.
	Wake() <-chan struct{}
	// Arm asks writers to signal from now on. It returns false when it could
	// not arm right now (for example a writer's transaction is open); the
	// relay then polls again shortly.
	Arm(ctx context.Context) (bool, error)
	// Disarm withdraws Arm.
	Disarm(ctx context.Context) error
}

// Stats is a snapshot of the outbox.
type Stats struct {
	// Pending counts unpublished messages (including leased and backing
	// off).
	Pending int64 `json:"pending"`
	// Leased counts pending messages currently leased to a relay.
	Leased int64 `json:"leased"`
	// InBackoff counts pending messages waiting for a retry after a failure.
	InBackoff int64 `json:"in_backoff"`
	// DeadLetters counts parked messages.
	DeadLetters int64 `json:"dead_letters"`
	// HeldKeys counts the dead letters that hold their key (Failure.Hold).
	HeldKeys int64 `json:"held_keys"`
	// Held counts the messages waiting behind them.
	Held int64 `json:"held"`
	// OldestHold is when the oldest of them became a dead letter, zero
	// if none holds its key.
	OldestHold time.Time `json:"oldest_hold,omitzero"`
	// OldestPending is the creation time of the oldest pending row, zero if
	// there is none.
	OldestPending time.Time `json:"oldest_pending,omitzero"`
	// Now is the database's clock when the snapshot was taken.
	Now time.Time `json:"now"`
}

// OldestPendingAge is how long the oldest pending row has waited, or 0.
func (s Stats) OldestPendingAge() time.Duration {
	if s.OldestPending.IsZero() {
		return 0
	}
	return s.Now.Sub(s.OldestPending)
}

// OldestHoldAge is how long the oldest held key has been held, or 0 when
// none is.
func (s Stats) OldestHoldAge() time.Duration {
	if s.OldestHold.IsZero() {
		return 0
	}
	return s.Now.Sub(s.OldestHold)
}

// Errors about the schema version, returned by Migrate and by CheckSchema.
var (
	// ErrSchemaNewer means the database's schema was migrated by a newer
	// Courier than this binary; upgrade the binary.
	ErrSchemaNewer = errors.New("courier's schema in this database is newer than this binary")
	// ErrSchemaOutdated means the database lacks migrations this binary
	// needs; run `courier migrate` (or the dialect's Migrate).
	ErrSchemaOutdated = errors.New("courier's schema in this database is missing migrations")
)
