package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// Config tunes a Dispatcher. Every field is set by the relay that makes it.
type Config struct {
	Policy
	// Clock is the time failures and pauses are measured with.
	Clock courier.Clock
	// Logger receives a line per failure and per outage.
	Logger *slog.Logger
	// Observer is told of every call to the broker.
	Observer Observer
	// TracerProvider makes the send spans.
	TracerProvider trace.TracerProvider
	// Holds are the topics whose dead letters hold their key.
	Holds Holds
}

// Observer is told of every call to the broker: msgs were sent, errs is the
// answer (nil where the broker acknowledged the message), the call took d.
// Package relay's Observer is one.
type Observer interface {
	Published(msgs []courier.Message, errs []error, d time.Duration)
}

// Dispatcher publishes rounds of keys' messages and judges their failures.
// It is safe for concurrent rounds on disjoint keys.
type Dispatcher struct {
	pub       broker.Publisher
	pipelined bool
	cfg       Config

	mu     sync.Mutex
	outage Outage
}

// Outage is the broker's state as the dispatcher's rounds saw it.
type Outage struct {
	// Down is true while whole rounds fail with broker.ErrUnavailable and
	// none has succeeded since.
	Down bool
	// Since is when the first of those rounds failed.
	Since time.Time
	// Rounds counts them.
	Rounds int
	// Err is the last one's error.
	Err string
	// PausedUntil is when the relay sends again.
	PausedUntil time.Time
}

// New returns a Dispatcher publishing to pub.
func New(pub broker.Publisher, cfg Config) *Dispatcher {
	return &Dispatcher{pub: instrument(pub, cfg), pipelined: broker.KeepsKeyOrder(pub), cfg: cfg}
}

// Outage returns the broker's state.
func (d *Dispatcher) Outage() Outage {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.outage
}

// Item is one message on its way.
type Item struct {
	Message courier.Message
	// Attempts counts its counted failures so far.
	Attempts int
}

// Outcome is what became of one key's items in a round. The first Done
// items leave the key: published, or dead letters. When Failed is set, the
// next item failed and holds the key back until its retry; the items after
// it are not stored (sent with it to a publisher that keeps a key's order,
// which then stores none of them, or not sent). Otherwise the key goes on
// with its items after Done: a dead letter that was not a refusal for good
// leaves the rest of its run unsent too, and its key moves on, unless it
// holds its key (Held): then the key stops after Done, and its later items
// wait behind the dead letter. (A topic that holds keys is sent one
// message of a key per round, never in runs: a publisher that keeps a
// key's order stores the messages of a run after one it refuses for good.)
type Outcome struct {
	// Sent is how many of the key's items the round sent.
	Sent int
	// Done is how many items leave the key from its head.
	Done int
	// Published are the indexes of the published items, all below Done.
	Published []int
	// Dead are the dead letters, with their indexes, all below Done.
	Dead []Judged
	// Failed is the failure that holds the key back (its Index is Done).
	Failed *Judged
	// Held is true when one of Dead holds its key (Failure.Hold): the
	// key's items after Done are not to be sent; they wait behind it.
	Held bool
}

// Judged is one failed item and what its failure means.
type Judged struct {
	Index int
	Failure
}

// Round sends each key's next message, or its next run to one topic when
// the publisher keeps a key's order and the topic does not hold keys
// (Config.Holds), in one call (at most limit messages in
// all; keys beyond it are not sent), and returns each key's outcome.
func (d *Dispatcher) Round(ctx context.Context, keys [][]Item, limit int) []Outcome {
	outcomes := make([]Outcome, len(keys))
	var msgs []courier.Message
	for k, items := range keys {
		if len(msgs) >= limit || len(items) == 0 {
			continue
		}
		n := 1
		if d.pipelined && !d.cfg.Holds.Hold(items[0].Message.Topic) {
			// Not a topic that holds keys: after a refusal for good of
			// one message of a run, the broker stores the ones after it.
			n = d.run(items, limit-len(msgs))
		}
		for _, it := range items[:n] {
			msgs = append(msgs, it.Message)
		}
		outcomes[k].Sent = n
	}
	if len(msgs) == 0 {
		return outcomes
	}
	errs := d.pub.Publish(ctx, msgs)
	now := d.cfg.Clock.Now()
	anyOK, allDown := false, true
	var downErr error
	j := 0
	for k, items := range keys {
		o := &outcomes[k]
		holding := false // a failure of the key: the rest of its run was not stored
		for i, it := range items[:o.Sent] {
			err := errs[j]
			j++
			switch {
			case holding:
			case err == nil:
				anyOK, allDown = true, false
				o.Published = append(o.Published, i)
				o.Done++
			default:
				if !errors.Is(err, broker.ErrUnavailable) {
					allDown = false
				} else if downErr == nil {
					downErr = err
				}
				f := Judged{Index: i, Failure: d.Judge(err, it.Message, it.Attempts, now)}
				holding = !f.Permanent
				if f.Dead {
					o.Dead = append(o.Dead, f)
					o.Held = o.Held || f.Hold
					o.Done++
					continue
				}
				o.Failed = &f
			}
		}
	}
	d.noteBroker(anyOK, allDown, downErr, now)
	return outcomes
}

// run is how many of items lead with the first one's topic, at most limit.
func (d *Dispatcher) run(items []Item, limit int) int {
	topic := items[0].Message.Topic
	n := 1
	for n < len(items) && n < limit && items[n].Message.Topic == topic {
		n++
	}
	return n
}

// Judge applies the policy to a failure of m, which failed attempts times
// before (counted), at now, and logs what it means. A dead letter of a
// topic of Config.Holds holds its key (Failure.Hold).
func (d *Dispatcher) Judge(err error, m courier.Message, attempts int, now time.Time) Failure {
	d.mu.Lock()
	outages := d.outage.Rounds + 1
	d.mu.Unlock()
	f := d.cfg.Judge(err, attempts, outages, now)
	f.Hold = f.Dead && d.cfg.Holds.Hold(m.Topic)
	switch {
	case f.Hold:
		d.cfg.Logger.Error("message dead-lettered; its key is held until it is replayed or discarded", "message_id", m.ID, "key", m.Key,
			"topic", m.Topic, "attempts", f.Attempts, "permanent", f.Permanent, "error", err)
	case f.Dead:
		d.cfg.Logger.Error("message dead-lettered", "message_id", m.ID, "key", m.Key,
			"topic", m.Topic, "attempts", f.Attempts, "permanent", f.Permanent, "error", err)
	case f.Counted:
		d.cfg.Logger.Warn("publish failed; will retry", "message_id", m.ID, "key", m.Key,
			"attempt", f.Attempts, "retry_in", f.Delay, "error", err)
	}
	return f
}

// noteBroker tracks outages: while whole rounds fail because the broker is
// unavailable (downErr is one of their errors), the relay pauses with a
// growing backoff, or the broker's own estimate.
func (d *Dispatcher) noteBroker(anyOK, allDown bool, downErr error, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	o := &d.outage
	switch {
	case anyOK:
		if o.Down {
			d.cfg.Logger.Info("broker is back", "down_for", now.Sub(o.Since).Round(time.Millisecond))
		}
		*o = Outage{}
	case allDown && downErr != nil:
		if !o.Down {
			o.Since = now
		}
		o.Down, o.Err = true, downErr.Error()
		o.Rounds++
		delay := d.cfg.OutageDelay(o.Rounds, downErr)
		o.PausedUntil = now.Add(delay)
		d.cfg.Logger.Warn("broker unavailable; pausing", "pause", delay, "consecutive", o.Rounds)
	}
}
