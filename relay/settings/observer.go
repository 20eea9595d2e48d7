package settings

import (
	"time"

	"github.com/courier-go/courier"
)

// Observer is told what a relay does, as it does it, for metrics: package
// metrics implements it with Prometheus. Its methods are called from the
// relay's goroutines, concurrently, and must return quickly; they must not
// keep the slices they are given. Embed NopObserver in an implementation so
// that methods added to Observer later do nothing until you write them.
type Observer interface {
	// Claimed is called after each claim that leased rows: n of them.
	Claimed(n int)
	// Published is called after each call to the broker: msgs were sent,
	// errs is the broker's answer (nil where it acknowledged the message),
	// and the call took d. A batch of several keys takes one call per
	// round (see Ordering in package relay's documentation).
	Published(msgs []courier.Message, errs []error, d time.Duration)
	// Completed is called once a batch's outcome is recorded: published
	// messages marked, retried ones scheduled, dead ones parked.
	Completed(published, retried, dead int)
	// LeaseLost is called when a batch's outcome could not be recorded
	// before its lease ended: its published messages (the count) will be
	// published again once another claim takes them.
	LeaseLost(published int)
	// Released is called after each release that moved n scheduled
	// messages into the outbox, once they were due.
	Released(n int)
}

// NopObserver does nothing. Embed it in an Observer to implement only the
// methods you need.
type NopObserver struct{}

// Claimed does nothing.
func (NopObserver) Claimed(int) {}

// Published does nothing.
func (NopObserver) Published([]courier.Message, []error, time.Duration) {}

// Completed does nothing.
func (NopObserver) Completed(int, int, int) {}

// LeaseLost does nothing.
func (NopObserver) LeaseLost(int) {}

// Released does nothing.
func (NopObserver) Released(int) {}
