package audit

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/store"
)

// Defaults of WatchConfig.
const (
	DefaultInterval   = 15 * time.Second
	DefaultWatchSlack = 5 * time.Second
	DefaultRemember   = 10 * time.Minute
	DefaultWatchName  = "default"
)

// The kinds of a WatchFinding.
const (
	KindLost       = "lost"
	KindPhantom    = "phantom"
	KindDuplicate  = "duplicate"
	KindOrderBreak = "order_break"
)

// WatchConfig is how a Watcher audits.
type WatchConfig struct {
	// Name tells the watch from others saved in the same database.
	// Default DefaultWatchName.
	Name string
	// Broker says what the watch reads, for people (saved with its
	// state): a URL without credentials, a stream.
	Broker string
	// Interval is the time between passes. Default DefaultInterval.
	Interval time.Duration
	// Slack is how far beyond each pass's range both sides are read, and
	// how long a pass waits before it judges what was published: a
	// message's copy is recorded after the broker stored it, on another
	// clock. Default DefaultWatchSlack; a negative value is refused.
	// Keep it above the relays' record delay (from the broker's timestamp
	// to the copy's record; milliseconds, up to a few hundred on a busy
	// machine): a message the broker stores more than Slack after its
	// timestamp (Kafka's CreateTime is when the producer sent it) may be
	// stored just after a pass read up to that time, and be judged lost
	// by the next though the broker holds it.
	Slack time.Duration
	// Remember is how long the watch remembers the messages it read, to
	// tell a duplicate or an order break from a first copy: a copy the
	// broker stores again more than Remember after the first, or a key
	// whose last message is older than that, is judged as new. Memory
	// grows with it: some 350 bytes a message. Default DefaultRemember.
	Remember time.Duration
	// Since is how far back the first pass starts: the watch judges what
	// was published from Since before it started. Default Remember.
	Since time.Duration
	// Examples is how many findings the state keeps, newest last.
	// Default DefaultExamples.
	Examples int
	// Save, if set, records the watch's state after each pass
	// (courier_audit_watches), for `courier status` and the dashboard.
	Save store.Delivery
	// Observer, if set, is told of each pass (metrics.Collector.Audit).
	Observer WatchObserver
	// Logger logs each finding once, as a warning, and failed passes.
	// Default: slog.Default().
	Logger *slog.Logger
	// Clock is the watch's clock. Default time.Now.
	Clock func() time.Time
}

func (c *WatchConfig) setDefaults() {
	if c.Name == "" {
		c.Name = DefaultWatchName
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Slack == 0 {
		c.Slack = DefaultWatchSlack
	}
	if c.Remember == 0 {
		c.Remember = DefaultRemember
	}
	if c.Since == 0 {
		c.Since = c.Remember
	}
	if c.Examples <= 0 {
		c.Examples = DefaultExamples
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
}

// Validate reports the first invalid field, with its fix.
func (c WatchConfig) Validate() error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"Interval", c.Interval}, {"Slack", c.Slack}, {"Remember", c.Remember}, {"Since", c.Since}} {
		if f.d < 0 {
			return fmt.Errorf("audit: WatchConfig.%s is %s: use a positive duration, or 0 for the default", f.name, f.d)
		}
	}
	if c.Remember > 0 && c.Interval > 0 && c.Remember < c.Interval {
		return fmt.Errorf("audit: WatchConfig.Remember (%s) is shorter than Interval (%s): remember at least one interval", c.Remember, c.Interval)
	}
	return nil
}

// WatchObserver is told of each pass of a Watcher (metrics.Collector.Audit
// returns one).
type WatchObserver interface {
	// Passed is called after each pass that succeeded, with what it found
	// and the watch's state after it.
	Passed(p Pass, s WatchState)
	// Failed is called after a pass that failed.
	Failed(name string, err error)
}

