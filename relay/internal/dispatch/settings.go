package dispatch

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/relay/settings"
)

// Settings points at the fields both relays' configurations have (see
// package relay/settings), so that one rule gives them their defaults and
// their ranges, in place: a zero field takes its default, a value out of
// range is an error that names the field (as prefix says: "relay:
// Config", "cdc: Config") and its range.
type Settings struct {
	BatchSize      *int
	Concurrency    *int
	PublishTimeout *time.Duration
	MaxAttempts    *int
	Backoff        *courier.Backoff
	Observer       *settings.Observer
	Logger         **slog.Logger
	HoldKeys       *[]string
}

// SetDefaults fills the zero fields; publishTimeout is the default of
// PublishTimeout (the polling relay's depends on its lease).
func (s Settings) SetDefaults(publishTimeout time.Duration) {
	if *s.BatchSize == 0 {
		*s.BatchSize = settings.DefaultBatchSize
	}
	if *s.Concurrency == 0 {
		*s.Concurrency = settings.DefaultConcurrency
	}
	if *s.PublishTimeout == 0 {
		*s.PublishTimeout = publishTimeout
	}
	if *s.MaxAttempts == 0 {
		*s.MaxAttempts = settings.DefaultMaxAttempts
	}
	*s.Backoff = s.Backoff.Or(courier.Backoff{Initial: settings.DefaultBackoffInitial, Max: settings.DefaultBackoffMax, Jitter: settings.DefaultBackoffJitter})
	if *s.Observer == nil {
		*s.Observer = settings.NopObserver{}
	}
	if *s.Logger == nil {
		*s.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first field out of range.
func (s Settings) Validate(prefix string) error {
	switch {
	case *s.BatchSize < 1 || *s.BatchSize > settings.MaxBatchSize:
		return fmt.Errorf("%s.BatchSize is %d: use 1 to %d", prefix, *s.BatchSize, settings.MaxBatchSize)
	case *s.Concurrency < 1 || *s.Concurrency > settings.MaxConcurrency:
		return fmt.Errorf("%s.Concurrency is %d: use 1 to %d", prefix, *s.Concurrency, settings.MaxConcurrency)
	case *s.PublishTimeout <= 0:
		return fmt.Errorf("%s.PublishTimeout is %s: use more than 0", prefix, *s.PublishTimeout)
	case *s.MaxAttempts < 1:
		return fmt.Errorf("%s.MaxAttempts is %d: use 1 or more", prefix, *s.MaxAttempts)
	}
	if err := s.Backoff.Validate(prefix + ".Backoff"); err != nil {
		return err
	}
	return validateHoldKeys(prefix+".HoldKeys", *s.HoldKeys)
}
