package cdc

import (
	"context"
	"errors"
	"time"
)

// key is one ordering key's messages waiting to be published, in commit
// order.
type key struct {
	name      string
	items     []*item
	notBefore time.Time // held after a failure until then
	busy      bool      // its head is in a Publish call
}

// publisher is the state of one session's publishing.
type publisher struct {
	r       *Relay
	prog    *progress
	rec     *recorder
	keys    map[string]*key
	active  []*key // keys with items, in the order they arrived
	txs     []*txn // handed transactions not yet done, in commit order
	pending int    // items in keys
	calls   int    // Publish calls in flight

	// Held keys: those a dead letter holds, as the relay believes (read
	// as the session starts, then those of the dead letters it makes),
	// and the items of each handed to the recorder to hold and not yet
	// back. A key's items go to be held while either says so; the
	// recorder's Hold checks the key against the database (a replay or a
	// discard may have released it) and hands back the items it found
	// free.
	held    map[string]bool
	holding map[string]int
	// before is the log's position when the session began: the rows of
	// the transactions that ended there or earlier were committed before
	// the relay read the held keys, and a key among theirs may have been
	// released since, its rows put back with new ids that the log brings
	// later. They go to the recorder like a held key's, whose Hold drops
	// the copies whose rows are gone (see Held keys in the package
	// documentation) and hands back the others, in their key's order.
	// It is 0 (nothing checked) when no topic holds its keys and no key
	// was held as the session began.
	before uint64

	// While the slot is made: the rows from the table not yet recorded,
	// whether the sweep's last page arrived, and recorded, closed (then
	// nil) once both say every row from the table is recorded.
	swept    int
	sweptAll bool
	recorded chan struct{}
}

// publish takes batches from in and publishes their messages key by key
// until ctx ends. What the broker answered is written to the table by a
// recorder in the background (see recordEvery); a transaction is confirmed
// once its every message is written there.
func (r *Relay) publish(ctx context.Context, in <-chan batch, p *publisher) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.rec = newRecorder(r)
	recorded := make(chan error, 1)
	go func() {
		recorded <- p.rec.run(ctx)
		cancel()
	}()
	err := r.publishing(ctx, in, p)
	cancel()
	if rerr := <-recorded; rerr != nil && !errors.Is(rerr, context.Canceled) {
		return rerr // the database failed: that ended the session
	}
	return err
}

