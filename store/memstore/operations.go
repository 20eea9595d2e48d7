package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/ops"
)

// Operations returns the operators' maintenance view of s (see
// [store.Operations]). s holds an outbox only: the consumers', sagas' and
// keys' parts of its Status are empty, Reconcile finds no sagas nor keys,
// ReleaseKey releases nothing, and Trim deletes from the published copies,
// the dead letters and the released scheduled messages only (other tables
// hold nothing to delete). TryLock is a lock of the process.
func (s *Store) Operations() store.Operations { return memOps{s} }

type memOps struct{ s *Store }

var _ store.Operations = memOps{}

// Status implements store.Operations.
func (o memOps) Status(ctx context.Context) (store.Status, error) {
	if err := ctx.Err(); err != nil {
		return store.Status{}, fmt.Errorf("memstore: status: %w", err)
	}
	s := o.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now.Now().UTC()
	st := store.Status{Now: now, Outbox: store.Stats{Now: now}, Published: store.Count{N: int64(len(s.published))}}
	topics := ops.Topics{}
	topic := topics.Get
	bySeq := map[int64]*row{}
	for _, r := range s.rows {
		bySeq[r.rec.Seq] = r
		t := topic(r.rec.Message.Topic)
		t.Pending++
		if r.retryAt.After(now) {
			t.InBackoff++
		}
		if t.OldestPending.IsZero() || r.createdAt.Before(t.OldestPending) {
			t.OldestPending = r.createdAt.UTC()
		}
	}
	relays := map[string]*store.RelayStatus{}
	for _, l := range s.leases {
		r := relays[l.owner]
		if r == nil {
			r = &store.RelayStatus{Owner: l.owner}
			relays[l.owner] = r
		}
		r.Leases++
		r.Rows += int64(len(l.seqs))
		if !l.until.After(now) {
			r.Expired++
		} else {
			for _, seq := range l.seqs {
				if row := bySeq[seq]; row != nil {
					topic(row.rec.Message.Topic).Leased++
				}
			}
		}
		if l.until.After(r.Until) {
			r.Until = l.until.UTC()
		}
	}
	for _, d := range s.dead {
		t := topic(d.Topic)
		t.DeadLetters++
		if h := s.holds[d.ID]; h != nil {
			t.HeldKeys++
			if t.OldestHold.IsZero() || h.since.Before(t.OldestHold) {
				t.OldestHold = h.since
			}
			for _, r := range h.held {
				topic(r.rec.Message.Topic).Held++
			}
		}
	}
	topics.Fill(&st)
	for _, r := range relays {
		st.Relays = append(st.Relays, *r)
	}
	slices.SortFunc(st.Relays, func(a, b store.RelayStatus) int { return cmp.Compare(a.Owner, b.Owner) })
	if len(s.published) > 0 {
		st.OldestPublished = s.published[0].PublishedAt
	}
	st.Scheduled = s.scheduledStatus(now)
	return st, nil
}

// Reconcile implements store.Operations.
func (o memOps) Reconcile(ctx context.Context, opts store.ReconcileOptions) (store.Reconciliation, error) {
	if err := ctx.Err(); err != nil {
		return store.Reconciliation{}, fmt.Errorf("memstore: reconcile: %w", err)
	}
	if opts.Limit <= 0 {
		opts.Limit = 1000
	}
	s := o.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now.Now().UTC()
	r := store.Reconciliation{Now: now}
	for id, l := range s.leases {
		if !l.until.After(now.Add(-opts.LeaseGrace)) {
			r.ExpiredLeases = append(r.ExpiredLeases, store.Lease{ID: id, Owner: l.owner, Rows: int64(len(l.seqs)), Until: l.until.UTC()})
		}
	}
	slices.SortFunc(r.ExpiredLeases, func(a, b store.Lease) int { return cmp.Or(a.Until.Compare(b.Until), cmp.Compare(a.ID, b.ID)) })
	r.ExpiredLeases = r.ExpiredLeases[:min(len(r.ExpiredLeases), opts.Limit)]
	if opts.RetryAttempts > 0 || opts.RetryAge > 0 {
		for _, row := range s.rows {
			if row.retryAt.IsZero() || len(r.RetriedRows) == opts.Limit {
				continue
			}
			if (opts.RetryAttempts > 0 && row.rec.Attempts >= opts.RetryAttempts) ||
				(opts.RetryAge > 0 && !row.createdAt.After(now.Add(-opts.RetryAge))) {
				m := row.rec.Message
				r.RetriedRows = append(r.RetriedRows, store.RetriedRow{Seq: row.rec.Seq, MessageID: m.ID.String(), Topic: m.Topic,
					Key: m.Key, Attempts: row.rec.Attempts, LastError: row.lastError, CreatedAt: row.createdAt.UTC(), RetryAt: row.retryAt.UTC()})
			}
		}
	}
	return r, nil
}

// ReleaseLease implements store.Operations.
func (o memOps) ReleaseLease(ctx context.Context, id int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("memstore: release lease: %w", err)
	}
	s := o.s
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[id]
	if !ok || l.until.After(s.now.Now()) {
		return false, nil
	}
	delete(s.leases, id)
	return true, nil
}

