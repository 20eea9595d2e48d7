package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// ErrNotFound is returned for a dead letter or parked message that does not
// exist (any more).
var ErrNotFound = errors.New("not found")

// Admin is what operators' tools (the courier CLI) need from a database:
// the outbox's state and both kinds of dead letters.
type Admin interface {
	// Stats reports the outbox's state.
	Stats(ctx context.Context) (Stats, error)
	// DeadLetters lists up to limit relay-side dead letters, oldest first.
	DeadLetters(ctx context.Context, limit int) ([]DeadLetter, error)
	// ListDeadLetters lists the relay-side dead letters q selects, by
	// id, as summaries: what a list of them shows, without their
	// payloads, headers and histories. A page of a long list starts
	// after the last id of the one before (ListQuery.After).
	ListDeadLetters(ctx context.Context, q ListQuery) ([]DeadLetterSummary, error)
	// DeadLetter returns one, or ErrNotFound.
	DeadLetter(ctx context.Context, id int64) (DeadLetter, error)
	// ReplayDeadLetter moves a dead letter back into the outbox with its
	// original position among its key's messages and no attempts counted;
	// a relay publishes it again. One that holds its key (Failure.Hold)
	// goes back with the messages held behind it and its key's messages
	// still pending, in that order, under new ids, and the key is released:
	// a relay publishes it first, then them in order.
	ReplayDeadLetter(ctx context.Context, id int64) error
	// DiscardDeadLetter deletes a dead letter for good. One that holds
	// its key releases it: the messages held behind it, then its key's
	// messages still pending, go back into the outbox in that order, under
	// new ids.
	DiscardDeadLetter(ctx context.Context, id int64) error
	// HeldKeys lists the keys that dead letters hold (Failure.Hold), by
	// their cause's id: those of the dead letters q selects (Topic,
	// Error, IDs, After and Limit as ListDeadLetters reads them).
	HeldKeys(ctx context.Context, q ListQuery) ([]HeldKey, error)
	// ListHeld lists up to limit (0: DefaultListLimit, at most
	// MaxListLimit) of the messages held behind the dead letter cause, by
	// id, those above after.
	ListHeld(ctx context.Context, cause int64, after int64, limit int) ([]HeldMessage, error)
	// ConsumerHolds lists the keys consumers hold (KeyHolds), by their
	// cause's id: the parked deliveries q selects (as ListParked does)
	// that hold their key, each with how many deliveries are parked
	// behind it.
	ConsumerHolds(ctx context.Context, q ListQuery) ([]ConsumerHold, error)
	// Parked lists up to limit consume-side dead letters of consumer (all
	// consumers when empty), oldest first.
	Parked(ctx context.Context, consumer string, limit int) ([]Parked, error)
	// ListParked lists the consume-side dead letters q selects, by id, as
	// summaries: without their payloads, histories and headers (but the
	// type they name).
	ListParked(ctx context.Context, q ListQuery) ([]ParkedSummary, error)
	// ParkedMessage returns one, or ErrNotFound.
	ParkedMessage(ctx context.Context, id int64) (Parked, error)
	// RequestReplay asks the parking consumer to apply the message again;
	// the consumer does so within its ReplayEvery and unparks it.
	RequestReplay(ctx context.Context, id int64) error
	// DiscardParked deletes a parked message for good.
	DiscardParked(ctx context.Context, id int64) error
	// ListScheduled lists the scheduled messages that wait and f selects,
	// in due order (then scheduling order), without their payloads, their
	// texts cut to TextPreview characters.
	ListScheduled(ctx context.Context, f ScheduleFilter) ([]ScheduledMessage, error)
	// CancelScheduled cancels a scheduled message in a transaction of its
	// own, as Scheduler.Cancel does, with its errors (ErrAlreadyDue,
	// ErrNotScheduled).
	CancelScheduled(ctx context.Context, id uuid.UUID) error
	// RepairParked replaces the message id and the headers of a parked
	// delivery, so that one parked because its headers were malformed (no
	// message id, no type…) decodes when it is replayed; RequestReplay
	// asks for the replay. ErrNotFound when it does not exist.
	RepairParked(ctx context.Context, id int64, messageID string, headers map[string][]string) error
}

