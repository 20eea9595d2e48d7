package store

import (
	"context"
	"net/http"
	"time"

	"github.com/google/uuid"
)

// Idempotency is what package idempotency needs from a database: key
// records that a request claims in one short transaction and completes in
// the caller's business transaction of type TTx.
type Idempotency[TTx any] interface {
	// InTx runs fn in a new transaction and commits it when fn returns nil.
	InTx(ctx context.Context, fn func(tx TTx) error) error
	// Claim creates the record of (scope, key) in flight for owner until
	// lockedUntil, or takes over an in-flight record whose lock has expired,
	// or reports the record as it stands. Records past their expiry count as
	// absent. It commits on its own.
	Claim(ctx context.Context, c KeyClaim) (KeyRecord, bool, error)
	// Complete stores the response in tx and marks the record done, if owner
	// still holds it; it reports whether it did.
	Complete(ctx context.Context, tx TTx, scope, key string, owner uuid.UUID, resp StoredResponse) (bool, error)
	// Release deletes an in-flight record owner holds (the request failed in
	// a way that must not be replayed), so the client may retry at once.
	Release(ctx context.Context, scope, key string, owner uuid.UUID) error
	// DeleteExpired removes up to limit records past their expiry and
	// returns how many.
	DeleteExpired(ctx context.Context, limit int) (int64, error)
}

// KeyClaim is a request's attempt to own an idempotency key.
type KeyClaim struct {
	Scope       string
	Key         string
	Fingerprint []byte
	Owner       uuid.UUID
	// LockFor is how long the claim holds the key before another request
	// may take it over.
	LockFor time.Duration
	// Retain is how long the record lives from its creation.
	Retain time.Duration
}

// KeyRecord is an idempotency key's record.
type KeyRecord struct {
	Scope       string
	Key         string
	Fingerprint []byte
	// Done is true once a response is stored.
	Done bool
	// LockedUntil is when an in-flight record may be taken over.
	LockedUntil time.Time
	// Response is set when Done.
	Response StoredResponse
}

// StoredResponse is a response kept for replay.
type StoredResponse struct {
	Status  int         `json:"status"`
	Headers http.Header `json:"headers,omitempty"`
	Body    []byte      `json:"-"`
}
