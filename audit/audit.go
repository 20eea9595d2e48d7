package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/store"
)

// Defaults of Config.
const (
	DefaultSlack    = time.Minute
	DefaultExamples = 20
)

// Database is what an audit reads of a database; every store.Operations
// has it.
type Database interface {
	PublishedBetween(ctx context.Context, from, to time.Time, fn func(store.PublishedCopy) error) error
	PublishedBefore(ctx context.Context, t time.Time) (bool, error)
	Locate(ctx context.Context, ids []string) (map[string]store.Place, error)
}

// Config is an audit's window and limits.
type Config struct {
	// From and To are the window: messages published (recorded by the
	// database, stored by the broker) at or after From and before To.
	// From is required; To defaults to a Slack ago, since the copy of a
	// message the broker has just stored may not be recorded yet (the CDC
	// relay records them in batches, up to 200 ms later): until it is, a
	// table-less message looks like a phantom.
	From, To time.Time
	// Slack is how far beyond the window each side is read, for a message
	// whose copy and whose broker timestamp fall on two sides of an edge
	// (the broker stores a message before the relay records it, and the
	// clocks differ). Default DefaultSlack; 0 is taken as the default,
	// and a negative value is refused.
	Slack time.Duration
	// Examples is how many findings of each kind the report lists (all
	// are counted). Default DefaultExamples.
	Examples int
}

func (c *Config) setDefaults(now time.Time) {
	if c.Slack == 0 {
		c.Slack = DefaultSlack
	}
	if c.To.IsZero() {
		c.To = now.Add(-c.Slack)
	}
	if c.Examples <= 0 {
		c.Examples = DefaultExamples
	}
}

func (c Config) validate() error {
	switch {
	case c.From.IsZero():
		return errors.New("audit: Config.From is not set: give the start of the window")
	case !c.From.Before(c.To):
		return fmt.Errorf("audit: Config.From (%s) is not before Config.To (%s): give a window that ends after it starts",
			c.From.Format(time.RFC3339), c.To.Format(time.RFC3339))
	case c.Slack < 0:
		return fmt.Errorf("audit: Config.Slack is %s: use a positive duration (default %s)", c.Slack, DefaultSlack)
	}
	return nil
}

// Run audits the broker that r reads against the database db over cfg's
// window. The error is db's or r's, or cfg's when it is invalid; what
// does not match is in the report.
func Run(ctx context.Context, db Database, r broker.Reader, cfg Config) (*Report, error) {
	cfg.setDefaults(time.Now())
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &auditor{cfg: cfg, rep: &Report{From: cfg.From, To: cfg.To, Slack: cfg.Slack}, copies: map[string]store.PublishedCopy{}}
	if err := a.readDatabase(ctx, db); err != nil {
		return nil, err
	}
	if err := a.readBroker(ctx, r); err != nil {
		return nil, err
	}
	a.judgeCopies()
	a.judgeOrder()
	if err := a.judgeStored(ctx, db); err != nil {
		return nil, err
	}
	return a.rep, nil
}

// auditor holds what an audit read.
type auditor struct {
	cfg Config
	rep *Report
	// from is the window's start as narrowed.
	from time.Time
	// copies are the database's copies within Slack of the window, by
	// message id.
	copies map[string]store.PublishedCopy
	// stored are the broker's Courier messages within Slack of the
	// window, in each log's order.
	stored []broker.Stored
	// seen counts them by message id.
	seen map[string]int
}

// inWindow reports whether t falls in the (narrowed) window.
func (a *auditor) inWindow(t time.Time) bool { return !t.Before(a.from) && t.Before(a.cfg.To) }

