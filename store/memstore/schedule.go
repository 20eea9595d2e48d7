package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

var _ store.Scheduler[*Tx] = (*Store)(nil)

// scheduled is a scheduled message: waiting, or released.
type scheduled struct {
	seq      int64 // scheduling order
	msg      courier.Message
	due      time.Time
	created  time.Time
	released time.Time // zero while it waits
	cancel   *Tx       // the transaction cancelling it, if any
}

// Schedule implements [store.Scheduler]: the messages wait from tx's
// commit until due, by the store's clock.
func (s *Store) Schedule(ctx context.Context, tx *Tx, due store.Due, msgs []courier.Message) error {
	if tx == nil || tx.done || tx.s != s {
		return fmt.Errorf("memstore: schedule: %w", ErrTxDone)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	at := due.At
	if at.IsZero() {
		at = s.now.Now().Add(max(due.After, 0))
	}
	for _, m := range msgs {
		m.OccurredAt = m.OccurredAt.Truncate(time.Microsecond).UTC()
		s.seq++
		tx.scheduled = append(tx.scheduled, &scheduled{seq: s.seq, msg: cloneMessage(m), due: at.Truncate(time.Microsecond)})
	}
	return nil
}

// Cancel implements [store.Scheduler]. The message is held for tx until
// it commits (its release waits) or rolls back.
func (s *Store) Cancel(ctx context.Context, tx *Tx, id uuid.UUID) error {
	if tx == nil || tx.done || tx.s != s {
		return fmt.Errorf("memstore: cancel: %w", ErrTxDone)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.schedule, func(sc *scheduled) bool { return sc.msg.ID == id })
	switch {
	case i < 0 || s.schedule[i].cancel != nil && s.schedule[i].cancel != tx:
		return fmt.Errorf("memstore: cancel %s: %w", id, store.ErrNotScheduled)
	case !s.schedule[i].released.IsZero():
		return fmt.Errorf("memstore: cancel %s: %w", id, store.ErrAlreadyDue)
	}
	s.schedule[i].cancel = tx
	tx.cancels = append(tx.cancels, s.schedule[i])
	return nil
}

// commitSchedule applies tx's scheduling and cancels, under s.mu.
func (s *Store) commitSchedule(tx *Tx, now time.Time) {
	for _, sc := range tx.cancels {
		s.schedule = slices.DeleteFunc(s.schedule, func(o *scheduled) bool { return o == sc })
	}
	for _, sc := range tx.scheduled {
		sc.created = now
		s.schedule = append(s.schedule, sc)
	}
}

// rollbackSchedule withdraws tx's cancels, under s.mu.
func (s *Store) rollbackSchedule(tx *Tx) {
	for _, sc := range tx.cancels {
		sc.cancel = nil
	}
}

// Release implements [store.Releaser]: due messages become pending rows,
// in due order, as if committed now.
func (s *Store) Release(ctx context.Context, limit int) (store.Released, error) {
	if err := ctx.Err(); err != nil {
		return store.Released{}, fmt.Errorf("memstore: release: %w", err)
	}
	s.mu.Lock()
	now := s.now.Now()
	var due []*scheduled
	for _, sc := range s.schedule {
		if sc.released.IsZero() && sc.cancel == nil && !sc.due.After(now) {
			due = append(due, sc)
		}
	}
	slices.SortFunc(due, func(a, b *scheduled) int { return cmp.Or(a.due.Compare(b.due), cmp.Compare(a.seq, b.seq)) })
	due = due[:min(len(due), limit)]
	for _, sc := range due {
		sc.released = now
		s.seq++
		m := cloneMessage(sc.msg)
		m.OccurredAt = sc.due.UTC() // a scheduled message occurs at its due time
		s.rows = append(s.rows, &row{rec: store.Record{Seq: s.seq, Message: m}, createdAt: now})
		sc.msg.Payload, sc.msg.Headers = nil, nil
	}
	r := store.Released{Count: len(due)}
	if next, ok := s.nextDue(); ok {
		r.Waiting, r.Next = true, next.Sub(now)
	}
	notifiers := slices.Clone(s.notifiers)
	s.mu.Unlock()
	if len(due) > 0 {
		for _, n := range notifiers {
			n.Signal()
		}
	}
	return r, nil
}

// nextDue returns the earliest due time of a waiting message, under s.mu.
func (s *Store) nextDue() (time.Time, bool) {
	var next time.Time
	for _, sc := range s.schedule {
		if sc.released.IsZero() && (next.IsZero() || sc.due.Before(next)) {
			next = sc.due
		}
	}
	return next, !next.IsZero()
}

// Scheduled returns the messages that wait, in due order (then scheduling
// order).
func (s *Store) Scheduled() []store.ScheduledMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.ScheduledMessage
	waiting := slices.Clone(s.schedule)
	slices.SortFunc(waiting, func(a, b *scheduled) int { return cmp.Or(a.due.Compare(b.due), cmp.Compare(a.seq, b.seq)) })
	for _, sc := range waiting {
		if sc.released.IsZero() {
			m := sc.msg
			out = append(out, store.ScheduledMessage{ID: m.ID, Topic: m.Topic, Key: m.Key, Type: m.Type,
				Size: int64(len(m.Payload)), Due: sc.due.UTC(), Created: sc.created.UTC()})
		}
	}
	return out
}

// scheduledStatus reports the waiting messages at now, under s.mu.
func (s *Store) scheduledStatus(now time.Time) store.ScheduledStatus {
	var st store.ScheduledStatus
	for _, sc := range s.schedule {
		if !sc.released.IsZero() {
			continue
		}
		st.Waiting.N++
		if !sc.due.After(now) {
			st.Due++
		}
		if st.NextDue.IsZero() || sc.due.Before(st.NextDue) {
			st.NextDue = sc.due.UTC()
		}
	}
	return st
}