// Pass is what one pass of a Watcher read and found.
type Pass struct {
	// Name is the watch's.
	Name string
	// From and To are the range the pass judged: messages published
	// (recorded by the database, stored by the broker) at or after From
	// and before To.
	From, To time.Time
	// Copies and Stored count what the pass read of each side: the
	// database's copies and the broker's messages, the overlap of Slack
	// with the last pass included (each is judged once).
	Copies, Stored int
	// Published and Judged count the copies and broker messages in the
	// range.
	Published, Judged int
	// Findings are what the pass found, in the order found.
	Findings []WatchFinding
	// Pending, Elsewhen and DeadLetters count broker messages placed
	// otherwise (see Report); Foreign those that are not Courier's.
	Pending, Elsewhen, DeadLetters, Foreign int
	// Note says why some of the range was not judged; empty when all was.
	Note string
	// Took is how long the pass took.
	Took time.Duration
}

// Count returns how many findings of kind the pass found.
func (p Pass) Count(kind string) int {
	n := 0
	for _, f := range p.Findings {
		if f.Kind == kind {
			n++
		}
	}
	return n
}

// WatchFinding is a Finding with its kind (KindLost, …) and when it was
// found.
type WatchFinding struct {
	Kind string `json:"kind"`
	Finding
	FoundAt time.Time `json:"found_at"`
}

// WatchState is a Watcher's state: what it has judged and found since it
// started.
type WatchState struct {
	// Name and Broker are the watch's.
	Name   string `json:"name"`
	Broker string `json:"broker"`
	// From and To are the range judged so far; zero before the first
	// pass.
	From, To time.Time
	// Passes and Failed count passes, and those that failed; LastError
	// is why the last one failed, empty when it succeeded.
	Passes, Failed int64
	LastError      string
	// Lost, Phantoms, Duplicates and OrderBreaks count the findings.
	Lost, Phantoms, Duplicates, OrderBreaks int64
	// Findings are the latest findings, newest last (at most
	// WatchConfig.Examples).
	Findings []WatchFinding
	// Remembered is how far back, from To, the watch remembers messages
	// (for duplicates and order): Remember once it has run that long.
	Remembered time.Duration
	// LastPass is when the last pass ended (the watch's clock); zero
	// before the first.
	LastPass time.Time
	// Interval is the time between passes.
	Interval time.Duration
	// StartedAt is when the watch was made.
	StartedAt time.Time
}

// Lag is how far behind now the judged range ends: Slack plus up to an
// Interval while passes succeed.
func (s WatchState) Lag(now time.Time) time.Duration {
	if s.To.IsZero() {
		return 0
	}
	return now.Sub(s.To)
}

// Alarms reports whether the watch found lost messages, phantoms or order
// breaks.
func (s WatchState) Alarms() bool { return s.Lost+s.Phantoms+s.OrderBreaks > 0 }

// Watcher audits continuously: each pass reads what both sides gained
// since the last one (and Slack more), judges the range that has become
// old enough, and remembers what it read for Remember, so that a copy
// stored again or a key's message stored after a later one is found
// however far apart the passes that read them. See the package
// documentation for the findings, and docs/operations.md for what an
// operator does with each.
type Watcher struct {
	cfg WatchConfig
	db  Database
	r   broker.Reader

	mu    sync.Mutex // serialises passes and guards state
	state WatchState

	// judged is where the next pass's range starts; read is where each
	// side was read up to.
	judged, read time.Time
	// copies are the database's copies read and not yet out of use, by
	// message id.
	copies map[string]store.PublishedCopy
	// stored are the broker's messages read and not yet judged, in each
	// log's order; offsets tells those read already (for Slack beyond
	// the next pass's start), and offsetsQ queues them, oldest first.
	stored   []broker.Stored
	offsets  map[logOffset]bool
	offsetsQ []remembered
	// seen are the message ids the broker holds, remembered for
	// Remember: how many copies, and the first's time.
	seen map[string]*seenID
	// last is each log key's last message (first copies only), for
	// order; remembered for Remember.
	last map[logKey]lastCopy
	// forget queues what was remembered, oldest first.
	forget []remembered
	// sawCopy is set once the database has shown a copy: before, the
	// broker's messages cannot be judged as phantoms (the relays may
	// keep no copies).
	sawCopy bool
	// resumed is set once the state saved by an earlier run of the
	// watch was taken up (WatchConfig.Save).
	resumed bool
	// memFrom is where this run's first pass started: it remembers
	// nothing from before.
	memFrom time.Time
}

type logOffset struct {
	log    string
	offset int64
}

type logKey struct{ log, topic, key string }