// ReleaseKey implements store.Operations: there are no keys.
func (memOps) ReleaseKey(context.Context, string, string) (bool, error) { return false, nil }

// Trim implements store.Operations: the published copies, the dead letters
// and the released scheduled messages hold rows to delete. The tables the
// store does not keep (inbox markers and failures, keys, sagas, parked
// messages, latency samples) have none: their trims delete nothing.
func (o memOps) Trim(ctx context.Context, t store.Trim) (store.Trimmed, error) {
	if err := ctx.Err(); err != nil {
		return store.Trimmed{}, fmt.Errorf("memstore: trim: %w", err)
	}
	if !slices.Contains(store.Tables, t.Table) {
		return store.Trimmed{}, fmt.Errorf("memstore: trim %q: %w", t.Table, store.ErrUnknownTable)
	}
	if t.Limit <= 0 {
		t.Limit = 1000
	}
	s := o.s
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	switch t.Table {
	case store.TablePublished:
		s.published = slices.DeleteFunc(s.published, func(r Row) bool {
			if n < t.Limit && r.PublishedAt.Before(t.Before) {
				n++
				return true
			}
			return false
		})
	case store.TableDeadLetters:
		s.dead = slices.DeleteFunc(s.dead, func(d store.DeadLetter) bool {
			// One that holds its key stays until it is replayed or
			// discarded: the rows behind it wait for it.
			if n < t.Limit && d.DeadAt.Before(t.Before) && !d.Holds {
				n++
				return true
			}
			return false
		})
	case store.TableReleased:
		s.schedule = slices.DeleteFunc(s.schedule, func(sc *scheduled) bool {
			if n < t.Limit && !sc.released.IsZero() && sc.released.Before(t.Before) {
				n++
				return true
			}
			return false
		})
	}
	return store.Trimmed{Deleted: int64(n)}, nil
}

// TryLock implements store.Operations with a lock of the Store per name.
func (o memOps) TryLock(_ context.Context, name string) (func(), bool, error) {
	s := o.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.locks[name] {
		return nil, false, nil
	}
	if s.locks == nil {
		s.locks = map[string]bool{}
	}
	s.locks[name] = true
	return sync.OnceFunc(func() {
		s.mu.Lock()
		delete(s.locks, name)
		s.mu.Unlock()
	}), true, nil
}

// PublishedBetween implements store.Operations. It copies the window's
// published copies under the store's lock and calls fn after releasing
// it, so that fn may use the store.
func (o memOps) PublishedBetween(ctx context.Context, from, to time.Time, fn func(store.PublishedCopy) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: list published copies: %w", err)
	}
	s := o.s
	s.mu.Lock()
	var window []store.PublishedCopy
	for _, p := range s.published {
		if !p.PublishedAt.Before(from) && p.PublishedAt.Before(to) {
			m := p.Record.Message
			window = append(window, store.PublishedCopy{ID: p.Record.Seq, MessageID: m.ID.String(), Topic: m.Topic,
				Key: m.Key, Type: m.Type, PublishedAt: p.PublishedAt})
		}
	}
	s.mu.Unlock()
	slices.SortStableFunc(window, func(a, b store.PublishedCopy) int { return cmp.Compare(a.ID, b.ID) })
	for _, c := range window {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("memstore: list published copies: %w", err)
		}
		if err := fn(c); err != nil {
			return err
		}
	}
	return nil
}

// PublishedBefore implements store.Operations.
func (o memOps) PublishedBefore(ctx context.Context, t time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("memstore: find a published copy before %s: %w", t.Format(time.RFC3339Nano), err)
	}
	s := o.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.published, func(p Row) bool { return p.PublishedAt.Before(t) }), nil
}

// Locate implements store.Operations, with the SQL dialects' rules (see
// ops.Lookup).
func (o memOps) Locate(ctx context.Context, ids []string) (map[string]store.Place, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: locate %d messages: %w", len(ids), err)
	}
	l := ops.NewLookup(ids)
	if len(l.IDs) == 0 {
		return l.Places(), nil
	}
	s := o.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rows {
		l.Found(r.rec.Message.ID.String(), store.PlacePending)
	}
	for _, h := range s.holds {
		for _, r := range h.held {
			l.Found(r.rec.Message.ID.String(), store.PlacePending)
		}
	}
	for _, p := range s.published {
		l.Found(p.Record.Message.ID.String(), store.PlacePublished)
	}
	for _, d := range s.dead {
		l.Found(d.MessageID, store.PlaceDeadLetter)
	}
	return l.Places(), nil
}

// Beat implements store.Operations with the Store's clock.
func (o memOps) Beat(_ context.Context, owner string, ttl time.Duration) ([]string, error) {
	s := o.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now.Now()
	if s.members == nil {
		s.members = map[string]time.Time{}
	}
	s.members[owner] = now.Add(ttl)
	var owners []string
	for m, until := range s.members {
		if until.After(now) {
			owners = append(owners, m)
		}
	}
	slices.Sort(owners)
	return owners, nil
}

// Leave implements store.Operations.
func (o memOps) Leave(_ context.Context, owner string) error {
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	delete(o.s.members, owner)
	return nil
}
