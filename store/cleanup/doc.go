// Package cleanup keeps Courier's growing tables short: it deletes copies
// of published rows, inbox markers, failed runs left behind, expired
// Idempotency-Key records, finished sagas with their history, released
// scheduled messages, the consumers' latency samples and, when asked to,
// old dead letters, each once it is older than its retention.
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
//		store.TableLatency:      7 * 24 * time.Hour,
//	}}
//	g.Go(func() error { return c.Run(ctx, 10*time.Minute) }) // or c.RunOnce(ctx); g: an errgroup.Group
package cleanup