type seenID struct {
	n  int
	at time.Time
}

type lastCopy struct {
	id        int64
	messageID string
	at        time.Time
}

// remembered is one entry of the forget queue.
type remembered struct {
	at  time.Time
	id  string    // a message id of seen, or ""
	key logKey    // a key of last, when id is ""
	off logOffset // in offsetsQ
}

// NewWatcher returns a Watcher of the broker r reads against db.
func NewWatcher(db Database, r broker.Reader, cfg WatchConfig) (*Watcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	now := cfg.Clock()
	w := &Watcher{cfg: cfg, db: db, r: r,
		copies: map[string]store.PublishedCopy{}, offsets: map[logOffset]bool{},
		seen: map[string]*seenID{}, last: map[logKey]lastCopy{},
		judged: now.Add(-cfg.Since), read: now.Add(-cfg.Since)}
	w.state = WatchState{Name: cfg.Name, Broker: cfg.Broker, Interval: cfg.Interval, StartedAt: now}
	return w, nil
}

// Run makes a pass every Interval until ctx ends, and returns ctx's
// error. A pass that fails is logged, counted and saved; the next one
// reads what it did not.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := w.Pass(ctx); err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// State returns the watch's state.
func (w *Watcher) State() WatchState {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.state
	s.Findings = slices.Clone(s.Findings)
	return s
}

// Ready says where the watch stands, for /readyz (health.Config's
// StatusChecks): an error when its last pass failed or no pass has
// succeeded for three intervals, and otherwise how far it has judged and
// what it found. Findings do not make it unready: they are the broker's
// or the database's, not the watch's.
func (w *Watcher) Ready(context.Context) (string, error) {
	s := w.State()
	now := w.cfg.Clock()
	if s.LastError != "" {
		return "", fmt.Errorf("audit %s: last pass failed: %s", s.Name, s.LastError)
	}
	if s.LastPass.IsZero() {
		return "audit " + s.Name + ": first pass running", nil
	}
	if late := now.Sub(s.LastPass); late > 3*w.cfg.Interval+w.cfg.Slack {
		return "", fmt.Errorf("audit %s: no pass for %s (interval %s)", s.Name, late.Round(time.Second), w.cfg.Interval)
	}
	return fmt.Sprintf("audit %s: judged to %s (lag %s): %d lost, %d phantoms, %d order breaks, %d duplicates",
		s.Name, stamp(s.To), s.Lag(now).Round(time.Millisecond), s.Lost, s.Phantoms, s.OrderBreaks, s.Duplicates), nil
}

// Pass makes one pass: it reads both sides from where the last pass read
// up to (less Slack) to now, and judges what was published from where the
// last pass judged up to to Slack ago. Each message is judged once; a
// pass that fails leaves the range to the next one.
func (w *Watcher) Pass(ctx context.Context) (Pass, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	start := w.cfg.Clock()
	p, err := w.pass(ctx, start)
	p.Took = w.cfg.Clock().Sub(start)
	w.state.Passes++
	w.state.LastPass = w.cfg.Clock()
	if err != nil {
		w.state.Failed++
		w.state.LastError = err.Error()
		w.cfg.Logger.Error("audit pass failed", "watch", w.cfg.Name, "err", err)
		if w.cfg.Observer != nil {
			w.cfg.Observer.Failed(w.cfg.Name, err)
		}
	} else {
		w.state.LastError = ""
		w.logFindings(p)
		w.record(p)
		if w.cfg.Observer != nil {
			s := w.state
			s.Findings = slices.Clone(s.Findings)
			w.cfg.Observer.Passed(p, s)
		}
	}
	if w.cfg.Save != nil {
		if serr := w.cfg.Save.SaveWatch(ctx, w.saved()); serr != nil && err == nil {
			w.cfg.Logger.Error("audit: save the watch's state", "watch", w.cfg.Name, "err", serr)
		}
	}
	return p, err
}

