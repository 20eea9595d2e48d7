package cdc

import (
	"context"
	"errors"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
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
	outages int
	pause   time.Time

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
	pipelined := broker.KeepsKeyOrder(r.pub)
	answered := make(chan answer, r.cfg.Concurrency)
	defer func() {
		for ; p.calls > 0; p.calls-- {
			<-answered // calls end with ctx
		}
	}()
	for {
		p.settle(p.rec.take())
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
		now := time.Now()
		if p.calls < r.cfg.Concurrency {
			if msgs, runs := p.round(now, pipelined); len(msgs) > 0 {
				p.calls++
				go func() {
					pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
					errs := r.pub.Publish(pctx, msgs)
					cancel()
					answered <- answer{runs, errs}
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
		case a := <-answered:
			p.calls--
			if ctx.Err() != nil {
				timer.Stop()
				return ctx.Err()
			}
			published, dead := p.results(a.runs, a.errs)
			r.m.published.Add(int64(len(published)))
			r.m.dead.Add(int64(len(dead)))
			p.rec.hand(published, dead)
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

// answer is what a Publish call returned for its runs.
type answer struct {
	runs []run
	errs []error
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
	for _, it := range b.items {
		k := p.keys[it.msg.Key]
		if k == nil {
			k = &key{name: it.msg.Key}
			p.keys[it.msg.Key] = k
		}
		if len(k.items) == 0 {
			p.active = append(p.active, k)
		}
		k.items = append(k.items, it)
		p.pending++
	}
	p.advance()
}

// run is a key's part of a round: items taken from the head of k.
type run struct {
	k *key
	n int
}

// round picks the messages of the next Publish call: every ready key's
// head, or its run of messages to one topic when pipelined, up to
// BatchSize messages.
func (p *publisher) round(now time.Time, pipelined bool) ([]courier.Message, []run) {
	if now.Before(p.pause) {
		return nil, nil
	}
	var msgs []courier.Message
	var runs []run
	for _, k := range p.active {
		if len(msgs) >= p.r.cfg.BatchSize {
			break
		}
		if len(k.items) == 0 || k.busy || now.Before(k.notBefore) {
			continue
		}
		n := 1
		if pipelined {
			topic := k.items[0].msg.Topic
			for n < len(k.items) && n < p.r.cfg.BatchSize-len(msgs) && k.items[n].msg.Topic == topic {
				n++
			}
		}
		for _, it := range k.items[:n] {
			msgs = append(msgs, it.msg)
		}
		runs = append(runs, run{k, n})
		k.busy = true
	}
	return msgs, runs
}

// nextDue is how long until a held key or the pause comes due, at most the
// status interval.
func (p *publisher) nextDue(now time.Time) time.Duration {
	wait := p.r.cfg.StatusInterval
	if p.pause.After(now) {
		return min(wait, p.pause.Sub(now))
	}
	for _, k := range p.active {
		if len(k.items) > 0 && k.notBefore.After(now) {
			wait = min(wait, k.notBefore.Sub(now))
		}
	}
	return max(wait, time.Millisecond)
}

// results applies a Publish call's errors to the keys: published and dead
// items leave their keys; a failure other than for good holds the rest of
// its key back.
func (p *publisher) results(runs []run, errs []error) (published, dead []*item) {
	j := 0
	anyOK, allDown := false, true
	for _, ru := range runs {
		k := ru.k
		k.busy = false
		taken := 0 // items leaving k from its head
		held := false
		for _, it := range k.items[:ru.n] {
			err := errs[j]
			j++
			if held {
				continue
			}
			if err == nil {
				anyOK, allDown = true, false
				published = append(published, it)
				taken++
				continue
			}
			if !errors.Is(err, broker.ErrUnavailable) {
				allDown = false
			}
			if p.fail(k, it, err) {
				dead = append(dead, it)
				taken++
				continue
			}
			held = true
		}
		k.items = k.items[taken:]
		p.pending -= taken
	}
	switch {
	case anyOK:
		p.outages = 0
	case allDown && len(runs) > 0:
		p.outages++
		d := p.r.cfg.Backoff.Delay(p.outages)
		p.pause = time.Now().Add(d)
		p.r.log.Warn("broker unavailable; pausing", "pause", d, "consecutive", p.outages)
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
	return published, dead
}

// fail records it's failed publish and reports whether it is now a dead
// letter; otherwise its key is held until its retry.
func (p *publisher) fail(k *key, it *item, err error) (dead bool) {
	cfg := &p.r.cfg
	counted := !errors.Is(err, broker.ErrUnavailable)
	it.history = append(it.history, failure{At: time.Now().UTC(), Error: err.Error(), Counted: counted})
	if len(it.history) > historyCap {
		it.history = it.history[1:]
	}
	var delay time.Duration
	if counted {
		it.attempts++
		permanent := errors.Is(err, broker.ErrRejected)
		if permanent || it.attempts >= cfg.MaxAttempts {
			p.r.log.Error("message dead-lettered", "message_id", it.msg.ID, "key", it.msg.Key,
				"topic", it.msg.Topic, "attempts", it.attempts, "permanent", permanent, "error", err)
			return true
		}
		delay = cfg.Backoff.Delay(it.attempts)
		p.r.log.Warn("publish failed; will retry", "message_id", it.msg.ID, "key", it.msg.Key,
			"attempt", it.attempts, "retry_in", delay, "error", err)
	} else {
		delay = cfg.Backoff.Delay(p.outages + 1)
	}
	if wish, ok := broker.RetryAfter(err); ok {
		delay = max(delay, min(wish, cfg.Backoff.Max))
	}
	k.notBefore = time.Now().Add(delay)
	p.r.m.retried.Add(1)
	return false
}

// settle counts finished items against their transactions and confirms
// the position past every leading transaction that is done.
func (p *publisher) settle(items []*item) {
	for _, it := range items {
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
