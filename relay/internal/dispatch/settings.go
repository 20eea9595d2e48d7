package dispatch

import (
	"fmt"
	"time"

	"github.com/courier-go/courier"
)

// The defaults of Settings' zero fields (package relay exports them).
const (
	DefaultBatchSize      = 1000
	DefaultConcurrency    = 2
	DefaultPublishTimeout = 10 * time.Second
	DefaultMaxAttempts    = 10
	DefaultBackoffInitial = 500 * time.Millisecond
	DefaultBackoffMax     = time.Minute
	DefaultBackoffJitter  = 0.2
	// MaxBatchSize and MaxConcurrency bound BatchSize and Concurrency.
	MaxBatchSize   = 10000
	MaxConcurrency = 64
)

// Settings are the configuration fields both relays share, with one rule
// for their defaults and their ranges: a zero field takes its default, a
// value out of range is an error that names the field (as prefix says:
// "relay: Config", "cdc: Config") and its range.
type Settings struct {
	BatchSize      int
	Concurrency    int
	PublishTimeout time.Duration
	MaxAttempts    int
	Backoff        courier.Backoff
}

// SetDefaults fills the zero fields; publishTimeout is the default of
// PublishTimeout (the polling relay's depends on its lease).
func (s *Settings) SetDefaults(publishTimeout time.Duration) {
	if s.BatchSize == 0 {
		s.BatchSize = DefaultBatchSize
	}
	if s.Concurrency == 0 {
		s.Concurrency = DefaultConcurrency
	}
	if s.PublishTimeout == 0 {
		s.PublishTimeout = publishTimeout
	}
	if s.MaxAttempts == 0 {
		s.MaxAttempts = DefaultMaxAttempts
	}
	s.Backoff = s.Backoff.Or(courier.Backoff{Initial: DefaultBackoffInitial, Max: DefaultBackoffMax, Jitter: DefaultBackoffJitter})
}

// Validate reports the first field out of range.
func (s Settings) Validate(prefix string) error {
	switch {
	case s.BatchSize < 1 || s.BatchSize > MaxBatchSize:
		return fmt.Errorf("%s.BatchSize is %d: use 1 to %d", prefix, s.BatchSize, MaxBatchSize)
	case s.Concurrency < 1 || s.Concurrency > MaxConcurrency:
		return fmt.Errorf("%s.Concurrency is %d: use 1 to %d", prefix, s.Concurrency, MaxConcurrency)
	case s.PublishTimeout <= 0:
		return fmt.Errorf("%s.PublishTimeout is %s: use more than 0", prefix, s.PublishTimeout)
	case s.MaxAttempts < 1:
		return fmt.Errorf("%s.MaxAttempts is %d: use 1 or more", prefix, s.MaxAttempts)
	}
	return s.Backoff.Validate(prefix + ".Backoff")
}
