package store

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Inbox is what package inbox needs from a database to apply each message
// once: a transaction of the caller's type TTx, and a dedup marker inserted
// in it. The marker and the handler's effects commit together, so a message
// whose handler failed leaves no marker and is applied when it comes again.
type Inbox[TTx any] interface {
	// InTx runs fn in a new transaction and commits it when fn returns nil;
	// otherwise it rolls back and returns fn's error.
	InTx(ctx context.Context, fn func(tx TTx) error) error
	// Mark records in tx that consumer processed message id. It returns false
	// when the marker exists already: the message is a duplicate. A
	// concurrent transaction marking the same message makes Mark wait for
	// it; if that one commits, Mark returns false.
	//
	// Mark also deletes in tx the failures recorded for the message and
	// consumer (ConsumerStore.RecordFailure), counted or not, so that they
	// go when it is applied, whichever instance applies it, and stay when
	// tx rolls back. A duplicate's Mark deletes them too: a run that failed
	// while another delivery applied the message records its failure after
	// that one's commit, and the next delivery, a duplicate, deletes it.
	Mark(ctx context.Context, tx TTx, consumer string, id uuid.UUID) (bool, error)
}

// ConsumerStore keeps what a consumer parks and cleans up, independently of
// the transaction type.
type ConsumerStore interface {
	// Park stores a delivery that will not be processed as it is.
	Park(ctx context.Context, p Parked) error
	// ReplayRequested returns up to limit parked deliveries of consumer that
	// an operator asked to replay, oldest first.
	ReplayRequested(ctx context.Context, consumer string, limit int) ([]Parked, error)
	// Unpark deletes a parked delivery (after its replay succeeded).
	Unpark(ctx context.Context, id int64) error
	// ReplayFailed withdraws the replay request of a parked delivery whose
	// replay failed, recording the error as another attempt.
	ReplayFailed(ctx context.Context, id int64, err string) error
	// DeleteMarkers removes up to limit dedup markers older than before and
	// returns how many it removed.
	DeleteMarkers(ctx context.Context, before time.Time, limit int) (int64, error)
	// RecordFailure records that a run of consumer's handler failed on
	// message id (its transaction was rolled back), in a transaction of its
	// own, and returns every failure recorded for that message and consumer
	// so far, oldest first, this one included, each with its Uncounted. The record outlives the
	// process and is shared by every instance of the consumer, so failed
	// runs are counted however many times the message is delivered, and a
	// delivery lost to a crash counts nothing.
	RecordFailure(ctx context.Context, consumer string, id uuid.UUID, failure Attempt) ([]Attempt, error)
	// ClearFailures deletes the failures recorded for message id of
	// consumer, once it was parked (Inbox.Mark deletes them when it is
	// applied).
	ClearFailures(ctx context.Context, consumer string, id uuid.UUID) error
	// DeleteFailures removes up to limit recorded failures that happened
	// before before (those ClearFailures could not delete) and returns how
	// many it removed.
	DeleteFailures(ctx context.Context, before time.Time, limit int) (int64, error)
}

// Parked is a consume-side dead letter: a delivery its consumer gave up on,
// with the reason, the last error and the attempts seen.
type Parked struct {
	// ID identifies the parked delivery (set by the store).
	ID int64 `json:"id"`
	// Consumer that parked it.
	Consumer string `json:"consumer"`
	// MessageID as received; empty when the delivery had none.
	MessageID string `json:"message_id,omitempty"`
	// Subject, Headers and Payload are the delivery as received, so a
	// replay decodes it afresh.
	Subject string              `json:"subject"`
	Headers map[string][]string `json:"headers,omitempty"`
	Payload []byte              `json:"payload"`
	// Reason is ReasonMalformed, ReasonFailed, ReasonNewerVersion or
	// ReasonHeld.
	Reason string `json:"reason"`
	// Error is the last error.
	Error string `json:"error"`
	// Attempts is how many runs of the handler failed (1 for a delivery
	// that could not be decoded).
	Attempts int `json:"attempts"`
	// History lists the errors seen, oldest first.
	History []Attempt `json:"history,omitempty"`
	// ParkedAt is when it was parked.
	ParkedAt time.Time `json:"parked_at"`
	// ReplayRequested is when an operator asked for a replay, if they did.
	ReplayRequested *time.Time `json:"replay_requested,omitempty"`
	// Key is the message's ordering key when its consumer holds the keys
	// of its topic (inbox.ConsumerConfig.HoldKeys); empty otherwise.
	Key string `json:"key,omitempty"`
	// Behind is, for a delivery parked with ReasonHeld, the id of the
	// parked delivery that holds its key (the cause); 0 for the cause
	// itself and for every delivery that holds no key.
	Behind int64 `json:"behind,omitempty"`
}

