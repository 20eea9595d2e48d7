// Package settings holds what both relays are configured with: the
// polling relay (package relay) and the one that reads PostgreSQL's log
// (package relay/cdc). Their Config types have fields of the same names
// (BatchSize, Concurrency, PublishTimeout, MaxAttempts, Backoff, Observer,
// Logger, HoldKeys) that take the defaults and have the ranges given here,
// and their Observer is the [Observer] here. HoldKeys names topics, each
// once and none empty, or is [AllTopics] alone. Package relay names the same
// things (relay.Observer, relay.DefaultBatchSize, …), so that programs
// that use the polling relay alone need not import this package.
package settings

import "time"

// The defaults of the shared fields' zero values, and the limits of their
// ranges.
const (
	// DefaultBatchSize is BatchSize's default.
	DefaultBatchSize = 1000
	// DefaultConcurrency is Concurrency's default: one batch publishing
	// while the next is claimed.
	DefaultConcurrency = 2
	// DefaultPublishTimeout is PublishTimeout's default (the polling
	// relay's is at most half its LeaseDuration).
	DefaultPublishTimeout = 10 * time.Second
	// DefaultMaxAttempts is MaxAttempts' default.
	DefaultMaxAttempts = 10
	// DefaultBackoffInitial is Backoff.Initial's default.
	DefaultBackoffInitial = 500 * time.Millisecond
	// DefaultBackoffMax is Backoff.Max's default.
	DefaultBackoffMax = time.Minute
	// DefaultBackoffJitter is Backoff.Jitter's default.
	DefaultBackoffJitter = 0.2
	// MaxBatchSize is the largest BatchSize.
	MaxBatchSize = 10000
	// MaxConcurrency is the largest Concurrency.
	MaxConcurrency = 64
)

// AllTopics, alone in a configuration's HoldKeys, makes the dead letters of
// every topic hold their key.
const AllTopics = "*"