// publishing is publish's loop. Up to Concurrency Publish calls run at
// once, each on keys no other call holds, so a key's messages still go one
// call at a time.
func (r *Relay) publishing(ctx context.Context, in <-chan batch, p *publisher) error {
	answered := make(chan *call, r.cfg.Concurrency)
	defer func() {
		for ; p.calls > 0; p.calls-- {
			<-answered // calls end with ctx
		}
	}()
	for {
		written, freed := p.rec.take()
		p.settle(written)
		p.requeue(freed)
		// Take what has arrived, without holding more than a few
		// batches' worth in memory, waiting to be published or to be
		// recorded.
		room := func() bool { return p.pending < 4*r.cfg.BatchSize && p.rec.backlog() < 8*r.cfg.BatchSize }
		for room() {
			select {
			case b := <-in:
				p.add(b)
				continue
			default:
			}
			break
		}
		now := r.cfg.Clock.Now()
		if p.calls < r.cfg.Concurrency {
			if c := p.round(now); c != nil {
				p.calls++
				go func() {
					r.publishCall(ctx, c)
					answered <- c
				}()
				continue
			}
		}
		timer := time.NewTimer(p.nextDue(now))
		var from <-chan batch
		if room() {
			from = in
		}
		select {
		case c := <-answered:
			p.calls--
			if ctx.Err() != nil {
				timer.Stop()
				return ctx.Err()
			}
			published, dead, held, retried := p.results(c)
			r.m.published.Add(int64(len(published)))
			r.m.dead.Add(int64(len(dead)))
			r.m.retried.Add(int64(retried))
			r.cfg.Observer.Completed(len(published), retried, len(dead))
			p.rec.hand(published, dead, p.counted(held))
		case b := <-from:
			p.add(b)
		case <-p.rec.settled:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
		timer.Stop()
	}
}

// add queues a batch's items under their keys and registers its
// transaction, or counts the rows read from the table.
func (p *publisher) add(b batch) {
	if b.t != nil {
		p.txs = append(p.txs, b.t)
	} else {
		p.swept += len(b.items)
		p.sweptAll = p.sweptAll || b.last
	}
	var hold []*item
	early := b.t != nil && b.t.end <= p.before
	for _, it := range b.items {
		if p.isHeld(it.Message.Key) || (early && it.Seq > 0) {
			hold = append(hold, it)
			continue
		}
		p.queue(it)
	}
	p.hold(hold)
	p.advance()
}

// queue puts it at the end of its key's items.
func (p *publisher) queue(it *item) {
	k := p.keys[it.Message.Key]
	if k == nil {
		k = &key{name: it.Message.Key}
		p.keys[it.Message.Key] = k
	}
	if len(k.items) == 0 {
		p.active = append(p.active, k)
	}
	k.items = append(k.items, it)
	p.pending++
}

// isHeld reports whether key's items go to be held.
func (p *publisher) isHeld(key string) bool { return p.held[key] || p.holding[key] > 0 }

// hold hands items of held keys to the recorder, which moves them behind
// their dead letters.
func (p *publisher) hold(items []*item) { p.rec.hand(nil, nil, p.counted(items)) }

// counted counts items of held keys as handed to the recorder to hold,
// and returns them.
func (p *publisher) counted(items []*item) []*item {
	for _, it := range items {
		it.held = true
		p.holding[it.Message.Key]++
	}
	return items
}

// unhold counts it, an item of a held key, as back from the recorder.
func (p *publisher) unhold(it *item) {
	it.held = false
	k := it.Message.Key
	if p.holding[k]--; p.holding[k] <= 0 {
		delete(p.holding, k)
	}
}

// requeue takes back items the recorder found free of a hold: their key
// was released (its dead letter replayed or discarded), and they are
// published after the items of the key before them.
func (p *publisher) requeue(freed []*item) {
	for _, it := range freed {
		k := it.Message.Key
		if p.held[k] {
			delete(p.held, k)
			p.r.log.Info("a held key was released; publishing its messages again", "key", k)
		}
		p.unhold(it)
		p.queue(it)
	}
}

// round picks the keys of the next round, up to BatchSize messages: every
// ready key's head, or as much of its items as the dispatcher may send at
// once to a publisher that keeps a key's order.
func (p *publisher) round(now time.Time) *call {
	if now.Before(p.r.disp.Outage().PausedUntil) {
		return nil
	}
	c := &call{}
	room := p.r.cfg.BatchSize
	for _, k := range p.active {
		if room <= 0 {
			break
		}
		if len(k.items) == 0 || k.busy || now.Before(k.notBefore) {
			continue
		}
		n := 1
		if p.r.pipelined {
			n = min(len(k.items), room)
		}
		c.add(k, k.items[:n])
		k.busy = true
		room -= n
	}
	if len(c.keys) == 0 {
		return nil
	}
	return c
}

// nextDue is how long until a held key or the pause comes due, at most the
// status interval.
func (p *publisher) nextDue(now time.Time) time.Duration {
	wait := p.r.cfg.StatusInterval
	if pause := p.r.disp.Outage().PausedUntil; pause.After(now) {
		return min(wait, pause.Sub(now))
	}
	for _, k := range p.active {
		if len(k.items) > 0 && k.notBefore.After(now) {
			wait = min(wait, k.notBefore.Sub(now))
		}
	}
	return max(wait, time.Millisecond)
}

// results applies a round's outcomes to its keys: published and dead items
// leave their keys; a failure holds the rest of its key back until its
// retry; a dead letter that holds its key sends the rest to be held.
func (p *publisher) results(c *call) (published, dead, held []*item, retried int) {
	for i, k := range c.keys {
		o := c.outcomes[i]
		k.busy = false
		for _, j := range o.Published {
			published = append(published, k.items[j])
		}
		for _, f := range o.Dead {
			it := k.items[f.Index]
			it.Hold = f.Hold
			dead = append(dead, it)
		}
		if f := o.Failed; f != nil {
			k.notBefore = f.At.Add(f.Delay)
			retried++
		}
		clear(k.items[:o.Done])
		k.items = k.items[o.Done:]
		p.pending -= o.Done
		if o.Held {
			// A dead letter holds the key: its other items wait behind
			// it, and so do those the log brings later.
			p.held[k.name] = true
			held = append(held, k.items...)
			p.pending -= len(k.items)
			k.items = nil
		}
	}
	// Keys left empty leave the active list.
	active := p.active[:0]
	for _, k := range p.active {
		if len(k.items) > 0 {
			active = append(active, k)
		} else {
			delete(p.keys, k.name)
		}
	}
	clear(p.active[len(active):])
	p.active = active
	return published, dead, held, retried
}

// settle counts finished items against their transactions and confirms
// the position past every leading transaction that is done.
func (p *publisher) settle(items []*item) {
	for _, it := range items {
		if it.held {
			p.unhold(it)
		}
		if it.txn != nil {
			it.txn.left--
		} else {
			p.swept--
			p.r.m.swept.Add(1)
		}
	}
	p.advance()
}

// advance confirms the end of every leading transaction that is done.
func (p *publisher) advance() {
	n := 0
	for n < len(p.txs) && p.txs[n].left <= 0 {
		advanceTo(p.prog, p.txs[n].end)
		n++
	}
	if n > 0 {
		clear(p.txs[:n])
		p.txs = p.txs[n:]
		p.prog.done.Add(int64(n))
	}
	if p.recorded != nil && p.sweptAll && p.swept == 0 {
		close(p.recorded)
		p.recorded = nil
	}
}

// advanceTo raises the confirmed position to end.
func advanceTo(prog *progress, end uint64) { advance(&prog.confirmed, end) }
