package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// groupMax is how many deliveries the consumer applies in one transaction
// at most (ConsumerConfig.Group): 1 when each goes alone.
func (c *Consumer[TTx]) groupMax() int {
	if c.cfg.MessageContext != nil {
		return 1
	}
	return c.cfg.Group.MaxMessages
}

// collect adds to first, up to the group's most, the deliveries waiting in
// jobs, waiting up to Group.MaxWait for more while it has fewer.
func (c *Consumer[TTx]) collect(jobs <-chan job, first job) []job {
	g := []job{first}
	limit := c.groupMax()
	var timeout <-chan time.Time
	if c.cfg.Group.MaxWait > 0 {
		t := time.NewTimer(c.cfg.Group.MaxWait)
		defer t.Stop()
		timeout = t.C
	}
	for len(g) < limit {
		select {
		case j, ok := <-jobs:
			if !ok {
				return g
			}
			g = append(g, j)
			continue
		default:
		}
		if timeout == nil {
			return g
		}
		select {
		case j, ok := <-jobs:
			if !ok {
				return g
			}
			g = append(g, j)
		case <-timeout:
			return g
		}
	}
	return g
}

// processGroup handles the deliveries of g to the end, each acknowledged,
// scheduled for redelivery or parked: together in one transaction those
// that can be, the others alone (process). With KeepOrder, g holds each
// key's deliveries in the order received, and release(key, n) tells the
// key queue that the n deliveries of key in g are handled, as soon as
// they are.
func (c *Consumer[TTx]) processGroup(ctx, work context.Context, g []job, release func(key string, n int)) {
	count := make(map[string]int) // deliveries per key in g
	for _, j := range g {
		count[j.msg.Key]++
	}
	if len(g) == 1 {
		c.process(ctx, work, g[0])
		release(g[0].msg.Key, 1)
		return
	}
	together, apart := c.split(ctx, work, g)
	// Those handled alone go in the order of g, whichever round of the
	// group sent them: a key's earlier deliveries may leave it after its
	// later ones did (a later one failed first, then an earlier one's
	// marker was held elsewhere), and must still run first.
	alone := c.applyTogether(work, together, apart)
	slices.SortStableFunc(alone, func(a, b aloneJob) int { return a.at - b.at })
	// The keys whose deliveries are all handled go on at once; those with a
	// delivery left to apply alone, after it.
	later := make(map[string]bool)
	for _, j := range alone {
		later[j.msg.Key] = true
	}
	for k, n := range count {
		if !later[k] {
			release(k, n)
		}
	}
	// Those waiting their turn are kept alive meanwhile, as a delivery
	// being handled is.
	stops := make([]func(), len(alone))
	for i, a := range alone {
		stops[i] = c.keepAlive(work, a.d)
	}
	for i, a := range alone {
		c.processAfter(ctx, work, a.job, a.first)
		stops[i]()
	}
	for k := range later {
		release(k, count[k])
	}
}

// split sorts g into the deliveries to apply together and those to handle
// alone, each in the order of g: a redelivery (it may still be held by an
// instance applying it), and with KeepOrder the later deliveries of its
// key. One that did not decode is parked at once, and those of a held key
// (ConsumerConfig.HoldKeys) behind the message that holds it.
func (c *Consumer[TTx]) split(ctx, work context.Context, g []job) (together []placedJob, alone []aloneJob) {
	aloneKeys := make(map[string]bool)
	for i, j := range g {
		switch {
		case c.cfg.KeepOrder && aloneKeys[j.msg.Key]:
			alone = append(alone, aloneJob{placedJob: placedJob{j, i}})
		case j.err != nil:
			c.process(ctx, work, j) // parked now: it has no key
		case j.d.Attempt() > 1:
			alone = append(alone, aloneJob{placedJob: placedJob{j, i}})
			aloneKeys[j.msg.Key] = true
		case c.holding(j) && c.heldBehind(ctx, work, j):
		default:
			together = append(together, placedJob{j, i})
		}
	}
	return together, alone
}

// placedJob is a delivery of a group, with its place in the group.
type placedJob struct {
	job
	at int
}

// aloneJob is a delivery of a group to handle alone, after the group:
// first is its handler's run that failed in the group, nil when it has not
// run, or its run is not counted.
type aloneJob struct {
	placedJob
	first *failedRun
}

