// Package cleanup keeps Courier's growing tables short: it deletes copies
// of published rows, inbox markers, failed runs left behind, expired
// Idempotency-Key records, finished sagas with their history and, when
// asked to, old dead letters, each once it is older than its retention.
//
// Deletes run in small batches (Cleaner.Batch rows, 1,000 by default), each
// in a short transaction of its own, so that the application's writers
// never wait long for a lock or a page and a relay keeps its pace; a pause
// between batches (Cleaner.Pause) gives way further. Only one cleanup runs
// at a time per database, whatever the number of processes that run one: a
// pass takes the maintenance lock (store.Operations.TryLock: a PostgreSQL
// advisory lock, MySQL's GET_LOCK) and a pass that finds it taken does
// nothing.
//
//	c := &cleanup.Cleaner{Ops: driver.Operations(), Keep: map[store.Table]time.Duration{
//		store.TablePublished:    7 * 24 * time.Hour,
//		store.TableInboxMarkers: 30 * 24 * time.Hour,
//		store.TableKeys:         0, // as soon as they expire
//	}}
//	go c.Run(ctx, 10*time.Minute) // or c.RunOnce(ctx)
package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// DefaultLock is the maintenance lock a Cleaner takes unless told another.
const DefaultLock = "courier_cleanup"

// DefaultBatch is how many rows a batch deletes unless told otherwise.
const DefaultBatch = 1000

// DefaultPause is the wait between two batches unless told otherwise: with
// it, writers lost at most 6.8% of their rate (2 runs) while a cleanup
// deleted 5,000,000 rows on PostgreSQL at 34,000 rows/s; with 10 ms they
// lost 14% (median of 3), with none 13–44% (bench/, docs/operations.md).
const DefaultPause = 25 * time.Millisecond

// Cleaner deletes old rows. Set its fields before the first run; it is
// safe to run one pass at a time (Run does).
type Cleaner struct {
	// Ops is the database's maintenance view. Required.
	Ops store.Operations
	// Keep maps each table to trim to its retention: rows older than it
	// go. Tables absent from it are left alone. For store.TableKeys the
	// time is the record's expiry, so 0 deletes records once expired.
	Keep map[store.Table]time.Duration
	// Batch is the most rows one transaction deletes. Default DefaultBatch.
	Batch int
	// Pause is the wait between two batches of a table. Default
	// DefaultPause; negative: none, for a cleanup as fast as it goes.
	Pause time.Duration
	// Lock names the maintenance lock. Default DefaultLock.
	Lock string
	// Clock is the time the retentions count back from (and a pass's
	// duration is measured with). Default: the real clock. A test sets a
	// clock it moves to age rows without waiting.
	Clock courier.Clock
	// Log receives one line per table trimmed, and failures of Run's
	// passes. Default slog.Default().
	Log *slog.Logger
}

// Report is what a pass deleted.
type Report struct {
	// Deleted counts the rows deleted per table (sagas with their history
	// count once).
	Deleted map[store.Table]int64 `json:"deleted"`
	// Locked is true when another cleanup held the lock and this pass did
	// nothing.
	Locked bool `json:"locked,omitempty"`
}

// ErrNoOps is returned when Cleaner.Ops is nil.
var ErrNoOps = errors.New("cleanup: Cleaner.Ops is nil: set it to the database's Operations()")

func (c *Cleaner) defaults() error {
	if c.Ops == nil {
		return ErrNoOps
	}
	for t := range c.Keep {
		if _, ok := tableIndex(t); !ok {
			return fmt.Errorf("cleanup: Cleaner.Keep names %q: use one of store.Tables: %w", t, store.ErrUnknownTable)
		}
	}
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	if c.Pause == 0 {
		c.Pause = DefaultPause
	}
	if c.Lock == "" {
		c.Lock = DefaultLock
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

func tableIndex(t store.Table) (int, bool) {
	for i, u := range store.Tables {
		if u == t {
			return i, true
		}
	}
	return 0, false
}

// RunOnce runs one pass: it takes the lock (returning a Report with Locked
// set if another cleanup holds it), then trims each table of Keep in the
// order of store.Tables, batch after batch until a batch deletes fewer
// than Batch rows. It returns what it deleted so far with the first error.
func (c *Cleaner) RunOnce(ctx context.Context) (Report, error) {
	r := Report{Deleted: map[store.Table]int64{}}
	if err := c.defaults(); err != nil {
		return r, err
	}
	release, ok, err := c.Ops.TryLock(ctx, c.Lock)
	if err != nil {
		return r, fmt.Errorf("cleanup: %w", err)
	}
	if !ok {
		c.Log.Info("cleanup skipped: another cleanup holds the lock", "lock", c.Lock)
		r.Locked = true
		return r, nil
	}
	defer release()
	for _, t := range store.Tables {
		keep, ok := c.Keep[t]
		if !ok {
			continue
		}
		start := c.Clock.Now()
		before := start.Add(-keep)
		n, err := c.trim(ctx, t, before)
		r.Deleted[t] = n
		if n > 0 || err != nil {
			c.Log.Info("cleanup", "table", string(t), "deleted", n, "before", before.UTC(), "took", c.Clock.Now().Sub(start).Round(time.Millisecond))
		}
		if err != nil {
			return r, fmt.Errorf("cleanup: %w", err)
		}
	}
	return r, nil
}

// trim deletes t's rows from before before, batch after batch.
func (c *Cleaner) trim(ctx context.Context, t store.Table, before time.Time) (int64, error) {
	var total int64
	after := ""
	for {
		res, err := c.Ops.Trim(ctx, store.Trim{Table: t, Before: before, After: after, Limit: c.Batch})
		total += res.Deleted
		if err != nil || res.Deleted < int64(c.Batch) {
			return total, err
		}
		after = res.Next
		if c.Pause > 0 {
			select {
			case <-ctx.Done():
				return total, ctx.Err()
			case <-time.After(c.Pause):
			}
		}
	}
}

// Run runs a pass now and then every interval until ctx ends, and returns
// nil then. A pass that fails is logged, and the next one tries again.
func (c *Cleaner) Run(ctx context.Context, every time.Duration) error {
	if err := c.defaults(); err != nil {
		return err
	}
	if every <= 0 {
		return fmt.Errorf("cleanup: Run's interval is %s: use a positive duration, such as 10m", every)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := c.RunOnce(ctx); err != nil && ctx.Err() == nil {
			c.Log.Warn("cleanup failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
