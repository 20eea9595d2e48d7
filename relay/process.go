package relay

import (
	"context"
	"time"

	"github.com/courier-go/courier/internal/waits"
	"github.com/courier-go/courier/relay/internal/dispatch"
	"github.com/courier-go/courier/store"
)

// process publishes one claimed batch key by key (see the package
// documentation) and records the outcome. Rounds stop when ctx ends; work
// bounds the whole of it. claimed is when the claim started: the lease ends
// LeaseDuration after it at the latest.
func (r *Relay) process(ctx, work context.Context, claimed time.Time, batch store.Batch) {
	recs := batch.Records
	leaseEnd := claimed.Add(r.cfg.LeaseDuration - leaseMargin)
	pubDeadline := r.cfg.Clock.Now().Add(r.cfg.PublishTimeout)
	if leaseEnd.Before(pubDeadline) {
		pubDeadline = leaseEnd
	}
	pubCtx, cancel := context.WithTimeout(work, r.until(pubDeadline))
	defer cancel()
	keys := keysOf(recs)
	var out store.Outcome
	released := 0
	items := make([][]dispatch.Item, 0, len(keys))
	for len(keys) > 0 && ctx.Err() == nil && pubCtx.Err() == nil {
		items = items[:0]
		for _, k := range keys {
			items = append(items, k.items)
		}
		next := keys[:0]
		for i, o := range r.disp.Round(pubCtx, items, len(recs)) {
			k := keys[i]
			for _, j := range o.Published {
				out.Published = append(out.Published, recs[k.idx[j]].Seq)
			}
			for _, f := range o.Dead {
				out.Dead = append(out.Dead, failure(recs[k.idx[f.Index]].Seq, f.Failure))
			}
			if f := o.Failed; f != nil {
				// Its key's later rows go back: the store holds them
				// until the retry (rule 1).
				out.Retry = append(out.Retry, failure(recs[k.idx[f.Index]].Seq, f.Failure))
				r.noteRetry(f.At.Add(f.Delay))
				released += len(k.idx) - o.Done - 1
				continue
			}
			if o.Held {
				// A dead letter holds its key: the key's later rows go
				// back, and the store keeps them behind it.
				released += len(k.idx) - o.Done
				continue
			}
			if o.Done < len(k.idx) {
				next = append(next, key{idx: k.idx[o.Done:], items: k.items[o.Done:]})
			}
		}
		keys = next
	}
	for _, k := range keys { // shutdown or timeout: hand back the rest
		released += len(k.idx)
	}
	if r.complete(work, leaseEnd, batch.Lease, out) {
		r.released.Add(int64(released))
	}
}

// key is one key's records of a batch still to publish: their indexes in
// the batch, and the dispatcher's items.
type key struct {
	idx   []int
	items []dispatch.Item
}

// keysOf groups the records by key, keeping Seq order within a key and
// first-appearance order across keys.
func keysOf(recs []store.Record) []key {
	pos := make(map[string]int, len(recs))
	var keys []key
	for i := range recs {
		it := dispatch.Item{Message: recs[i].Message, Attempts: recs[i].Attempts}
		if p, ok := pos[it.Message.Key]; ok {
			keys[p].idx, keys[p].items = append(keys[p].idx, i), append(keys[p].items, it)
			continue
		}
		pos[it.Message.Key] = len(keys)
		keys = append(keys, key{idx: []int{i}, items: []dispatch.Item{it}})
	}
	return keys
}

// failure is the store's record of row seq's failure f.
func failure(seq int64, f dispatch.Failure) store.Failure {
	return store.Failure{Seq: seq, Error: f.Err.Error(), Delay: f.Delay, Counted: f.Counted, Hold: f.Hold}
}

// noteRetry keeps the earliest retry this relay scheduled, so that it
// claims when it falls due.
func (r *Relay) noteRetry(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.retryAt.IsZero() || at.Before(r.retryAt) {
		r.retryAt = at
	}
}

// complete records the outcome, retrying until it succeeds or the lease is
// about to end (the rows are then claimed again and re-published: a
// duplicate, never a loss). No attempt outlives the lease, so a relay never
// writes to rows another relay may have taken over.
func (r *Relay) complete(work context.Context, leaseEnd time.Time, lease int64, out store.Outcome) bool {
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(work, r.until(leaseEnd))
		err := r.store.Complete(cctx, r.cfg.Owner, lease, out)
		cancel()
		if err == nil || work.Err() == nil { // shutdown's deadline is no database failure
			r.noteComplete(err)
		}
		if err == nil {
			break
		}
		delay := completeRetry.Delay(attempt)
		if work.Err() != nil || r.cfg.Clock.Now().Add(delay).After(leaseEnd) {
			r.log.Error("could not record batch outcome; its messages will be published again after the lease",
				"error", err, "published", len(out.Published))
			r.cfg.Observer.LeaseLost(len(out.Published))
			return false
		}
		r.log.Warn("record batch outcome failed; retrying", "error", err, "retry_in", delay)
		if !waits.Sleep(work, delay) {
			return false
		}
	}
	r.published.Add(int64(len(out.Published)))
	r.retried.Add(int64(len(out.Retry)))
	r.dead.Add(int64(len(out.Dead)))
	r.cfg.Observer.Completed(len(out.Published), len(out.Retry), len(out.Dead))
	return true
}
