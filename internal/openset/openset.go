// Package openset keeps a bounded set of values opened on demand by key,
// such as the tenants' databases by tenant, each shared by those using it
// at once. To open another value at the bound, the set closes the one used
// least recently among those no one holds, or waits for one to be
// released. A value is closed once: when it is removed (or evicted, or the
// set is closed) and the last one holding it releases it.
//
// Package tenant's Consumer and package dashboard's Tenants keep their
// tenants' databases in one.
package openset

import (
	"context"
	"errors"
	"sync"
)

// ErrClosed is the error of Acquire after CloseAll.
var ErrClosed = errors.New("openset: the set is closed")

// Config configures a Set: see New.
type Config[K comparable, V any] struct {
	// Open opens key's value, with the context of the Acquire that found
	// it not open, and without the set's lock held. Its error is that of
	// every Acquire waiting for this opening, and is not kept: the next
	// Acquire of key calls Open again. Required.
	Open func(ctx context.Context, key K) (V, error)
	// Close closes a value Open returned without an error, once no one
	// holds it, without the set's lock held. Optional.
	Close func(V)
	// MaxOpen bounds the values open or opening at once, those removed
	// but still held included. At least 1.
	MaxOpen int
}

// Set is a bounded set of values opened on demand by key. Build it with
// New; it is safe for concurrent use.
type Set[K comparable, V any] struct {
	open    func(ctx context.Context, key K) (V, error)
	close   func(V)
	maxOpen int

	mu      sync.Mutex
	entries map[K]*Handle[K, V]
	live    int           // values open or opening, removed ones still held included
	tick    int64         // counts uses, for least recently used
	freed   chan struct{} // closed, and replaced, when a place may have come free
	closed  bool          // by CloseAll
	closing []V           // to close once mu is unlocked
}

// Handle is a key's value, open, held by the Acquires that returned it:
// each releases it once, with Release.
type Handle[K comparable, V any] struct {
	s     *Set[K, V]
	key   K
	value V
	err   error         // why it did not open
	ready chan struct{} // closed once value or err is set
	refs  int           // holders, the Acquire opening it included
	used  int64         // the tick of its last use; lowest is closed first
	gone  bool          // removed from entries: closed once refs is 0
	held  bool          // counted in live: its value is open or opening
}

// New returns an empty set configured by cfg. It panics when cfg.Open is
// nil or cfg.MaxOpen is less than 1.
func New[K comparable, V any](cfg Config[K, V]) *Set[K, V] {
	if cfg.Open == nil || cfg.MaxOpen < 1 {
		panic("openset: New needs an Open function and a MaxOpen of 1 or more")
	}
	return &Set[K, V]{open: cfg.Open, close: cfg.Close, maxOpen: cfg.MaxOpen,
		entries: map[K]*Handle[K, V]{}, freed: make(chan struct{})}
}

// Acquire returns key's value, opened unless it is open or opening, held
// until the caller calls Release. At the bound, it first closes the value
// used least recently among those no one holds, or else waits for a place
// until ctx ends. A scan (a pass over many keys) does not count as a use:
// the value it opens is the first one closed for another, so that a pass
// over many keys keeps the others open. After CloseAll it fails with
// ErrClosed.
func (s *Set[K, V]) Acquire(ctx context.Context, key K, scan bool) (*Handle[K, V], error) {
	s.mu.Lock()
	for {
		if s.closed {
			s.unlock()
			return nil, ErrClosed
		}
		if h := s.entries[key]; h != nil {
			h.refs++
			s.touch(h, scan)
			s.unlock()
			select {
			case <-h.ready:
			case <-ctx.Done():
				h.Release()
				return nil, ctx.Err()
			}
			if h.err != nil {
				h.Release()
				return nil, h.err
			}
			return h, nil
		}
		if s.live >= s.maxOpen {
			s.remove(s.idlest())
		}
		if s.live < s.maxOpen {
			break
		}
		freed := s.freed
		s.unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		s.mu.Lock()
	}
	h := &Handle[K, V]{s: s, key: key, ready: make(chan struct{}), refs: 1, held: true}
	s.live++
	s.touch(h, scan)
	s.entries[key] = h
	s.unlock()

	v, err := s.open(ctx, key)
	s.mu.Lock()
	h.value, h.err = v, err
	if err != nil {
		s.remove(h)
	}
	close(h.ready)
	s.unlock()
	if err != nil {
		h.Release()
		return nil, err
	}
	return h, nil
}