// errFailedInGroup ends a group's transaction whose handler failed.
var errFailedInGroup = errors.New("inbox: a handler failed in a group")

// errSlowInGroup cuts a handler's run, or the marking of a group's
// messages, that took longer than Group.SlowRun.
var errSlowInGroup = errors.New("inbox: longer than ConsumerConfig.Group.SlowRun in a group; applied alone")

// applyTogether applies the deliveries of g in one transaction, and
// returns alone with the deliveries that must be handled alone added, in
// the order they left the group (processGroup puts them back in the
// group's): when a handler fails, the transaction rolls back and the others
// are applied again without its delivery, which then runs alone, with
// KeepOrder followed by its key's later ones; when the transaction fails
// otherwise (the database), each is handled alone. A delivery left when
// work ended is neither applied nor acknowledged: the broker redelivers
// it.
func (c *Consumer[TTx]) applyTogether(work context.Context, g []placedJob, alone []aloneJob) []aloneJob {
	for len(g) > 0 {
		jobs := make([]job, len(g))
		for i, p := range g {
			jobs[i] = p.job
		}
		res, failed, err := c.applyOnce(work, jobs)
		if err == nil {
			for i, j := range jobs {
				c.succeeded(work, j, res[i])
			}
			return alone
		}
		if work.Err() != nil {
			return alone
		}
		if len(failed) == 0 {
			c.log.Warn("a group of deliveries could not be applied together; applying each alone", "deliveries", len(g), "error", err)
			for _, p := range g {
				alone = append(alone, aloneJob{placedJob: p})
			}
			return alone
		}
		var rest []placedJob
		failedKeys := make(map[string]bool)
		for i, p := range g {
			if first, ok := failed[i]; ok || (c.cfg.KeepOrder && failedKeys[p.msg.Key]) {
				failedKeys[p.msg.Key] = true
				alone = append(alone, aloneJob{placedJob: p, first: first})
			} else {
				rest = append(rest, p)
			}
		}
		g = rest
	}
	return alone
}

// applyOnce runs one transaction over g: it marks the messages, runs the
// handlers of the fresh ones in order (a batch handler's messages together)
// and commits. It returns each delivery's result, or which deliveries'
// handlers failed, or the error that ended the transaction otherwise.
func (c *Consumer[TTx]) applyOnce(work context.Context, g []job) (res []Result, failed map[int]*failedRun, err error) {
	for _, j := range g {
		defer c.keepAlive(work, j.d)()
	}
	ids, at := groupIDs(g)
	res = make([]Result, len(g))
	start := c.cfg.Clock.Now()
	spans := make([]spanEnd, len(g))
	markSlow := false
	err = c.ib.st.InTx(work, func(tx TTx) error {
		// A marker another transaction holds (an instance still applying
		// the message, or frozen) would hold the whole group: past
		// SlowRun, each delivery goes alone.
		var fresh []bool
		err, slow := c.cut(work, func(ctx context.Context) (err error) {
			fresh, err = c.ib.markGroup(ctx, tx, ids)
			return err
		})
		markSlow = slow
		if err != nil {
			return err
		}
		r := groupRun[TTx]{c: c, tx: tx, g: g, spans: spans}
		var apply []int // the fresh deliveries, in order
		for i, j := range g {
			res[i] = Duplicate
			if k := at[j.msg.ID]; k.first == i && fresh[k.index] {
				res[i] = Applied
				apply = append(apply, i)
			}
		}
		r.runAll(work, apply)
		if r.failed != nil {
			failed = r.failed
			return fmt.Errorf("%w: %w", errFailedInGroup, r.err)
		}
		return nil
	})
	if markSlow && work.Err() == nil {
		// Which marker is held elsewhere: its delivery goes alone, the
		// others on together.
		if i, ok := c.heldElsewhere(work, ids, at); ok {
			failed = map[int]*failedRun{i: nil}
		}
	}
	took := c.cfg.Clock.Now().Sub(start)
	if err == nil {
		c.cfg.Observer.Grouped(c.ib.consumer, len(g))
	}
	for i, j := range g {
		first, isFailed := failed[i]
		if spans[i] != nil {
			spans[i](res[i], outcome(err, isFailed))
		}
		switch {
		case err == nil:
			c.cfg.Observer.Handled(c.ib.consumer, j.msg, res[i], nil, took)
		case first != nil && work.Err() == nil:
			c.cfg.Observer.Handled(c.ib.consumer, j.msg, 0, first.err, took)
		}
	}
	return res, failed, err
}

