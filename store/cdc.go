package store

import (
	"context"
	"errors"
	"time"

	"github.com/courier-go/courier"
)

// The types below cross between the CDC relay (relay/cdc), which reads the
// outbox from PostgreSQL's log, and store/postgres, which knows the
// outbox's tables, its columns and how its messages look in the log.

// The names of the CDC relay's replication slot and publication when its
// configuration gives none: both are called after the table they carry.
const (
	DefaultSlot        = "courier_outbox"
	DefaultPublication = "courier_outbox"
)

// LogItem is an outbox message the CDC relay read from the log or from the
// table.
type LogItem struct {
	// Seq is the row's id; 0 for a table-less message (it has no row).
	Seq int64
	// Xid is the transaction that wrote it, as the log gives it; 0 for a
	// row read from the table.
	Xid uint32
	// Message is the message.
	Message courier.Message
	// Attempts counts its counted failures.
	Attempts int
	// History is its failures not yet written to the database.
	History []PublishAttempt
	// Failed is true once a failure of it was written to the database.
	Failed bool
	// Hold, on a dead item, makes its dead letter hold its key
	// (Failure.Hold).
	Hold bool
}

// HoldResult is what holding one LogItem did (see Holding).
type HoldResult int

// The results of holding a LogItem.
const (
	// HeldBehind: a dead letter holds its key; the item waits behind it
	// in courier_outbox_held (its row moved there, or, table-less,
	// inserted with an id from courier_outbox's sequence).
	HeldBehind HoldResult = iota
	// NotHeld: no dead letter holds its key (any more: it was replayed or
	// discarded), and its row, if it has one, is still there: publish it.
	NotHeld
	// HoldMissing: its row was not found. Holding.Visible tells whether
	// it is gone (its key was released and its rows put back with new
	// ids, which the log brings again; or published) or its transaction
	// is not visible yet (look again).
	HoldMissing
)

// Holding is what holding LogItems did, item by item.
type Holding struct {
	// Results are the items' results, in their order.
	Results []HoldResult
	// Visible reports whether a transaction was visible when the rows
	// were looked for (as Recorded.Visible); set when a result is
	// HoldMissing.
	Visible func(xid uint32) bool
}

// LogEventKind says what a LogEvent is.
type LogEventKind int

// The kinds of LogEvent.
const (
	// LogNone is anything of no concern to the outbox.
	LogNone LogEventKind = iota
	// LogBegin starts a transaction: Xid is set.
	LogBegin
	// LogMessage is a message of the outbox in the current transaction:
	// Item is set.
	LogMessage
	// LogCommit ends the current transaction: End is set.
	LogCommit
	// LogScheduled is a scheduled message written in the current
	// transaction (store.Scheduler): not to publish, but a due time the
	// relay may not know yet.
	LogScheduled
)

// LogEvent is one decoded message of the log.
type LogEvent struct {
	Kind LogEventKind
	// Xid is the transaction's id (LogBegin).
	Xid uint32
	// End is the log position just past the transaction's commit
	// (LogCommit).
	End uint64
	// Item is the message (LogMessage); its Xid is left to the caller.
	Item LogItem
}

// LogDecoder decodes the log's messages (pgoutput's, one XLogData's data
// at a time) into what the outbox wrote. It is not safe for concurrent use.
type LogDecoder interface {
	Decode(data []byte) (LogEvent, error)
}

// LogFailure is one failed publish of a LogItem, to be recorded.
type LogFailure struct {
	Item *LogItem
	// Error is the broker's error.
	Error string
	// At is when it failed.
	At time.Time
	// Counted says whether it counts as an attempt.
	Counted bool
	// Delay is how long until its retry.
	Delay time.Duration
}

// TableReader reads the outbox's rows, oldest first, in one snapshot.
type TableReader interface {
	// Page returns up to n rows after the row with id after.
	Page(ctx context.Context, after int64, n int) ([]LogItem, error)
	// Close ends the snapshot.
	Close(ctx context.Context)
}

// Recorded is what recording the broker's answers found.
type Recorded struct {
	// Missing are the indexes (into published, then dead) of the items
	// whose rows were not found.
	Missing []int
	// Visible reports whether a transaction was visible when the rows
	// were looked for: a row of a visible transaction that was not found
	// is gone (published by another relay, or by this one before it
	// died); one of a transaction not yet visible is to be looked for
	// again.
	Visible func(xid uint32) bool
}

// SlotState is the state of a logical replication slot.
type SlotState struct {
	// Exists is false when there is no such slot.
	Exists bool
	// Active is true while a connection reads it (or makes it).
	Active bool
	// PID is its reader's walsender, when known.
	PID *int32
	// WALStatus is PostgreSQL's wal_status: reserved, extended,
	// unreserved or lost.
	WALStatus string
	// Confirmed is its confirmed position; 0 while it is being made.
	Confirmed uint64
	// LagBytes is how far Confirmed is behind the end of the log.
	LagBytes int64
	// Failover is true for a failover slot (PostgreSQL 17 and later),
	// which standbys that synchronize slots keep, so that it outlives a
	// promotion.
	Failover bool
}

// ErrSlotExists is returned when a slot to make exists already.
var ErrSlotExists = errors.New("store: the replication slot exists")

// ErrLocked is returned when another process holds a lock.
var ErrLocked = errors.New("store: locked by another process")
