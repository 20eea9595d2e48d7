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

// Held keys. A dead letter made by a failure with store.Failure.Hold holds
// its key: the Store keeps it in holds, by its id, and its key in holding.
// A claim treats a holding key as leased and moves the key's pending rows
// it meets out of rows, behind the dead letter (hold.held), so that they
// are neither claimed nor counted as pending. Replaying the dead letter
// puts it back into the outbox, then the rows held behind it, then its
// key's rows still pending, with new Seqs in that order; discarding it puts
// back the held rows, then the pending ones, the same way. Either releases
// the key.

// hold is a dead letter that holds its key, and the rows waiting behind it.
type hold struct {
	// cause is the dead letter's id.
	cause int64
	// key is the key it holds.
	key string
	// since is when it became a dead letter.
	since time.Time
	// held are the rows behind it, in Seq order.
	held []heldRow
}

// heldRow is a row moved behind a holding dead letter at heldAt.
type heldRow struct {
	*row
	heldAt time.Time
}

// holdKey makes the dead letter id of key hold the key, at now. A key
// holds behind one dead letter at a time: a key already held keeps its
// cause (its rows are never claimed meanwhile, so this does not happen).
func (s *Store) holdKey(id int64, key string, now time.Time) bool {
	if _, ok := s.holding[key]; ok {
		return false
	}
	if s.holds == nil {
		s.holds, s.holding = make(map[int64]*hold), make(map[string]int64)
	}
	s.holds[id] = &hold{cause: id, key: key, since: now.UTC()}
	s.holding[key] = id
	return true
}

// holdRows moves the pending rows of held keys behind their dead letters,
// at now. It costs nothing while no key is held.
func (s *Store) holdRows(now time.Time) {
	if len(s.holding) == 0 {
		return
	}
	s.rows = slices.DeleteFunc(s.rows, func(r *row) bool {
		cause, ok := s.holding[r.rec.Message.Key]
		if !ok {
			return false
		}
		h := s.holds[cause]
		h.held = append(h.held, heldRow{row: r, heldAt: now.UTC()})
		return true
	})
}

// deadIndex returns the position of dead letter id in s.dead, or -1.
func (s *Store) deadIndex(id int64) int {
	return slices.IndexFunc(s.dead, func(d store.DeadLetter) bool { return d.ID == id })
}

// ReplayDeadLetter moves dead letter id back into the outbox with no
// attempts counted, as store.Admin's does; store.ErrNotFound when there is
// none. A dead letter that does not hold its key takes its place back among
// its key's rows (its Seq). One that holds its key is put back, then the
// rows held behind it, then its key's pending rows, with new Seqs in that
// order, and the key is released: they are published in that order.
func (s *Store) ReplayDeadLetter(ctx context.Context, id int64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: replay dead letter %d: %w", id, err)
	}
	s.mu.Lock()
	i := s.deadIndex(id)
	if i < 0 {
		s.mu.Unlock()
		return fmt.Errorf("memstore: replay dead letter %d: %w", id, store.ErrNotFound)
	}
	d := s.dead[i]
	s.dead = slices.Delete(s.dead, i, i+1)
	r := &row{rec: store.Record{Seq: d.ID, Message: deadMessage(d)}, createdAt: d.CreatedAt}
	if h, ok := s.holds[id]; ok {
		s.release(h, r)
	} else {
		s.insertRow(r)
	}
	s.mu.Unlock()
	s.signal()
	return nil
}

// DiscardDeadLetter deletes dead letter id for good, as store.Admin's
// does; store.ErrNotFound when there is none. When it holds its key, the
// rows held behind it, then its key's pending rows, go back into the
// outbox with new Seqs in that order, and the key moves on.
func (s *Store) DiscardDeadLetter(ctx context.Context, id int64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: discard dead letter %d: %w", id, err)
	}
	s.mu.Lock()
	i := s.deadIndex(id)
	if i < 0 {
		s.mu.Unlock()
		return fmt.Errorf("memstore: discard dead letter %d: %w", id, store.ErrNotFound)
	}
	s.dead = slices.Delete(s.dead, i, i+1)
	h, ok := s.holds[id]
	if ok {
		s.release(h, nil)
	}
	s.mu.Unlock()
	if ok {
		s.signal()
	}
	return nil
}

// release ends hold h: first (the replayed dead letter, when not nil),
// then the rows held behind it, then its key's pending rows go back into
// the outbox with new Seqs in that order and no attempts.
func (s *Store) release(h *hold, first *row) {
	delete(s.holds, h.cause)
	delete(s.holding, h.key)
	var back []*row
	if first != nil {
		back = append(back, first)
	}
	for _, hr := range h.held {
		back = append(back, hr.row)
	}
	s.rows = slices.DeleteFunc(s.rows, func(r *row) bool {
		if r.rec.Message.Key != h.key {
			return false
		}
		back = append(back, r)
		return true
	})
	for _, r := range back {
		s.seq++
		r.rec.Seq, r.rec.Attempts = s.seq, 0
		r.retryAt, r.lastError, r.history = time.Time{}, "", nil
		s.rows = append(s.rows, r) // the largest Seq yet: s.rows stays in order
	}
}

// insertRow puts r among the pending rows in Seq order.
func (s *Store) insertRow(r *row) {
	i, _ := slices.BinarySearchFunc(s.rows, r.rec.Seq, func(r *row, seq int64) int { return cmp.Compare(r.rec.Seq, seq) })
	s.rows = slices.Insert(s.rows, i, r)
}

// signal tells the notifiers that rows arrived.
func (s *Store) signal() {
	s.mu.Lock()
	notifiers := slices.Clone(s.notifiers)
	s.mu.Unlock()
	for _, n := range notifiers {
		n.Signal()
	}
}

// holdStats fills st's counts of held keys.
func (s *Store) holdStats(st *store.Stats) {
	for _, h := range s.holds {
		st.HeldKeys++
		st.Held += int64(len(h.held))
		if st.OldestHold.IsZero() || h.since.Before(st.OldestHold) {
			st.OldestHold = h.since
		}
	}
}

// deadMessage is the message of dead letter d.
func deadMessage(d store.DeadLetter) courier.Message {
	id, _ := uuid.Parse(d.MessageID) // the store wrote it from a uuid.UUID
	return courier.Message{ID: id, Topic: d.Topic, Key: d.Key, Type: d.Type, Version: d.Version,
		ContentType: d.ContentType, Payload: d.Payload, Headers: d.Headers, OccurredAt: d.OccurredAt}
}