// outcome is the error of a run in a group whose transaction ended with
// err: the handler's own when it failed, otherwise the rollback.
func outcome(err error, failed bool) error {
	if err == nil || failed {
		return err
	}
	return fmt.Errorf("rolled back with its group: %w", err)
}

// heldElsewhere finds the first of ids (ascending) whose marker another
// transaction holds: it marks them one at a time, each cut after
// Group.SlowRun, in a transaction it rolls back. It returns the place in
// the group of that id's first delivery; false when none waits (the other
// transaction ended meanwhile) or the database failed.
func (c *Consumer[TTx]) heldElsewhere(work context.Context, ids []uuid.UUID, at map[uuid.UUID]idAt) (int, bool) {
	found := -1
	_ = c.ib.st.InTx(work, func(tx TTx) error {
		for _, id := range ids {
			err, slow := c.cut(work, func(ctx context.Context) error {
				_, err := c.ib.st.Mark(ctx, tx, c.ib.consumer, id)
				return err
			})
			if slow {
				found = at[id].first
			}
			if err != nil {
				return err
			}
		}
		return errRollBack
	})
	return found, found >= 0
}

// errRollBack rolls back a transaction that only looked.
var errRollBack = errors.New("inbox: rolled back")

// idAt is where a message id is in a group: the first delivery of it, and
// its place in the ids marked.
type idAt struct{ first, index int }