// pass reads and judges; w.mu is held.
func (w *Watcher) pass(ctx context.Context, now time.Time) (Pass, error) {
	note, err := w.resume(ctx)
	if err != nil {
		return Pass{Name: w.cfg.Name, From: w.judged}, err
	}
	to := now.Add(-w.cfg.Slack)
	p := Pass{Name: w.cfg.Name, From: w.judged, To: to, Note: note}
	if !to.After(w.judged) {
		return p, nil
	}
	lo := w.read.Add(-w.cfg.Slack)
	if err := w.readCopies(ctx, lo, now, &p); err != nil {
		return p, err
	}
	since, err := w.readBroker(ctx, lo, now, &p)
	if err != nil {
		return p, err
	}
	// Copies whose messages the broker's limits removed before they were
	// read cannot be judged lost.
	lostFrom := w.judged
	if !since.IsZero() && since.Add(w.cfg.Slack).After(lostFrom) {
		lostFrom = since.Add(w.cfg.Slack)
		if lostFrom.After(to) {
			lostFrom = to
		}
		p.Note = "the broker's limits removed what it stored before " + stamp(since) + ": copies published before " + stamp(lostFrom) + " were not judged lost"
	}
	w.judgeCopies(lostFrom, to, &p)
	if err := w.judgeStored(ctx, to, &p); err != nil {
		return p, err
	}
	w.judged, w.read = to, now
	w.prune(to)
	return p, nil
}

// resume takes up the state an earlier run of the watch saved, once: its
// counts and findings stand (a restart clears no alarm: forget the watch,
// store.Delivery.DeleteWatch or `courier audit --watch --reset`, to
// start afresh), and the first pass starts where it stopped judging, so
// that nothing is judged, or logged, twice. When it stopped longer ago
// than Since, the pass starts Since ago and says what was not judged.
// w.mu is held.
func (w *Watcher) resume(ctx context.Context) (string, error) {
	if w.resumed || w.cfg.Save == nil {
		return "", nil
	}
	watches, err := w.cfg.Save.Watches(ctx)
	if err != nil {
		return "", fmt.Errorf("audit: read the watch's saved state: %w", err)
	}
	w.resumed = true
	i := slices.IndexFunc(watches, func(s store.AuditWatch) bool { return s.Name == w.cfg.Name })
	if i < 0 {
		return "", nil
	}
	saved := watches[i]
	findings, err := SavedFindings(saved)
	if err != nil {
		w.cfg.Logger.Warn("audit: the saved findings are dropped", "watch", w.cfg.Name, "err", err)
	}
	s := &w.state
	s.Passes, s.Failed = saved.Passes, saved.Failed
	s.Lost, s.Phantoms, s.Duplicates, s.OrderBreaks = saved.Lost, saved.Phantoms, saved.Duplicates, saved.OrderBreaks
	s.Findings, s.StartedAt = findings, saved.StartedAt
	switch {
	case saved.To.IsZero():
	case saved.To.Before(w.judged):
		return "the watch stopped judging at " + stamp(saved.To) + ": what was published until " + stamp(w.judged) + " was not judged (run a one-shot audit of it)", nil
	default:
		s.From = saved.From
		w.judged, w.read = saved.To, saved.To
	}
	return "", nil
}

// readCopies reads the copies published from lo to hi.
func (w *Watcher) readCopies(ctx context.Context, lo, hi time.Time, p *Pass) error {
	err := w.db.PublishedBetween(ctx, lo, hi, func(c store.PublishedCopy) error {
		p.Copies++
		w.sawCopy = true
		w.copies[c.MessageID] = c
		return nil
	})
	if err != nil {
		return fmt.Errorf("audit: read the published copies: %w", err)
	}
	return nil
}

// readBroker reads the broker's messages stored from lo to hi that were
// not read before.
func (w *Watcher) readBroker(ctx context.Context, lo, hi time.Time, p *Pass) (time.Time, error) {
	since, err := w.r.ReadBack(ctx, lo, hi, func(s broker.Stored) error {
		at := logOffset{s.Log, s.Offset}
		if w.offsets[at] {
			return nil
		}
		w.offsets[at] = true
		w.offsetsQ = append(w.offsetsQ, remembered{at: s.At, off: at})
		p.Stored++
		if s.Err != nil {
			p.Foreign++
			return nil
		}
		w.stored = append(w.stored, s)
		id := s.Message.ID.String()
		if n := w.seen[id]; n != nil {
			n.n++
		} else {
			w.seen[id] = &seenID{n: 1, at: s.At}
			w.forget = append(w.forget, remembered{at: s.At, id: id})
		}
		return nil
	})
	if err != nil {
		return since, fmt.Errorf("audit: read the broker: %w", err)
	}
	return since, nil
}

