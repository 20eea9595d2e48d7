package cdc

import (
	"context"
	"sync"
	"time"

	"github.com/courier-go/courier/internal/waits"
	"github.com/courier-go/courier/store"
)

// recordEvery is the longest a published message waits to be written to
// the table (its row deleted or archived, or moved to the dead letters):
// the recorder writes what the broker answered when BatchSize messages
// have gathered or the oldest has waited this long. Writing in the
// background, in batches, keeps the table's writes out of the publishing
// path (a DELETE's commit no longer delays the next publish) and makes
// them few: at 1,000 messages a second, one transaction per 200 messages
// rather than one or two per message.
const recordEvery = 200 * time.Millisecond

// unseenRetry is how often the recorder looks again for rows it did not
// find while their transaction is not yet visible: the log brings a commit
// a moment before other sessions see it.
const unseenRetry = 10 * time.Millisecond

// unseenWarn is how long a row may stay unseen before the relay says so.
const unseenWarn = 10 * time.Second

// recorder writes what the broker answered to the table, in its own
// goroutine, and hands the items it wrote back to the publisher, which
// settles their transactions. Neither side ever blocks on the other: they
// share two lists under a mutex and wake each other through channels of
// one.
type recorder struct {
	r *Relay

	mu      sync.Mutex
	pub     []*item   // published, to write
	dead    []*item   // dead letters, to write
	since   time.Time // when the oldest of pub and dead arrived
	written []*item   // written, for the publisher to settle
	waiting int       // items handed over and not yet taken back

	wake    chan struct{} // tells the recorder something arrived
	settled chan struct{} // tells the publisher something was written

	unseen []unseen // the recorder's own: items whose rows it has not found yet
}

// unseen is an item whose row the relay has not found yet to delete or
// dead-letter.
type unseen struct {
	it     *item
	dead   bool
	since  time.Time
	warned bool
}

func newRecorder(r *Relay) *recorder {
	return &recorder{r: r, wake: make(chan struct{}, 1), settled: make(chan struct{}, 1)}
}

// hand gives the recorder the items a Publish call finished.
func (rc *recorder) hand(published, dead []*item) {
	if len(published)+len(dead) == 0 {
		return
	}
	rc.mu.Lock()
	if len(rc.pub)+len(rc.dead) == 0 {
		rc.since = rc.now()
	}
	rc.pub = append(rc.pub, published...)
	rc.dead = append(rc.dead, dead...)
	rc.waiting += len(published) + len(dead)
	rc.mu.Unlock()
	signal(rc.wake) // the recorder writes now or sets its timer from since
}

// now is the relay's clock.
func (rc *recorder) now() time.Time { return rc.r.cfg.Clock.Now() }

// take returns the items written since the last call.
func (rc *recorder) take() []*item {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	w := rc.written
	rc.written = nil
	rc.waiting -= len(w)
	return w
}

// backlog is how many handed items are not yet taken back.
func (rc *recorder) backlog() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.waiting
}

// signal wakes the side that reads c, if it is not already woken.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run writes batches until ctx ends or the database fails twice in a row;
// it returns the error then, which ends the session. What it had not
// written stays in the table, to be published again (a duplicate, never a
// loss).
func (rc *recorder) run(ctx context.Context) error {
	for {
		if wait, ok := rc.wait(); !ok || wait > 0 {
			if !rc.sleep(ctx, wait) {
				return ctx.Err()
			}
			if !rc.due() {
				continue
			}
		}
		rc.mu.Lock()
		published, dead := rc.pub, rc.dead
		rc.pub, rc.dead = nil, nil
		rc.mu.Unlock()
		done, err := rc.record(ctx, published, dead)
		if err != nil {
			return err
		}
		if len(done) > 0 {
			rc.mu.Lock()
			rc.written = append(rc.written, done...)
			rc.mu.Unlock()
			signal(rc.settled)
		}
	}
}

// wait is how long until the next batch is due, and false when nothing
// waits to be written.
func (rc *recorder) wait() (time.Duration, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := len(rc.pub) + len(rc.dead)
	switch {
	case n >= rc.r.cfg.BatchSize:
		return 0, true
	case n > 0 && len(rc.unseen) > 0:
		return min(recordEvery-rc.now().Sub(rc.since), unseenRetry), true
	case n > 0:
		return recordEvery - rc.now().Sub(rc.since), true
	case len(rc.unseen) > 0:
		return unseenRetry, true
	}
	return 0, false
}

// sleep waits d, or until woken when d is 0; it reports false when ctx
// ended.
func (rc *recorder) sleep(ctx context.Context, d time.Duration) bool {
	var timer <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-rc.wake:
	case <-timer:
	case <-ctx.Done():
		return false
	}
	return true
}

// due reports whether a batch should be written now: full, old enough, or
// rows to look for again.
func (rc *recorder) due() bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := len(rc.pub) + len(rc.dead)
	return n >= rc.r.cfg.BatchSize || (n > 0 && rc.now().Sub(rc.since) >= recordEvery) || len(rc.unseen) > 0
}

// record writes what the broker said to the table, with the items whose
// rows were not found the last time, and returns the items that are done.
// It tries twice; the second failure is returned.
func (rc *recorder) record(ctx context.Context, published, dead []*item) ([]*item, error) {
	wasUnseen := make(map[*item]unseen, len(rc.unseen))
	for _, u := range rc.unseen {
		if u.dead {
			dead = append(dead, u.it)
		} else {
			published = append(published, u.it)
		}
		wasUnseen[u.it] = u
	}
	rc.unseen = rc.unseen[:0]
	var rec store.Recorded
	for attempt := 1; ; attempt++ {
		var err error
		rec, err = rc.r.db.Record(ctx, logItems(published), logItems(dead), rc.r.cfg.KeepPublished)
		if err == nil {
			break
		}
		if attempt == 2 {
			return nil, err
		}
		rc.r.log.Warn("could not record published messages; retrying", "error", err)
		if !waits.Sleep(ctx, rc.r.cfg.Backoff.Delay(attempt)) {
			return nil, ctx.Err()
		}
	}
	isDead := make(map[*item]bool, len(dead))
	for _, it := range dead {
		isDead[it] = true
	}
	later := make(map[*item]bool, len(rec.Missing))
	now := rc.now()
	for _, i := range rec.Missing {
		var it *item
		if i < len(published) {
			it = published[i]
		} else {
			it = dead[i-len(published)]
		}
		if it.txn == nil || rec.Visible(it.Xid) {
			continue // gone: published by another relay, or by this one before it died
		}
		u, ok := wasUnseen[it]
		if !ok {
			u = unseen{it: it, dead: isDead[it], since: now}
		}
		if !u.warned && now.Sub(u.since) >= unseenWarn {
			u.warned = true
			rc.r.log.Warn("a published message's transaction is still not visible; looking for its row again", "id", it.Seq, "message_id", it.Message.ID, "xid", it.Xid)
		}
		later[it] = true
		rc.unseen = append(rc.unseen, u)
	}
	done := make([]*item, 0, len(published)+len(dead)-len(later))
	for _, list := range [][]*item{published, dead} {
		for _, it := range list {
			if !later[it] {
				done = append(done, it)
			}
		}
	}
	return done, nil
}

// logItems returns what the database needs of items.
func logItems(items []*item) []*store.LogItem {
	out := make([]*store.LogItem, len(items))
	for i, it := range items {
		out[i] = &it.LogItem
	}
	return out
}