// Attempt is one failed try.
type Attempt struct {
	At    time.Time `json:"at"`
	Error string    `json:"error"`
	// Uncounted marks a run that does not count toward the consumer's
	// MaxDeliveries: the message was newer than the consumer knows
	// (courier.ErrNewerVersion), and waits for the consumer's deploy.
	Uncounted bool `json:"uncounted,omitempty"`
}

// Counted returns how many of hist count toward MaxDeliveries, and when
// the first uncounted one happened (zero when none did).
func Counted(hist []Attempt) (n int, firstUncounted time.Time) {
	for _, a := range hist {
		switch {
		case !a.Uncounted:
			n++
		case firstUncounted.IsZero():
			firstUncounted = a.At
		}
	}
	return n, firstUncounted
}

// Reasons a delivery is parked.
const (
	// ReasonMalformed: the delivery could not be decoded, its type has no
	// handler, or its payload did not decode. It is parked at once.
	ReasonMalformed = "malformed"
	// ReasonFailed: the handler failed on every allowed delivery.
	ReasonFailed = "failed"
	// ReasonNewerVersion: the message's version is newer than any the
	// consumer knows (courier.ErrNewerVersion), and stayed so for the
	// consumer's NewerVersionWait. Replay it once the consumer that knows
	// the version is deployed.
	ReasonNewerVersion = "newer_version"
	// ReasonHeld: the delivery's key is held for its consumer by an
	// earlier parked delivery of that key (Parked.Behind, the cause), so
	// it was parked behind it unprocessed (inbox.ConsumerConfig.HoldKeys).
	// Replaying the cause applies it after the cause, in order.
	ReasonHeld = "held"
)

// KeyHolds is what a consumer that holds keys (inbox.ConsumerConfig
// HoldKeys) needs of its ConsumerStore on top of it. A parked delivery of
// such a consumer holds its key: a row of courier_inbox_holds (consumer,
// ordering key, cause: the parked delivery's id). The key's later
// deliveries are parked behind the cause, unprocessed, until the cause's
// replay passes the hold on to each of them in turn and finally releases
// the key. Parking behind a hold and passing it on take turns on the
// hold's row (SELECT … FOR UPDATE on PostgreSQL and MySQL; SQLite runs one
// writer at a time), so no delivery is ever parked behind a hold that was
// released.
type KeyHolds interface {
	// HoldOf returns the id of the parked delivery that holds key for
	// consumer, 0 when the key is not held. It reads without locking: a
	// consumer calls it before each delivery of a topic that holds keys,
	// and ParkHolding decides.
	HoldOf(ctx context.Context, consumer, key string) (int64, error)
	// ParkHolding parks p, a delivery of key p.Key, and holds the key for
	// p.Consumer. When the key is held already, p is parked behind the
	// hold's cause, with Reason ReasonHeld and Behind the cause. Otherwise
	// p is parked as it is and becomes the cause of the key's new hold;
	// unless behindOnly, when nothing is parked and ok is false (the hold
	// was released meanwhile: the delivery is processed). A delivery of a
	// message parked already as the cause or behind it (a redelivery) is
	// not parked again: ok is true and parked has that one's ID. It
	// returns p as it was parked, with its ID.
	ParkHolding(ctx context.Context, p Parked, behindOnly bool) (parked Parked, ok bool, err error)
	// PassHold unparks the parked delivery id of consumer, of key key,
	// whose replay was applied (or that an operator discarded), and, when
	// it holds key, passes the hold on to the oldest delivery parked behind
	// it: that one becomes the cause (Behind 0, every other one moves
	// behind it) and is replay-requested. With none behind it, the key is
	// released. next is the new cause, 0 when there is none.
	PassHold(ctx context.Context, consumer, key string, id int64) (next int64, err error)
	// RequestCause withdraws the replay request of the delivery id, held
	// behind cause, and requests the replay of cause instead: a held
	// delivery is applied only after its cause.
	RequestCause(ctx context.Context, id, cause int64) error
	// RepairHolds passes on, as PassHold does, every hold of consumer
	// whose cause is no longer parked (Admin.DiscardParked deleted it),
	// and returns how many it passed on or released.
	RepairHolds(ctx context.Context, consumer string) (int, error)
}

// GroupInbox is an Inbox that marks a group of messages in one statement:
// how package inbox applies several messages in one transaction
// (inbox.ConsumerConfig.Group) without a round trip per message. An
// Inbox without it has its messages marked one Mark at a time, in the same
// transaction.
type GroupInbox[TTx any] interface {
	Inbox[TTx]
	// MarkGroup records in tx that consumer processed each of ids, which
	// are distinct and in ascending order (uuid bytes), and returns for
	// each, in the order of ids, whether its marker was new: false for a
	// duplicate. It is Mark for each id, in one statement where the
	// dialect allows: it waits for a concurrent transaction marking one
	// of them (locking markers in ascending order, so that two groups
	// sharing messages do not deadlock), and deletes in tx the failures
	// recorded for every one of them, duplicates included.
	MarkGroup(ctx context.Context, tx TTx, consumer string, ids []uuid.UUID) ([]bool, error)
}
