package main

import (
	"context"
	"fmt"
	"time"

	"github.com/courier-go/courier/internal/escape"
	"github.com/courier-go/courier/store"
)

// oldestHold is the key a side has held longest, as
// --fail-if-held-older-than names it.
type oldestHold struct {
	// Side names the side that holds it, as a message says it ("relay
	// side").
	Side string
	// Keys counts the keys the side holds.
	Keys int64
	// Since is when the key was held; Topic and Key name it.
	Since      time.Time
	Topic, Key string
	// Cause is the reference of what holds it, as the courier dlq
	// commands take it (relay:ID).
	Cause string
	// Fix says how to release it.
	Fix string
}

// holdSide is a side whose keys can be held: how many keys a status
// says it holds and since when, and how to find the oldest of them.
type holdSide struct {
	// held returns how many keys st says the side holds and when the
	// oldest was held (zero when none is).
	held func(st store.Status) (keys int64, oldest time.Time)
	// oldest finds the key the side has held longest; false when it
	// holds none (any more).
	oldest func(ctx context.Context, a store.Admin, st store.Status) (oldestHold, bool, error)
}

// holdSides are the sides whose held keys --fail-if-held-older-than
// watches: the relay's (dead letters that hold their key) and the
// consumers' (parked messages that hold their key for their consumer).
var holdSides = []holdSide{{held: relayHeld, oldest: oldestRelayHold}, {held: consumerHeld, oldest: oldestConsumerHold}}

func relayHeld(st store.Status) (int64, time.Time) { return st.Outbox.HeldKeys, st.Outbox.OldestHold }

// oldestRelayHold reads every key dead letters hold, a page at a time,
// and returns the one held longest (the lower cause among equals).
func oldestRelayHold(ctx context.Context, a store.Admin, _ store.Status) (oldestHold, bool, error) {
	var (
		oldest store.HeldKey
		found  bool
	)
	q := store.ListQuery{Limit: store.MaxListLimit}
	for {
		ks, err := a.HeldKeys(ctx, q)
		if err != nil {
			return oldestHold{}, false, err
		}
		for _, k := range ks {
			if !found || k.Since.Before(oldest.Since) {
				oldest, found = k, true
			}
		}
		if len(ks) < q.Limit {
			break
		}
		q.After = ks[len(ks)-1].Cause
	}
	ref := fmt.Sprintf("relay:%d", oldest.Cause)
	return oldestHold{Side: "relay side", Since: oldest.Since, Topic: oldest.Topic, Key: oldest.Key, Cause: "dead letter " + ref,
		Fix: fmt.Sprintf("courier dlq replay %s publishes it, then the messages held behind it in order, or courier dlq discard %s drops it and lets the key move on", ref, ref),
	}, found, nil
}

// consumerHeld sums the keys the consumers hold and returns the oldest
// hold's time.
func consumerHeld(st store.Status) (keys int64, oldest time.Time) {
	for _, c := range st.Consumers {
		keys += c.HeldKeys
		if !c.OldestHold.IsZero() && (oldest.IsZero() || c.OldestHold.Before(oldest)) {
			oldest = c.OldestHold
		}
	}
	return keys, oldest
}

// oldestConsumerHold names the consumer whose hold is the oldest, from
// st: its parked messages name the cause (the one the others are held
// behind).
func oldestConsumerHold(_ context.Context, _ store.Admin, st store.Status) (oldestHold, bool, error) {
	var c store.ConsumerStatus
	for _, cs := range st.Consumers {
		if !cs.OldestHold.IsZero() && (c.OldestHold.IsZero() || cs.OldestHold.Before(c.OldestHold)) {
			c = cs
		}
	}
	if c.OldestHold.IsZero() {
		return oldestHold{}, false, nil
	}
	name := escape.Line(c.Consumer)
	return oldestHold{Side: "consumer " + name, Since: c.OldestHold,
		Cause: fmt.Sprintf("%d parked message(s) that hold their key, with %d held behind them", c.HeldKeys, c.Held),
		Fix:   fmt.Sprintf("courier dlq list --consumer %s names them (a message held behind consumer:N waits for N): courier dlq replay consumer:N applies N, then the messages held behind it in order, or courier dlq discard consumer:N lets the key move on", name),
	}, true, nil
}

// holds returns the oldest held key of each side that has held one
// longer than --fail-if-held-older-than, reading them from a only then.
func (c *statusCmd) holds(ctx context.Context, a store.Admin, st store.Status) ([]oldestHold, error) {
	if c.FailIfHeld <= 0 {
		return nil, nil
	}
	var out []oldestHold
	for _, s := range holdSides {
		keys, since := s.held(st)
		if keys == 0 || since.IsZero() || st.Now.Sub(since) <= c.FailIfHeld {
			continue
		}
		h, ok, err := s.oldest(ctx, a, st)
		if err != nil {
			return nil, fmt.Errorf("--fail-if-held-older-than: reading the held keys: %w", err)
		}
		if ok && st.Now.Sub(h.Since) > c.FailIfHeld {
			h.Keys = keys
			out = append(out, h)
		}
	}
	return out, nil
}

// heldChecks returns the message of --fail-if-held-older-than for each
// of holds, at now.
func (c *statusCmd) heldChecks(now time.Time, holds []oldestHold) []string {
	var failed []string
	for _, h := range holds {
		which := ""
		if h.Key != "" {
			which = fmt.Sprintf(" (topic %q, key %q)", h.Topic, h.Key)
		}
		failed = append(failed, fmt.Sprintf("held keys (%s): %d, the oldest%s has been held for %s, more than --fail-if-held-older-than %s, behind %s: %s",
			h.Side, h.Keys, which, roundAbove(now.Sub(h.Since), c.FailIfHeld), c.FailIfHeld, h.Cause, h.Fix))
	}
	return failed
}
