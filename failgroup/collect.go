package failgroup

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/courier-go/courier/store"
)

// Group is the failures of one cause: dead letters of one side whose
// causes are equal.
type Group struct {
	// ID is the cause's fingerprint (Cause.ID).
	ID string `json:"id"`
	Cause
	// Count is how many failures the group holds.
	Count int `json:"count"`
	// First and Last are when the earliest and the latest of them became
	// dead letters (relay side) or were parked (consumer side).
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	// Topics are the topics (relay side) or subjects (consumer side) of
	// its failures, sorted; Consumers the consumers that parked them.
	Topics    []string `json:"topics"`
	Consumers []string `json:"consumers,omitempty"`
	// Types are the message types, sorted.
	Types []string `json:"types"`
	// Example is the last error of its latest failure, as it was, for
	// people.
	Example string `json:"example"`
	// ReplayAsked counts, consumer side, the failures an operator asked to
	// replay that their consumer has not replayed yet; Asked are their ids.
	ReplayAsked int     `json:"replay_asked,omitempty"`
	Asked       []int64 `json:"asked,omitempty"`
	// IDs are the failures' ids (relay:ID or consumer:ID as Side says), in
	// id order.
	IDs []int64 `json:"ids"`
}

// Ref is the reference of one of the group's failures, as courier dlq
// names it.
func (g Group) Ref(id int64) string { return fmt.Sprintf("%s:%d", g.Side, id) }

// DefaultMax is how many failures of each side Collect reads at most by
// default.
const DefaultMax = 10_000

// Options select what Collect reads.
type Options struct {
	// Side is Relay or Consumer to read one side only; empty reads both.
	Side string
	// Filter narrows each side's failures as store.ListQuery does (Topic,
	// Consumer, Error); its IDs, After and Limit are ignored.
	Filter store.ListQuery
	// Max is how many failures of each side are read at most; default
	// DefaultMax. The dead-letter tables hold trouble, not traffic: when
	// one holds more, Report.Truncated says so and the groups count the
	// first Max (by id) only.
	Max int
}

// Report is the groups Collect found.
type Report struct {
	// Groups are by count, largest first, then by latest failure.
	Groups []Group `json:"groups"`
	// Read counts the failures read.
	Read int `json:"read"`
	// Truncated is true when a side held more than Options.Max failures.
	Truncated bool `json:"truncated,omitempty"`
}

// Find returns the group whose ID is id, and whether there is one.
func (r Report) Find(id string) (Group, bool) {
	i := slices.IndexFunc(r.Groups, func(g Group) bool { return g.ID == id })
	if i < 0 {
		return Group{}, false
	}
	return r.Groups[i], true
}

// Collect reads the summaries of the failures o selects, a page of
// store.MaxListLimit at a time (never a payload), and groups them by
// cause.
func Collect(ctx context.Context, a store.Admin, o Options) (Report, error) {
	if o.Max == 0 {
		o.Max = DefaultMax
	}
	if o.Max < 0 {
		return Report{}, fmt.Errorf("failgroup: Options.Max is %d: use 1 or more (0 means %d)", o.Max, DefaultMax)
	}
	if o.Side != "" && o.Side != Relay && o.Side != Consumer {
		return Report{}, fmt.Errorf("failgroup: Options.Side is %q: use %q, %q or empty for both", o.Side, Relay, Consumer)
	}
	b := builder{byID: map[string]*Group{}}
	var rep Report
	if o.Side != Consumer && o.Filter.Consumer == "" {
		n, more, err := readAll(ctx, o, a.ListDeadLetters, func(d store.DeadLetterSummary) int64 {
			b.add(OfDeadLetter(d.LastError), d.ID, d.DeadAt, d.Topic, "", d.Type, d.LastError, false)
			return d.ID
		})
		if err != nil {
			return rep, fmt.Errorf("failgroup: read dead letters: %w", err)
		}
		rep.Read, rep.Truncated = rep.Read+n, rep.Truncated || more
	}
	if o.Side != Relay {
		n, more, err := readAll(ctx, o, a.ListParked, func(p store.ParkedSummary) int64 {
			b.add(OfParked(p.Consumer, p.Reason, p.Error), p.ID, p.ParkedAt, p.Subject, p.Consumer, p.Type, p.Error, p.ReplayRequested != nil)
			return p.ID
		})
		if err != nil {
			return rep, fmt.Errorf("failgroup: read parked messages: %w", err)
		}
		rep.Read, rep.Truncated = rep.Read+n, rep.Truncated || more
	}
	rep.Groups = b.groups()
	return rep, nil
}

// readAll reads up to o.Max summaries with list, a page at a time, and
// calls add with each, which returns its id. more reports that there were
// more than o.Max: it reads one more, counted without adding 1 to o.Max,
// which may be the largest int.
func readAll[T any](ctx context.Context, o Options, list func(context.Context, store.ListQuery) ([]T, error), add func(T) int64) (n int, more bool, err error) {
	q := store.ListQuery{Topic: o.Filter.Topic, Consumer: o.Filter.Consumer, Error: o.Filter.Error}
	for n <= o.Max {
		q.Limit = store.MaxListLimit
		if left := o.Max - n; left < store.MaxListLimit {
			q.Limit = left + 1
		}
		page, err := list(ctx, q)
		if err != nil {
			return n, false, err
		}
		for _, s := range page {
			if n == o.Max {
				return n, true, nil
			}
			q.After = add(s)
			n++
		}
		if len(page) < q.Limit {
			break
		}
	}
	return n, false, nil
}

// builder gathers failures into groups.
type builder struct {
	byID map[string]*Group
}

func (b *builder) add(c Cause, id int64, at time.Time, topic, consumer, typ, example string, replay bool) {
	key := c.ID()
	g := b.byID[key]
	if g == nil {
		g = &Group{ID: key, Cause: c, First: at, Last: at}
		b.byID[key] = g
	}
	g.Count++
	g.IDs = append(g.IDs, id)
	if at.Before(g.First) {
		g.First = at
	}
	if !at.Before(g.Last) {
		g.Last, g.Example = at, example
	}
	g.Topics = addSorted(g.Topics, topic)
	g.Consumers = addSorted(g.Consumers, consumer)
	g.Types = addSorted(g.Types, typ)
	if replay {
		g.ReplayAsked++
		g.Asked = append(g.Asked, id)
	}
}

// addSorted adds s to the sorted set list; an empty s is left out.
func addSorted(list []string, s string) []string {
	if s == "" {
		return list
	}
	if i, found := slices.BinarySearch(list, s); !found {
		list = slices.Insert(list, i, s)
	}
	return list
}

func (b *builder) groups() []Group {
	out := make([]Group, 0, len(b.byID))
	for _, g := range b.byID {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(x, y Group) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), y.Last.Compare(x.Last), cmp.Compare(x.ID, y.ID))
	})
	return out
}
