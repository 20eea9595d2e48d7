package store

import (
	"context"
	"errors"
	"time"
)

// ErrSagaExists is returned by Sagas.Create for an id already in use.
var ErrSagaExists = errors.New("saga exists")

// Sagas stores orchestrated saga instances (package saga) in the caller's
// transactions of type TTx. Every transition is one transaction: load,
// update with a version check, record the event, write outgoing commands to
// the outbox.
type Sagas[TTx any] interface {
	// InTx runs fn in a new transaction and commits it when fn returns nil.
	InTx(ctx context.Context, fn func(tx TTx) error) error
	// Create inserts a new instance; ErrSagaExists if the id is taken.
	Create(ctx context.Context, tx TTx, r SagaRecord) error
	// Load reads an instance; ErrNotFound if there is none.
	Load(ctx context.Context, tx TTx, sagaType, id string) (SagaRecord, error)
	// Update writes r if the stored version is still expect, setting the
	// version to r.Version; it reports whether it did.
	Update(ctx context.Context, tx TTx, r SagaRecord, expect int) (bool, error)
	// Record appends an entry to the instance's history.
	Record(ctx context.Context, tx TTx, e SagaEvent) error
	// History returns an instance's history, oldest first.
	History(ctx context.Context, sagaType, id string) ([]SagaEvent, error)
	// Due lists up to limit instances of sagaType, not finished, whose
	// deadline is at or before now.
	Due(ctx context.Context, sagaType string, now time.Time, limit int) ([]string, error)
}

// SagaRecord is a saga instance as stored.
type SagaRecord struct {
	Type  string
	ID    string
	State string
	// Phase is running, compensating, completed or cancelled.
	Phase string
	// Step is the index of the step awaited, or being compensated.
	Step int
	// Pending lists the steps still to compensate, next first.
	Pending []int
	// Data is the saga's own data, JSON.
	Data     []byte
	Reason   string
	Deadline *time.Time
	// Attempts counts sends of the current command or compensation.
	Attempts  int
	Version   int
	CreatedAt time.Time
	UpdatedAt time.Time
}

// SagaEvent is one entry of an instance's history: a transition, or an event
// that was ignored, and why.
type SagaEvent struct {
	Type      string    `json:"-"`
	SagaID    string    `json:"-"`
	At        time.Time `json:"at"`
	EventID   string    `json:"event_id,omitempty"`
	EventType string    `json:"event_type"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	// Outcome is "applied" or "ignored".
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
}
