package idempotency_test

import (
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/idempotency"
	"github.com/courier-go/courier/store"
)

func claimFor(req idempotency.Request, lock time.Duration) store.KeyClaim {
	return store.KeyClaim{Scope: req.Scope, Key: req.Key, Fingerprint: req.Fingerprint, Owner: uuid.New(), LockFor: lock, Retain: time.Hour}
}