// DeadLetter is a relay-side dead letter: a message the broker rejected
// MaxAttempts times.
type DeadLetter struct {
	ID          int64             `json:"id"`
	MessageID   string            `json:"message_id"`
	Topic       string            `json:"topic"`
	Key         string            `json:"key"`
	Type        string            `json:"type"`
	Version     int               `json:"version"`
	ContentType string            `json:"content_type"`
	Payload     []byte            `json:"payload"`
	Headers     map[string]string `json:"headers,omitempty"`
	OccurredAt  time.Time         `json:"occurred_at"`
	CreatedAt   time.Time         `json:"created_at"`
	Attempts    int               `json:"attempts"`
	LastError   string            `json:"last_error"`
	History     []PublishAttempt  `json:"history,omitempty"`
	DeadAt      time.Time         `json:"dead_at"`
	// Holds is true when the dead letter holds its key (Failure.Hold).
	Holds bool `json:"holds,omitempty"`
	// Held counts the messages of its key waiting behind it.
	Held int64 `json:"held,omitempty"`
}

// HeldKey is a key stopped by a dead letter that holds it (Failure.Hold),
// as courier status and the dashboard show it.
type HeldKey struct {
	// Cause is the id of the dead letter that holds the key: replay or
	// discard it to release the key.
	Cause int64  `json:"cause"`
	Topic string `json:"topic"`
	Key   string `json:"key"`
	// Since is when the cause became a dead letter.
	Since time.Time `json:"since"`
	// Held counts the messages waiting behind it.
	Held int64 `json:"held"`
	// LastError is the first ErrorPreview characters of the cause's last
	// error.
	LastError string `json:"last_error"`
}

// ConsumerHold is a key a consumer holds (KeyHolds): stopped by a parked
// delivery, its cause, behind which the key's later deliveries are parked.
type ConsumerHold struct {
	// Cause is the id of the parked delivery that holds the key: replay
	// or discard it to release the key.
	Cause    int64  `json:"cause"`
	Consumer string `json:"consumer"`
	Key      string `json:"key"`
	// Subject is the cause's subject.
	Subject string `json:"subject"`
	// Since is when the hold began; a hold passed on to the next
	// delivery keeps its age.
	Since time.Time `json:"since"`
	// Held counts the deliveries parked behind the cause.
	Held int64 `json:"held"`
	// LastError is the first ErrorPreview characters of the cause's last
	// error.
	LastError string `json:"last_error"`
}

// HeldMessage is a message waiting behind a dead letter that holds its
// key, as a list shows it: no payload nor headers.
type HeldMessage struct {
	// ID is its outbox id (store.Record.Seq) when it was held.
	ID int64 `json:"id"`
	// Behind is the id of the dead letter that holds it.
	Behind    int64     `json:"behind"`
	MessageID string    `json:"message_id"`
	Topic     string    `json:"topic"`
	Key       string    `json:"key"`
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	HeldAt    time.Time `json:"held_at"`
}

// PublishAttempt is one failed publish in a dead letter's history.
type PublishAttempt struct {
	// At is when the publish failed.
	At time.Time `json:"at"`
	// Error is the broker's error.
	Error string `json:"error"`
	// Counted is true when the failure counted against the message's
	// attempts (Failure.Counted), false when the broker was blamed for it
	// (broker.ErrUnavailable) and it did not count.
	Counted bool `json:"counted"`
}

// ListQuery selects a page of dead letters (relay side) or parked
// deliveries (consumer side) for a list: those that every filter set
// selects, with an id above After, by id, Limit at most. Filters are
// matched by the database, so that a page holds Limit rows whenever that
// many match.
type ListQuery struct {
	// Topic selects, relay side, the dead letters of this topic; consumer
	// side, the deliveries whose subject is Topic or ends in "."+Topic (the
	// topic under a broker's prefix: "payments" selects
	// "courier.payments"). Empty: every topic.
	Topic string
	// Consumer selects the deliveries one consumer parked (consumer side
	// only; the relay side has no consumer and ignores it). Empty: every
	// consumer.
	Consumer string
	// Error selects those whose last error (consumer side: or reason)
	// contains this text, ignoring the case of ASCII letters (PostgreSQL
	// and MySQL ignore the case of other letters too; SQLite does not).
	// Empty: any error.
	Error string
	// IDs, when not empty, selects only these ids: at most MaxListLimit
	// of them.
	IDs []int64
	// After, when above 0, selects only ids above it: the last id of the
	// page before.
	After int64
	// Limit is the most rows returned: default DefaultListLimit, at most
	// MaxListLimit.
	Limit int
}

