package cdc

import (
	"context"
	"slices"
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
	hold    []*item   // items of held keys, to move behind their dead letters
	since   time.Time // when the oldest of pub, dead and hold arrived
	written []*item   // written, for the publisher to settle
	freed   []*item   // items of keys found free of a hold, for the publisher to publish
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

// hand gives the recorder the items a Publish call finished, and items of
// held keys to hold (after the dead letters that hold them are written).
func (rc *recorder) hand(published, dead, hold []*item) {
	if len(published)+len(dead)+len(hold) == 0 {
		return
	}
	rc.mu.Lock()
	if rc.queued() == 0 {
		rc.since = rc.now()
	}
	rc.pub = append(rc.pub, published...)
	rc.dead = append(rc.dead, dead...)
	rc.hold = append(rc.hold, hold...)
	rc.waiting += len(published) + len(dead) + len(hold)
	rc.mu.Unlock()
	signal(rc.wake) // the recorder writes now or sets its timer from since
}

// now is the relay's clock.
func (rc *recorder) now() time.Time { return rc.r.cfg.Clock.Now() }

// queued is how many items wait to be written. rc.mu is held.
func (rc *recorder) queued() int { return len(rc.pub) + len(rc.dead) + len(rc.hold) }

// take returns the items written since the last call, and those of held
// keys found free.
func (rc *recorder) take() (written, freed []*item) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	written, freed = rc.written, rc.freed
	rc.written, rc.freed = nil, nil
	rc.waiting -= len(written) + len(freed)
	return written, freed
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
		published, dead, hold := rc.pub, rc.dead, rc.hold
		rc.pub, rc.dead, rc.hold = nil, nil, nil
		rc.mu.Unlock()
		done, err := rc.record(ctx, published, dead)
		if err != nil {
			return err
		}
		held, freed, err := rc.holdItems(ctx, hold)
		if err != nil {
			return err
		}
		if len(done)+len(held)+len(freed) > 0 {
			rc.mu.Lock()
			rc.written = append(append(rc.written, done...), held...)
			rc.freed = append(rc.freed, freed...)
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
	n := rc.queued()
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
	n := rc.queued()
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

// holdItems moves items of held keys behind their dead letters, once no
// dead letter this relay made is still to be written (the one that holds
// them may be among those), and returns those held or gone (settled as
// written) and those whose key it found free (to publish). Those whose
// rows are not visible yet are looked for again later. It tries twice;
// the second failure is returned.
func (rc *recorder) holdItems(ctx context.Context, items []*item) (done, freed []*item, err error) {
	if len(items) == 0 {
		return nil, nil, nil
	}
	if slices.ContainsFunc(rc.unseen, func(u unseen) bool { return u.dead }) {
		rc.later(items)
		return nil, nil, nil
	}
	var h store.Holding
	for attempt := 1; ; attempt++ {
		if h, err = rc.r.db.Hold(ctx, logItems(items)); err == nil {
			break
		}
		if attempt == 2 {
			return nil, nil, err
		}
		rc.r.log.Warn("could not hold the messages of held keys; retrying", "error", err)
		if !waits.Sleep(ctx, rc.r.cfg.Backoff.Delay(attempt)) {
			return nil, nil, ctx.Err()
		}
	}
	var again []*item
	for i, it := range items {
		switch h.Results[i] {
		case store.HeldBehind:
			done = append(done, it)
		case store.NotHeld:
			if it.Seq == 0 {
				// A table-less message of a key released since it was
				// committed: the log brought the released rows later,
				// and it goes out before them (see Held keys).
				rc.r.log.Warn("a table-less message of a held key is published ahead of the messages its release put back; write table rows on topics that hold their keys",
					"message_id", it.Message.ID, "key", it.Message.Key, "topic", it.Message.Topic)
			}
			freed = append(freed, it)
		default: // its row is missing
			if it.txn == nil || h.Visible(it.Xid) {
				done = append(done, it) // gone: its key was released and its rows put back, which the log brings again
			} else {
				again = append(again, it)
			}
		}
	}
	rc.later(again)
	return done, freed, nil
}

// later puts items back at the head of those to hold, to be held at the
// next write (soon: see wait).
func (rc *recorder) later(items []*item) {
	if len(items) == 0 {
		return
	}
	rc.mu.Lock()
	rc.hold = append(items, rc.hold...)
	rc.since = rc.now().Add(unseenRetry - recordEvery) // due in unseenRetry
	rc.mu.Unlock()
}