// judgeCopies finds the copies published from from to to that the broker
// does not hold.
func (w *Watcher) judgeCopies(from, to time.Time, p *Pass) {
	var lost []store.PublishedCopy
	for id, c := range w.copies {
		if c.PublishedAt.Before(w.judged) || !c.PublishedAt.Before(to) {
			continue
		}
		p.Published++
		if c.PublishedAt.Before(from) {
			continue
		}
		if w.seen[id] == nil {
			lost = append(lost, c)
		}
	}
	slices.SortFunc(lost, func(x, y store.PublishedCopy) int { return cmp.Compare(x.ID, y.ID) })
	for _, c := range lost {
		w.found(p, KindLost, Finding{MessageID: c.MessageID, Topic: c.Topic, Key: c.Key, Type: c.Type, ID: c.ID, PublishedAt: c.PublishedAt})
	}
}

// judgeStored judges the broker's messages stored before to, in each
// log's order: duplicates, order breaks and those the copies lack.
func (w *Watcher) judgeStored(ctx context.Context, to time.Time, p *Pass) error {
	var judged, rest []broker.Stored
	for _, s := range w.stored {
		if s.At.Before(to) {
			judged = append(judged, s)
		} else {
			rest = append(rest, s)
		}
	}
	// Look up the messages the copies lack before judging anything: a
	// pass that fails here leaves the range, and each key's and id's
	// marks, as they were, for the next pass to judge.
	places, err := w.locate(ctx, judged)
	if err != nil {
		return err
	}
	var unplaced []string
	byID := map[string]broker.Stored{}
	firsts := map[string]bool{}
	for _, s := range judged {
		p.Judged++
		id := s.Message.ID.String()
		seen := w.seen[id]
		if seen != nil && (!seen.at.Equal(s.At) || firsts[id]) {
			w.found(p, KindDuplicate, storedFinding(s, "another copy of a message the broker stored at "+stamp(seen.at)))
			continue
		}
		firsts[id] = true
		c, ok := w.copies[id]
		if !ok {
			unplaced = append(unplaced, id)
			byID[id] = s
			continue
		}
		k := logKey{s.Log, s.Message.Topic, s.Message.Key}
		if prev, ok := w.last[k]; ok && c.ID < prev.id {
			f := storedFinding(s, fmt.Sprintf("id %d after id %d (message %s) of its key", c.ID, prev.id, prev.messageID))
			f.ID, f.PublishedAt = c.ID, c.PublishedAt
			w.found(p, KindOrderBreak, f)
			continue // the later message stays the mark
		}
		if _, ok := w.last[k]; !ok {
			w.forget = append(w.forget, remembered{at: s.At, key: k})
		}
		w.last[k] = lastCopy{id: c.ID, messageID: id, at: s.At}
	}
	w.stored = rest
	if len(unplaced) == 0 {
		return nil
	}
	if !w.sawCopy {
		p.Note = "the database keeps no published copies (relays without KeepPublished): the broker's messages cannot be placed"
		return nil
	}
	for _, id := range unplaced {
		switch places[id] {
		case store.PlacePending:
			p.Pending++
		case store.PlacePublished:
			p.Elsewhen++
		case store.PlaceDeadLetter:
			p.DeadLetters++
		default:
			w.found(p, KindPhantom, storedFinding(byID[id], "unknown to the database"))
		}
	}
	return nil
}

