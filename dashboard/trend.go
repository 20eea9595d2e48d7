package dashboard

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/courier-go/courier/store"
)

// trendTopics is how many topics a reading keeps by name: those with the
// most rows pending. The others are summed into one aggregate, so that a
// reading's size is bounded however many topics the outbox holds.
const trendTopics = 20

// reading is one store.Operations.Status, the part of it the trend charts
// draw.
type reading struct {
	at time.Time // the store's clock (Status.Now)
	// topics are the topics with rows pending, most pending first, at
	// most trendTopics of them; other sums the rest (its oldest is the
	// oldest of theirs), zero when there is no rest.
	topics []topicReading
	other  topicReading
	// published counts the copies of published messages; dead the relay
	// side's dead letters; parked the consumers' parked messages.
	published store.Count
	dead      int64
	parked    int64
}

// topicReading is how many rows of a topic are pending, and how long its
// oldest has waited.
type topicReading struct {
	topic   string
	pending int64
	oldest  time.Duration
}

// readingOf keeps of st what the trend charts draw.
func readingOf(st store.Status) reading {
	r := reading{at: st.Now, published: st.Published, dead: st.Outbox.DeadLetters}
	for _, c := range st.Consumers {
		r.parked += c.Parked
	}
	var topics []topicReading
	for _, t := range st.Topics {
		if t.Pending > 0 {
			// A row written by a clock ahead of the store's has waited
			// no time, not less.
			topics = append(topics, topicReading{topic: t.Topic, pending: t.Pending, oldest: max(0, t.OldestPendingAge(st.Now))})
		}
	}
	slices.SortFunc(topics, func(a, b topicReading) int {
		return cmp.Or(cmp.Compare(b.pending, a.pending), cmp.Compare(a.topic, b.topic))
	})
	if len(topics) > trendTopics {
		for _, t := range topics[trendTopics:] {
			r.other.pending += t.pending
			r.other.oldest = max(r.other.oldest, t.oldest)
		}
		topics = topics[:trendTopics]
	}
	r.topics = slices.Clip(topics)
	return r
}

// capped reports whether r summed topics into its aggregate: a topic it
// does not name may be among them.
func (r reading) capped() bool { return r.other.pending > 0 }

// topic returns the reading of the topic named name, and whether r knows
// it: a topic r does not name has nothing pending, unless r is capped.
func (r reading) topic(name string) (topicReading, bool) {
	for _, t := range r.topics {
		if t.topic == name {
			return t, true
		}
	}
	return topicReading{topic: name}, !r.capped()
}

// ring holds the readings of the last History, oldest first, in a buffer
// of at most History/SampleEvery readings whose oldest the next one
// overwrites.
//
// Readings come from two sources that must not double points: Run's, every
// SampleEvery, and each view of the overview. So a reading closer than
// SampleEvery/2 to the newest replaces it, keeping the newest value; but
// not once the newest stands in for readings that span SampleEvery
// already, or views more often than SampleEvery/2 would keep replacing one
// point forever. Readings are placed by the store's clock; one older than
// the newest (the clock went back: a database restored, another one behind
// the same address) drops the newer ones, which cannot be compared with it.
type ring struct {
	every, keep time.Duration
	size        int // the most readings held

	mu sync.Mutex
	// buf grows up to size, then wraps: the readings are
	// buf[head], buf[head+1], … n of them, modulo len(buf).
	buf     []reading
	head, n int
	// since is when the first reading the newest replaced was read: the
	// newest slot's start.
	since time.Time
	// added, when set (by tests), is called after each reading is added.
	added func()
}

func newRing(every, keep time.Duration) *ring {
	size := 1
	if every > 0 {
		size = max(1, int(keep/every))
	}
	return &ring{every: every, keep: keep, size: size}
}

// at is the i-th reading held, the oldest first.
func (g *ring) at(i int) *reading { return &g.buf[(g.head+i)%len(g.buf)] }

// add adds x, the newest reading, and drops those older than History.
func (g *ring) add(x reading) {
	g.mu.Lock()
	for g.n > 0 && g.at(g.n-1).at.After(x.at) {
		*g.at(g.n - 1) = reading{}
		g.n--
		g.since = time.Time{}
	}
	for g.n > 0 && x.at.Sub(g.at(0).at) > g.keep {
		*g.at(0) = reading{}
		g.head = (g.head + 1) % len(g.buf)
		g.n--
	}
	if g.n > 0 && x.at.Sub(g.at(g.n-1).at) < g.every/2 && x.at.Sub(g.since) < g.every {
		*g.at(g.n - 1) = x
	} else {
		g.push(x)
		g.since = x.at
	}
	added := g.added
	g.mu.Unlock()
	if added != nil {
		added()
	}
}

// push adds x after the newest, overwriting the oldest when size are held.
func (g *ring) push(x reading) {
	switch {
	case g.n < len(g.buf):
		*g.at(g.n) = x
		g.n++
	case len(g.buf) < g.size: // full, but may grow: unwrap, then append
		g.buf = append(slices.Concat(g.buf[g.head:], g.buf[:g.head]), x)
		g.head, g.n = 0, g.n+1
	default:
		g.buf[g.head] = x
		g.head = (g.head + 1) % len(g.buf)
	}
}

// readings returns the readings held, oldest first.
func (g *ring) readings() []reading {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]reading, g.n)
	for i := range out {
		out[i] = *g.at(i)
	}
	return out
}

// Run reads the store's status (store.Operations' Status, the overview's
// query) every [Config.SampleEvery] for the overview's trend charts, until
// ctx ends; then it returns nil. A reading that fails is logged (Warn, with
// Config.Logger) and the next one is taken as usual. Without Run the charts
// hold only the readings of the overview's views. Call it once: a second
// Run while one runs returns an error at once.
//
// A dashboard of tenants ([NewTenants]) has no Run: it opens a tenant's
// database only for a request, so a tenant's charts hold the readings of
// the views of its overview, kept while its database stays open.
func (h *Handler) Run(ctx context.Context) error {
	if !h.running.CompareAndSwap(false, true) {
		return errors.New("dashboard: Run called twice: it is running already")
	}
	defer h.running.Store(false)
	tick := time.NewTicker(h.cfg.SampleEvery)
	defer tick.Stop()
	for {
		st, err := h.ops.Status(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			h.cfg.Logger.Warn("dashboard: read the status for the trend charts; trying again", "every", h.cfg.SampleEvery, "err", err)
		default:
			h.trend.add(readingOf(st))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
