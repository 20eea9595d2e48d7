package cdc

import (
	"context"

	"github.com/courier-go/courier/relay/internal/dispatch"
	"github.com/courier-go/courier/store"
)

// call is one round: its keys, the items the dispatcher may send of each
// (the heads of the keys' queues, which no one else touches meanwhile),
// and what became of them.
type call struct {
	keys     []*key
	heads    [][]*item
	items    [][]dispatch.Item
	outcomes []dispatch.Outcome
}

// add puts a key with its head items in the call.
func (c *call) add(k *key, head []*item) {
	its := make([]dispatch.Item, len(head))
	for i, it := range head {
		its[i] = dispatch.Item{Message: it.Message, Attempts: it.Attempts}
	}
	c.keys, c.heads, c.items = append(c.keys, k), append(c.heads, head), append(c.items, its)
}

// publishCall runs the round, then records its failures in the database,
// so that a message's attempts and history survive a restart, and judges
// them again when the database counted more attempts than this relay (a
// relay that died counted the others).
func (r *Relay) publishCall(ctx context.Context, c *call) {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	c.outcomes = r.disp.Round(pctx, c.items, r.cfg.BatchSize)
	cancel()
	var fails []store.LogFailure
	var where []*dispatch.Judged
	for i := range c.outcomes {
		o := &c.outcomes[i]
		for j := range o.Dead {
			fails = append(fails, r.failure(c.heads[i][o.Dead[j].Index], o.Dead[j].Failure))
			where = append(where, &o.Dead[j])
		}
		if o.Failed != nil {
			fails = append(fails, r.failure(c.heads[i][o.Failed.Index], o.Failed.Failure))
			where = append(where, o.Failed)
		}
	}
	if len(fails) == 0 {
		return
	}
	stored, err := r.db.Fail(ctx, fails)
	if err != nil {
		r.log.Warn("could not record failed publishes; their history stays in memory", "error", err)
		return
	}
	for k, f := range fails {
		if stored[k] < 0 {
			// Its row is not found: gone, or its transaction is not
			// visible yet. The history stays, to be written with the
			// next failure or with the dead letter.
			continue
		}
		f.Item.History, f.Item.Failed = nil, true
		if stored[k] > f.Item.Attempts {
			f.Item.Attempts = stored[k]
			r.rejudge(c, f.Item, where[k], stored[k])
		}
	}
}

// failure notes f in it (its attempts, its history not yet written) and
// returns the failure to record.
func (r *Relay) failure(it *item, f dispatch.Failure) store.LogFailure {
	it.Attempts = f.Attempts
	it.History = append(it.History, store.PublishAttempt{At: f.At.UTC(), Error: f.Err.Error(), Counted: f.Counted})
	return store.LogFailure{Item: &it.LogItem, Error: f.Err.Error(), At: f.At, Counted: f.Counted, Delay: f.Delay}
}

// rejudge judges the failure j of a call's key again with the attempts the
// database counted: a retry may become a dead letter.
func (r *Relay) rejudge(c *call, it *store.LogItem, j *dispatch.Judged, attempts int) {
	if !j.Counted || j.Dead {
		return
	}
	f := r.disp.Judge(j.Err, it.Message, attempts-1, j.At)
	if !f.Dead {
		j.Failure = f
		return
	}
	for i := range c.outcomes {
		o := &c.outcomes[i]
		if o.Failed == j {
			o.Dead = append(o.Dead, dispatch.Judged{Index: j.Index, Failure: f})
			o.Held = o.Held || f.Hold
			o.Failed = nil
			o.Done++
			return
		}
	}
}
