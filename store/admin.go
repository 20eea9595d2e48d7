package store

import (
	"context"
	"errors"
	"time"
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
	// DeadLetter returns one, or ErrNotFound.
	DeadLetter(ctx context.Context, id int64) (DeadLetter, error)
	// ReplayDeadLetter moves a dead letter back into the outbox with its
	// original position among its key's messages and no attempts counted;
	// a relay publishes it again.
	ReplayDeadLetter(ctx context.Context, id int64) error
	// DiscardDeadLetter deletes a dead letter for good.
	DiscardDeadLetter(ctx context.Context, id int64) error
	// Parked lists up to limit consume-side dead letters of consumer (all
	// consumers when empty), oldest first.
	Parked(ctx context.Context, consumer string, limit int) ([]Parked, error)
	// ParkedMessage returns one, or ErrNotFound.
	ParkedMessage(ctx context.Context, id int64) (Parked, error)
	// RequestReplay asks the parking consumer to apply the message again;
	// the consumer does so within its ReplayEvery and unparks it.
	RequestReplay(ctx context.Context, id int64) error
	// DiscardParked deletes a parked message for good.
	DiscardParked(ctx context.Context, id int64) error
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