// Key returns the key h's value was opened for.
func (h *Handle[K, V]) Key() K { return h.key }

// Value returns h's value, open until h is released.
func (h *Handle[K, V]) Value() V { return h.value }

// Release gives up the hold Acquire took. Once no one holds the value, it
// may be closed for another, and is closed at once when it was removed.
func (h *Handle[K, V]) Release() {
	s := h.s
	s.mu.Lock()
	h.refs--
	s.closeIfDone(h)
	if h.refs == 0 {
		s.notify()
	}
	s.unlock()
}

// Remove closes key's value, now when no one holds it, else once the last
// holder releases it. The next Acquire of key opens it again.
func (s *Set[K, V]) Remove(key K) {
	s.mu.Lock()
	s.remove(s.entries[key])
	s.unlock()
}

// RemoveFunc removes, as Remove does, the values whose key drop reports
// true. drop runs with the set's lock held: it must not call the set.
func (s *Set[K, V]) RemoveFunc(drop func(key K) bool) {
	s.mu.Lock()
	for key, h := range s.entries {
		if drop(key) {
			s.remove(h)
		}
	}
	s.unlock()
}

// Has reports whether key's value is open or opening, and not removed.
func (s *Set[K, V]) Has(key K) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.entries[key] != nil
}

// Len returns how many values are open or opening, those removed but
// still held included: at most Config.MaxOpen.
func (s *Set[K, V]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live
}

// CloseAll closes every value, each once no one holds it, and makes
// Acquire fail with ErrClosed from then on, those waiting for a place
// included.
func (s *Set[K, V]) CloseAll() {
	s.mu.Lock()
	s.closed = true
	for _, h := range s.entries {
		s.remove(h)
	}
	s.notify()
	s.unlock()
}

// touch records a use of h, unless it is a scan's. s.mu is held.
func (s *Set[K, V]) touch(h *Handle[K, V], scan bool) {
	if !scan {
		s.tick++
		h.used = s.tick
	}
}

// idlest returns the entry no one holds that was used least recently, nil
// when every entry is held. s.mu is held.
func (s *Set[K, V]) idlest() *Handle[K, V] {
	var idlest *Handle[K, V]
	for _, h := range s.entries {
		if h.refs == 0 && (idlest == nil || h.used < idlest.used) {
			idlest = h
		}
	}
	return idlest
}

// remove takes h (nil: none) out of the entries; its value is closed now
// when no one holds it, or else when the last holder releases it. s.mu is
// held.
func (s *Set[K, V]) remove(h *Handle[K, V]) {
	if h == nil || h.gone {
		return
	}
	h.gone = true
	if s.entries[h.key] == h {
		delete(s.entries, h.key)
	}
	s.closeIfDone(h)
}

// closeIfDone gives h's place up, and has its value closed once s.mu is
// unlocked, when h is removed and no one holds it. s.mu is held.
func (s *Set[K, V]) closeIfDone(h *Handle[K, V]) {
	if !h.gone || h.refs > 0 || !h.held {
		return
	}
	h.held = false
	s.live--
	if h.err == nil && s.close != nil {
		s.closing = append(s.closing, h.value)
	}
	s.notify()
}

// notify wakes those waiting for a place. s.mu is held.
func (s *Set[K, V]) notify() {
	close(s.freed)
	s.freed = make(chan struct{})
}

// unlock unlocks s.mu, then closes the values given up meanwhile.
func (s *Set[K, V]) unlock() {
	closing := s.closing
	s.closing = nil
	s.mu.Unlock()
	for _, v := range closing {
		s.close(v)
	}
}