// groupIDs returns the distinct message ids of g in ascending order, as
// store.GroupInbox.MarkGroup takes them, and where each is.
func groupIDs(g []job) ([]uuid.UUID, map[uuid.UUID]idAt) {
	at := make(map[uuid.UUID]idAt, len(g))
	ids := make([]uuid.UUID, 0, len(g))
	for i, j := range g {
		if _, ok := at[j.msg.ID]; !ok {
			at[j.msg.ID] = idAt{first: i}
			ids = append(ids, j.msg.ID)
		}
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	for i, id := range ids {
		k := at[id]
		k.index = i
		at[id] = k
	}
	return ids, at
}

// markGroup marks ids (distinct, ascending) in tx: in one statement when
// the store can (store.GroupInbox), otherwise one Mark each.
func (ib *Inbox[TTx]) markGroup(ctx context.Context, tx TTx, ids []uuid.UUID) ([]bool, error) {
	if gi, ok := ib.st.(store.GroupInbox[TTx]); ok {
		return gi.MarkGroup(ctx, tx, ib.consumer, ids)
	}
	fresh := make([]bool, len(ids))
	for i, id := range ids {
		var err error
		if fresh[i], err = ib.st.Mark(ctx, tx, ib.consumer, id); err != nil {
			return nil, err
		}
	}
	return fresh, nil
}

// groupRun runs the handlers of a group's fresh messages in one
// transaction, in rounds. In a round, a message goes to its handler at
// once, or for a batch handler joins the round's batch of its type; but a
// message of a key that has one waiting in a batch of another type (or
// for another handler) waits for the next round, with its key's later
// ones. The round's batches run at its end, in the order of their first
// messages. So each key's effects come in its order, and a batch takes
// every key's messages of its type that can go in it.
type groupRun[TTx any] struct {
	c     *Consumer[TTx]
	tx    TTx
	g     []job
	spans []spanEnd

	pending map[typeVersion]*pendingBatch[TTx]
	keyIn   map[string]typeVersion // the batch a key's message waits in
	failed  map[int]*failedRun     // the deliveries whose handler failed: the counted run, or nil
	err     error                  // how it failed
}

// pendingBatch is a batch handler's messages waiting to run.
type pendingBatch[TTx any] struct {
	h    BatchHandler[TTx]
	at   []int // their deliveries' places in the group
	msgs []courier.Message
}

// runAll runs the handlers of the group's deliveries at places apply, in
// rounds, until one fails.
func (r *groupRun[TTx]) runAll(ctx context.Context, apply []int) {
	type routed struct {
		msg     courier.Message
		h       BatchHandler[TTx]
		tv      typeVersion
		batched bool
	}
	route := make(map[int]routed, len(apply))
	for _, i := range apply {
		var ro routed
		ro.msg = r.g[i].msg
		if r.c.batchOf != nil {
			ro.msg, ro.h, ro.tv, ro.batched = r.c.batchOf(ro.msg)
		}
		route[i] = ro
	}
	for len(apply) > 0 && r.failed == nil {
		var later []int
		waits := make(map[string]bool) // keys with a message left for a later round
		for _, i := range apply {
			key, ro := r.g[i].msg.Key, route[i]
			if in, ok := r.keyIn[key]; waits[key] || ok && (!ro.batched || in != ro.tv) {
				waits[key] = true
				later = append(later, i)
				continue
			}
			if ro.batched {
				r.queue(i, ro.msg, ro.h, ro.tv)
				continue
			}
			r.run(ctx, i)
			if r.failed != nil {
				return
			}
		}
		r.flushAll(ctx)
		apply = later
	}
}

// queue adds the group's i-th delivery, msg as its batch handler h takes
// it, to the round's batch of tv.
func (r *groupRun[TTx]) queue(i int, msg courier.Message, h BatchHandler[TTx], tv typeVersion) {
	if r.pending == nil {
		r.pending = make(map[typeVersion]*pendingBatch[TTx])
		r.keyIn = make(map[string]typeVersion)
	}
	b := r.pending[tv]
	if b == nil {
		b = &pendingBatch[TTx]{h: h}
		r.pending[tv] = b
	}
	b.at = append(b.at, i)
	b.msgs = append(b.msgs, msg)
	r.keyIn[r.g[i].msg.Key] = tv
}

// run runs the handler of the group's i-th delivery.
func (r *groupRun[TTx]) run(ctx context.Context, i int) {
	j := r.g[i]
	sctx, end := r.c.startSpan(ctx, j.d, j.msg)
	r.spans[i] = end
	err, slow := r.c.cut(sctx, func(ctx context.Context) error { return r.c.run(ctx, r.tx, j.msg) })
	if err != nil {
		r.failed, r.err = map[int]*failedRun{i: nil}, err
		if !slow {
			r.failed[i] = &failedRun{err: err, at: r.c.cfg.Clock.Now()}
		}
	}
}

// flush runs the pending batch of tv.
func (r *groupRun[TTx]) flush(ctx context.Context, tv typeVersion) {
	b := r.pending[tv]
	delete(r.pending, tv)
	for _, i := range b.at {
		delete(r.keyIn, r.g[i].msg.Key)
	}
	sctx, end := r.c.startBatchSpan(ctx, r.g, b.at)
	for _, i := range b.at {
		r.spans[i] = end
	}
	err, _ := r.c.cut(sctx, func(ctx context.Context) error { return r.c.runBatch(ctx, r.tx, b.h, b.msgs) })
	if err != nil {
		r.err = err
		r.failed = make(map[int]*failedRun, len(b.at))
		for _, i := range b.at {
			r.failed[i] = nil
		}
	}
}

// cut runs fn with a context that ends after Group.SlowRun; slow says
// whether fn failed after it ended.
func (c *Consumer[TTx]) cut(ctx context.Context, fn func(ctx context.Context) error) (err error, slow bool) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t := time.AfterFunc(c.cfg.Group.SlowRun, func() { cancel(errSlowInGroup) })
	err = fn(ctx)
	t.Stop()
	if err != nil && context.Cause(ctx) == errSlowInGroup {
		return fmt.Errorf("%w: %w", errSlowInGroup, err), true
	}
	return err, false
}

// flushAll runs the pending batches, in the order of their first
// messages, until one fails.
func (r *groupRun[TTx]) flushAll(ctx context.Context) {
	for r.failed == nil && len(r.pending) > 0 {
		first, tv := -1, typeVersion{}
		for k, b := range r.pending {
			if first < 0 || b.at[0] < first {
				first, tv = b.at[0], k
			}
		}
		r.flush(ctx, tv)
	}
}