// locate returns where the database holds the messages of judged whose
// copies the watch has not read; nil when there are none, or when the
// database keeps no copies.
func (w *Watcher) locate(ctx context.Context, judged []broker.Stored) (map[string]store.Place, error) {
	var ids []string
	asked := map[string]bool{}
	for _, s := range judged {
		id := s.Message.ID.String()
		if _, ok := w.copies[id]; !ok && !asked[id] {
			asked[id] = true
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 || !w.sawCopy {
		return nil, nil
	}
	places, err := w.db.Locate(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("audit: look up the messages the copies lack: %w", err)
	}
	return places, nil
}

// found adds a finding to p; Pass logs it if p succeeds.
func (w *Watcher) found(p *Pass, kind string, f Finding) {
	p.Findings = append(p.Findings, WatchFinding{Kind: kind, Finding: f, FoundAt: w.cfg.Clock()})
}

// logFindings logs the findings of a pass that succeeded: each message is
// judged by one such pass (a pass that fails leaves its range to the
// next), so each finding is logged once.
func (w *Watcher) logFindings(p Pass) {
	for _, f := range p.Findings {
		w.cfg.Logger.Warn("audit found "+f.Kind, "watch", w.cfg.Name, "message_id", f.MessageID, "topic", f.Topic, "key", f.Key,
			"outbox_id", f.ID, "log", f.Log, "offset", f.Offset, "detail", f.Detail)
	}
}

// prune forgets the copies and offsets no later pass reads again, and
// what is older than Remember. The queues are in reading order, which is
// time order but for clocks of several logs and keys queued again: an
// entry out of order is forgotten a little later, never sooner.
func (w *Watcher) prune(to time.Time) {
	for id, c := range w.copies {
		if c.PublishedAt.Before(to.Add(-2 * w.cfg.Slack)) {
			delete(w.copies, id)
		}
	}
	n := 0
	for _, r := range w.offsetsQ {
		if !r.at.Before(to.Add(-2 * w.cfg.Slack)) {
			break
		}
		delete(w.offsets, r.off)
		n++
	}
	w.offsetsQ = slices.Delete(w.offsetsQ, 0, n)
	cut := to.Add(-w.cfg.Remember)
	n = 0
	for _, r := range w.forget {
		if !r.at.Before(cut) {
			break
		}
		n++
		if r.id != "" {
			if s := w.seen[r.id]; s != nil && s.at.Equal(r.at) {
				delete(w.seen, r.id)
			}
			continue
		}
		if l, ok := w.last[r.key]; ok && !l.at.After(r.at) {
			delete(w.last, r.key)
		} else if ok {
			// A later message of the key replaced it: remember the key
			// until that one is old.
			w.forget = append(w.forget, remembered{at: l.at, key: r.key})
		}
	}
	w.forget = slices.Delete(w.forget, 0, n)
}

// record adds p to the state; w.mu is held.
func (w *Watcher) record(p Pass) {
	s := &w.state
	if s.From.IsZero() {
		s.From = p.From
	}
	if w.memFrom.IsZero() {
		w.memFrom = p.From
	}
	s.To = p.To
	s.Remembered = min(w.cfg.Remember, p.To.Sub(w.memFrom))
	for _, f := range p.Findings {
		switch f.Kind {
		case KindLost:
			s.Lost++
		case KindPhantom:
			s.Phantoms++
		case KindDuplicate:
			s.Duplicates++
		case KindOrderBreak:
			s.OrderBreaks++
		}
	}
	s.Findings = append(s.Findings, p.Findings...)
	if extra := len(s.Findings) - w.cfg.Examples; extra > 0 {
		s.Findings = slices.Delete(s.Findings, 0, extra)
	}
}

// saved is the state as store.Delivery keeps it; w.mu is held.
func (w *Watcher) saved() store.AuditWatch {
	s := w.state
	findings, err := json.Marshal(s.Findings)
	if err != nil || len(s.Findings) == 0 {
		findings = nil
	}
	return store.AuditWatch{Name: s.Name, Broker: s.Broker, From: s.From, To: s.To, Passes: s.Passes, Failed: s.Failed,
		Lost: s.Lost, Phantoms: s.Phantoms, Duplicates: s.Duplicates, OrderBreaks: s.OrderBreaks,
		Interval: s.Interval, LastError: s.LastError, Findings: findings, StartedAt: s.StartedAt}
}

// SavedFindings decodes the findings a watch saved (store.AuditWatch's
// Findings).
func SavedFindings(w store.AuditWatch) ([]WatchFinding, error) {
	if len(w.Findings) == 0 {
		return nil, nil
	}
	var fs []WatchFinding
	if err := json.Unmarshal(w.Findings, &fs); err != nil {
		return nil, errors.New("audit: the watch " + w.Name + "'s findings do not decode: " + err.Error())
	}
	return fs, nil
}