// readDatabase reads the copies, and narrows the window to a Slack before
// the first one kept when the database keeps none from before it.
func (a *auditor) readDatabase(ctx context.Context, db Database) error {
	a.from = a.cfg.From
	lo, hi := a.cfg.From.Add(-a.cfg.Slack), a.cfg.To.Add(a.cfg.Slack)
	var first time.Time
	err := db.PublishedBetween(ctx, lo, hi, func(c store.PublishedCopy) error {
		a.copies[c.MessageID] = c
		if first.IsZero() || c.PublishedAt.Before(first) {
			first = c.PublishedAt
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("audit: read the published copies: %w", err)
	}
	before, err := db.PublishedBefore(ctx, lo)
	if err != nil {
		return fmt.Errorf("audit: read the published copies: %w", err)
	}
	// A message stored more than Slack before the first copy kept would
	// have its copy before it, which the database does not keep.
	if !before && !first.IsZero() {
		a.narrow(first.Add(-a.cfg.Slack), "the database keeps no copy published before "+stamp(first))
	}
	return nil
}

// readBroker reads what the broker holds, and narrows the window when its
// limits removed messages stored in it.
func (a *auditor) readBroker(ctx context.Context, r broker.Reader) error {
	a.seen = map[string]int{}
	since, err := r.ReadBack(ctx, a.from.Add(-a.cfg.Slack), a.cfg.To.Add(a.cfg.Slack), func(s broker.Stored) error {
		if s.Err != nil {
			if a.inWindow(s.At) {
				a.rep.Foreign.add(a.cfg.Examples, storedFinding(s, s.Err.Error()))
			}
			return nil
		}
		a.stored = append(a.stored, s)
		a.seen[s.Message.ID.String()]++
		return nil
	})
	if err != nil {
		return fmt.Errorf("audit: read the broker: %w", err)
	}
	if !since.IsZero() && since.Add(a.cfg.Slack).After(a.from) {
		a.narrow(since.Add(a.cfg.Slack), "the broker's limits removed what it stored before "+stamp(since))
	}
	return nil
}

// narrow moves the window's start to from, for why.
func (a *auditor) narrow(from time.Time, why string) {
	if !from.After(a.from) {
		return
	}
	if !from.Before(a.cfg.To) {
		from = a.cfg.To
	}
	a.from = from
	a.rep.From = from
	a.rep.Narrowed = append(a.rep.Narrowed, why)
}

// judgeCopies counts the copies in the window and those the broker lacks.
func (a *auditor) judgeCopies() {
	var lost []store.PublishedCopy
	for id, c := range a.copies {
		if !a.inWindow(c.PublishedAt) {
			continue
		}
		a.rep.Published++
		if a.seen[id] == 0 {
			lost = append(lost, c)
		}
	}
	slices.SortFunc(lost, func(x, y store.PublishedCopy) int { return cmp.Compare(x.ID, y.ID) })
	for _, c := range lost {
		a.rep.Lost.add(a.cfg.Examples, Finding{MessageID: c.MessageID, Topic: c.Topic, Key: c.Key, Type: c.Type, ID: c.ID, PublishedAt: c.PublishedAt})
	}
}

// judgeOrder checks each key's messages, in each log, against the
// database's order: the first copy of each message the database knows,
// in log order, must come in increasing id order.
func (a *auditor) judgeOrder() {
	type logKey struct{ log, topic, key string }
	last := map[logKey]store.PublishedCopy{}
	first := map[string]bool{}
	for _, s := range a.stored {
		id := s.Message.ID.String()
		if first[id] {
			continue
		}
		first[id] = true
		c, ok := a.copies[id]
		if !ok {
			continue
		}
		k := logKey{s.Log, s.Message.Topic, s.Message.Key}
		prev, ok := last[k]
		if ok && c.ID < prev.ID && a.inWindow(s.At) {
			f := storedFinding(s, fmt.Sprintf("id %d after id %d (message %s) of its key", c.ID, prev.ID, prev.MessageID))
			f.ID, f.PublishedAt = c.ID, c.PublishedAt
			a.rep.OrderBreaks.add(a.cfg.Examples, f)
			continue // the later message stays the mark
		}
		last[k] = c
	}
}

// judgeStored counts the broker's messages in the window, its duplicates,
// and places those the window's copies do not hold: pending, published
// outside the window, dead letters, or phantoms.
func (a *auditor) judgeStored(ctx context.Context, db Database) error {
	counted := map[string]bool{}
	var unplaced []string
	byID := map[string]broker.Stored{}
	for _, s := range a.stored {
		if !a.inWindow(s.At) {
			continue
		}
		a.rep.Stored++
		id := s.Message.ID.String()
		if counted[id] {
			continue
		}
		counted[id] = true
		if n := a.seen[id]; n > 1 {
			f := storedFinding(s, fmt.Sprintf("%d copies", n))
			a.rep.Duplicates.addN(a.cfg.Examples, n-1, f)
		}
		if _, ok := a.copies[id]; !ok {
			unplaced = append(unplaced, id)
			byID[id] = s
		}
	}
	if len(unplaced) == 0 {
		return nil
	}
	places, err := db.Locate(ctx, unplaced)
	if err != nil {
		return fmt.Errorf("audit: look up the messages the window's copies lack: %w", err)
	}
	for _, id := range unplaced {
		s := byID[id]
		switch places[id] {
		case store.PlacePending:
			a.rep.Pending++
		case store.PlacePublished:
			a.rep.PublishedElsewhen++
		case store.PlaceDeadLetter:
			a.rep.DeadLetters++
		default:
			a.rep.Phantoms.add(a.cfg.Examples, storedFinding(s, "unknown to the database"))
		}
	}
	return nil
}

// storedFinding describes the broker's copy s.
func storedFinding(s broker.Stored, detail string) Finding {
	f := Finding{Topic: s.Message.Topic, Key: s.Message.Key, Type: s.Message.Type, StoredAt: s.At, Log: s.Log, Offset: s.Offset, Detail: detail}
	if s.Err == nil {
		f.MessageID = s.Message.ID.String()
	}
	return f
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