// The bounds of ListQuery.Limit, and of the texts a summary holds
// (DeadLetterSummary, ParkedSummary, ScheduledMessage). The database cuts
// each text before it sends it, so that a list of rows whose headers,
// reasons or errors are megabytes long reads kilobytes: a list reads
// neither payloads nor histories nor headers (but the type they name);
// DeadLetter and ParkedMessage return the whole row.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
	// ErrorPreview is how many characters of its last error a summary
	// holds.
	ErrorPreview = 200
	// TextPreview is how many characters of each other text a summary
	// holds at most: topic, key, type, subject, consumer, message id and
	// reason. It is the most bytes a Message's key may hold, so only a
	// text that reached the database without a Message's validation (a
	// parked delivery's headers come from the broker) is ever cut.
	TextPreview = 1024
)

// Check returns q with its default Limit, or an error naming the field
// that is out of range.
func (q ListQuery) Check() (ListQuery, error) {
	var err error
	if q.Limit, err = checkList("ListQuery", q.Limit, len(q.IDs)); err != nil {
		return q, err
	}
	if q.After < 0 {
		q.After = 0
	}
	return q, nil
}

// CheckHeldLimit returns the limit of Admin.ListHeld: DefaultListLimit for
// 0, or an error when it is out of 1 to MaxListLimit.
func CheckHeldLimit(limit int) (int, error) {
	switch {
	case limit == 0:
		return DefaultListLimit, nil
	case limit < 0 || limit > MaxListLimit:
		return limit, fmt.Errorf("ListHeld's limit is %d: use 1 to %d (0 means %d)", limit, MaxListLimit, DefaultListLimit)
	}
	return limit, nil
}

// checkList is the rule of a list's Limit and IDs in the query type named
// what: a limit of 0 is DefaultListLimit, one out of 1 to MaxListLimit an
// error, and so are more than MaxListLimit ids. It returns the limit.
func checkList(what string, limit, ids int) (int, error) {
	switch {
	case limit == 0:
		limit = DefaultListLimit
	case limit < 0 || limit > MaxListLimit:
		return limit, fmt.Errorf("%s.Limit is %d: use 1 to %d (0 means %d)", what, limit, MaxListLimit, DefaultListLimit)
	}
	if ids > MaxListLimit {
		return limit, fmt.Errorf("%s.IDs holds %d ids: ask for at most %d at once", what, ids, MaxListLimit)
	}
	return limit, nil
}

// DeadLetterSummary is a relay-side dead letter as a list shows it: its
// texts cut to TextPreview characters (ErrorPreview the last error).
type DeadLetterSummary struct {
	ID        int64  `json:"id"`
	MessageID string `json:"message_id"`
	Topic     string `json:"topic"`
	Key       string `json:"key"`
	Type      string `json:"type"`
	Attempts  int    `json:"attempts"`
	// LastError is the last error's first ErrorPreview characters.
	LastError string `json:"last_error"`
	// PayloadSize is the payload's length in bytes.
	PayloadSize int64     `json:"payload_size"`
	CreatedAt   time.Time `json:"created_at"`
	DeadAt      time.Time `json:"dead_at"`
	// Holds is true when the dead letter holds its key (Failure.Hold).
	Holds bool `json:"holds,omitempty"`
}

// ParkedSummary is a consume-side dead letter as a list shows it: the
// type its headers name but not the headers themselves, nor its payload
// nor its history; its texts cut to TextPreview characters (ErrorPreview
// the last error).
type ParkedSummary struct {
	ID        int64  `json:"id"`
	Consumer  string `json:"consumer"`
	MessageID string `json:"message_id,omitempty"`
	Subject   string `json:"subject"`
	// Type is the message type its headers name, as wire.TypeOf reads it
	// (package broker/wire): the first value of the first header of
	// wire.TypeHeaders that has one; "" when none has.
	Type   string `json:"type,omitempty"`
	Reason string `json:"reason"`
	// Error is the last error's first ErrorPreview characters.
	Error    string `json:"error"`
	Attempts int    `json:"attempts"`
	// PayloadSize is the payload's length in bytes.
	PayloadSize     int64      `json:"payload_size"`
	ParkedAt        time.Time  `json:"parked_at"`
	ReplayRequested *time.Time `json:"replay_requested,omitempty"`
	// Key is the message's ordering key when its consumer holds the keys
	// of its topic (Parked.Key); empty otherwise.
	Key string `json:"key,omitempty"`
	// Behind is, for a delivery parked with ReasonHeld, the id of the
	// parked delivery that holds its key (Parked.Behind); 0 otherwise.
	Behind int64 `json:"behind,omitempty"`
}
