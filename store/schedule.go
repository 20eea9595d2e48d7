package store

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
)

// Due is when a scheduled message falls due: at a point in time, or a delay
// after the moment the scheduling statement runs, as the store's clock
// measures it (the database's, unless the Driver has a Clock). Exactly one
// of the two is meaningful: At when it is not zero, else After.
type Due struct {
	// At is the time the message falls due.
	At time.Time
	// After is how long after now, by the store's clock, it falls due,
	// when At is zero. Zero or negative: due at once.
	After time.Duration
}

// Scheduler writes messages to be published later, in the caller's
// transaction, and cancels them in another. The outbox inserters of every
// dialect implement it (outbox.Writer.Schedule and Cancel use it).
//
// A scheduled message waits in a table of its own until it falls due; a
// relay then moves it into the outbox (its release), from where it is
// published like any message. It occurs at its due time: that is its
// OccurredAt from its release on (its id, a UUIDv7, still tells when it
// was written). While it waits it holds nothing back: not its
// key, not the relay's claims (see package relay, Ordering).
type Scheduler[TTx any] interface {
	// Schedule adds msgs, due at due, in tx. Messages are already
	// validated; their ids must be new (a scheduled message's id is also
	// its id in the outbox and on the broker).
	Schedule(ctx context.Context, tx TTx, due Due, msgs []courier.Message) error
	// Cancel removes the scheduled message id in tx, so that it is never
	// published once tx commits. It returns nil when it cancelled it, an
	// error wrapping ErrAlreadyDue when the message was released already
	// (published, or being published), and one wrapping ErrNotScheduled when
	// no scheduled message has that id (never scheduled, cancelled, or
	// released so long ago that its record was trimmed).
	Cancel(ctx context.Context, tx TTx, id uuid.UUID) error
}

// Errors of Cancel, which callers branch on.
var (
	// ErrAlreadyDue means the scheduled message fell due and was moved to
	// the outbox: it is published, or being published, and can no longer
	// be cancelled.
	ErrAlreadyDue = errors.New("the scheduled message is already due: it is published, or being published")
	// ErrNotScheduled means no scheduled message has the id: it was never
	// scheduled, was cancelled, or fell due so long ago that its record was
	// trimmed (store.TableReleased).
	ErrNotScheduled = errors.New("no scheduled message has this id")
)

// Releaser moves scheduled messages that have fallen due into the outbox.
// Every relay store implements it; relays call it when the next scheduled
// message falls due, so that it is published at or after its due time,
// never before, by the store's clock.
type Releaser interface {
	// Release moves up to limit scheduled messages that are due into the
	// outbox, in the order of their due times (and, for equal times, the
	// order they were scheduled in), each a pending row as if written at
	// that moment. Releases are serialised: when another one is under way,
	// it moves nothing and reports Busy.
	Release(ctx context.Context, limit int) (Released, error)
}

// Released is what a Release did and found.
type Released struct {
	// Count is how many messages it moved into the outbox.
	Count int
	// Waiting reports that scheduled messages are still waiting.
	Waiting bool
	// Next is how long, by the store's clock, until the earliest waiting
	// one falls due (0 or less: it is due, more than limit were); only
	// meaningful when Waiting.
	Next time.Duration
	// Busy reports that another release was under way: this one moved
	// nothing, and Waiting and Next are unknown.
	Busy bool
}

// ScheduledMessage is a scheduled message that waits, as operators see it.
type ScheduledMessage struct {
	// ID is the message id.
	ID uuid.UUID `json:"id"`
	// Topic, Key and Type are the message's, each cut to TextPreview
	// characters.
	Topic string `json:"topic"`
	Key   string `json:"key"`
	Type  string `json:"type"`
	// Size is the payload's length in bytes.
	Size int64 `json:"size"`
	// Due is when it falls due.
	Due time.Time `json:"due"`
	// Created is when it was scheduled.
	Created time.Time `json:"created"`
}

// ScheduleFilter selects scheduled messages in Admin.ListScheduled. Zero
// fields select everything.
type ScheduleFilter struct {
	// Topic, when set, keeps the messages of that topic.
	Topic string
	// Key, when set, keeps the messages of that key.
	Key string
	// DueBefore, when set, keeps the messages due before it.
	DueBefore time.Time
	// IDs, when not empty, keeps only these messages: at most
	// MaxListLimit.
	IDs []uuid.UUID
	// After, when set, lists the messages after this one in the list's
	// order (due time, then scheduling order): the cursor of the next page.
	After uuid.UUID
	// Limit is the most messages listed: default DefaultListLimit, at
	// most MaxListLimit.
	Limit int
}

// Check returns f with its defaults, or an error naming the field that is
// out of range.
func (f ScheduleFilter) Check() (ScheduleFilter, error) {
	var err error
	f.Limit, err = checkList("ScheduleFilter", f.Limit, len(f.IDs))
	return f, err
}
