package openset_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-go/courier/internal/openset"
)

// value is what the test sets open: it knows its key and whether it was
// closed.
type value struct {
	key    string
	closed atomic.Bool
}

// opener opens and closes values, recording both.
type opener struct {
	t    *testing.T
	fail func(key string) error // an Open's error; nil: none
	gate chan struct{}          // when set, Open waits for it to close

	mu     sync.Mutex
	opened []string
	closed []string
	open   int // values opened and not closed yet
	most   int // the most open at once
}

func (o *opener) set(maxOpen int) *openset.Set[string, *value] {
	return openset.New(openset.Config[string, *value]{Open: o.Open, Close: o.Close, MaxOpen: maxOpen})
}

func (o *opener) Open(ctx context.Context, key string) (*value, error) {
	if o.gate != nil {
		select {
		case <-o.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.opened = append(o.opened, key)
	if o.fail != nil {
		if err := o.fail(key); err != nil {
			return nil, err
		}
	}
	o.open++
	o.most = max(o.most, o.open)
	return &value{key: key}, nil
}

func (o *opener) Close(v *value) {
	if v.closed.Swap(true) {
		o.t.Errorf("value %s closed twice", v.key)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = append(o.closed, v.key)
	o.open--
}

// counts returns the keys opened and closed so far.
func (o *opener) counts() (opened, closed []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.opened), slices.Clone(o.closed)
}

// hold acquires key (as a scan's when scan is set) and checks its value.
func hold(t *testing.T, s *openset.Set[string, *value], key string, scan bool) *openset.Handle[string, *value] {
	t.Helper()
	h, err := s.Acquire(context.Background(), key, scan)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", key, err)
	}
	if h.Key() != key || h.Value().key != key || h.Value().closed.Load() {
		t.Fatalf("Acquire(%s) returned %s's value, closed %v", key, h.Value().key, h.Value().closed.Load())
	}
	return h
}

// use acquires key as hold does and releases it at once.
func use(t *testing.T, s *openset.Set[string, *value], key string, scan bool) {
	t.Helper()
	hold(t, s, key, scan).Release()
}

// holdLater acquires key in a goroutine, and sends its handle (nil when
// Acquire failed, which fails the test) once it has it.
func holdLater(t *testing.T, s *openset.Set[string, *value], key string) <-chan *openset.Handle[string, *value] {
	got := make(chan *openset.Handle[string, *value])
	go func() {
		h, err := s.Acquire(context.Background(), key, false)
		if err != nil {
			t.Errorf("Acquire(%s): %v", key, err)
		}
		got <- h
	}()
	return got
}

// useErr acquires key and releases it at once, and returns Acquire's
// error.
func useErr(s *openset.Set[string, *value], key string) error {
	h, err := s.Acquire(context.Background(), key, false)
	if err == nil {
		h.Release()
	}
	return err
}

// wantClosed fails unless exactly keys were closed, in that order.
func wantClosed(t *testing.T, o *opener, keys ...string) {
	t.Helper()
	if _, closed := o.counts(); !slices.Equal(closed, keys) {
		t.Fatalf("closed %v, want %v", closed, keys)
	}
}

// The bound holds while many goroutines acquire many keys at once, each
// key's value is shared by those acquiring it at once, and every value
// opened is closed once after CloseAll.
func TestBoundUnderConcurrentAcquire(t *testing.T) {
	const maxOpen, keys, workers, rounds = 3, 10, 16, 200
	o := &opener{t: t}
	s := o.set(maxOpen)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				key := fmt.Sprint((w + i) % keys)
				h, err := s.Acquire(context.Background(), key, i%3 == 0)
				if err != nil {
					t.Errorf("Acquire(%s): %v", key, err)
					return
				}
				if h.Value().key != key || h.Value().closed.Load() {
					t.Errorf("Acquire(%s) returned %s's value, closed %v", key, h.Value().key, h.Value().closed.Load())
				}
				if n := s.Len(); n > maxOpen {
					t.Errorf("Len is %d, MaxOpen %d", n, maxOpen)
				}
				h.Release()
			}
		})
	}
	wg.Wait()
	s.CloseAll()
	opened, closed := o.counts()
	if o.most > maxOpen {
		t.Errorf("%d values open at once, MaxOpen %d", o.most, maxOpen)
	}
	if len(closed) != len(opened) || o.open != 0 || s.Len() != 0 {
		t.Errorf("opened %d values, closed %d; Len %d", len(opened), len(closed), s.Len())
	}
	t.Logf("%d opens for %d acquires", len(opened), workers*rounds)
}

// At the bound, the value used least recently among those not held is
// closed for another.
func TestEvictsLeastRecentlyUsed(t *testing.T) {
	o := &opener{t: t}
	s := o.set(3)
	for _, k := range []string{"a", "b", "c", "a"} {
		use(t, s, k, false)
	}
	use(t, s, "d", false) // b is the least recently used
	wantClosed(t, o, "b")
	use(t, s, "c", false)
	use(t, s, "e", false) // a, then d, then c
	wantClosed(t, o, "b", "a")
	use(t, s, "b", false)
	wantClosed(t, o, "b", "a", "d")
	if !s.Has("c") || !s.Has("e") || !s.Has("b") || s.Has("a") || s.Len() != 3 {
		t.Fatalf("Has c, e, b: %v %v %v; a: %v; Len %d", s.Has("c"), s.Has("e"), s.Has("b"), s.Has("a"), s.Len())
	}
	if opened, _ := o.counts(); !slices.Equal(opened, []string{"a", "b", "c", "d", "e", "b"}) {
		t.Fatalf("opened %v", opened)
	}
}

// A scan's use does not count: a value a scan opened is closed before
// those used, and a scan of an open value leaves its place in line.
func TestScansEvictedFirst(t *testing.T) {
	o := &opener{t: t}
	s := o.set(2)
	use(t, s, "a", false)
	use(t, s, "b", true)  // opened by a scan, after a
	use(t, s, "c", false) // b goes, though a was used before it
	wantClosed(t, o, "b")
	use(t, s, "a", true) // a scan: a stays the least recently used
	use(t, s, "d", false)
	wantClosed(t, o, "b", "a")
	use(t, s, "c", true)
	use(t, s, "d", false)
	use(t, s, "e", false)
	wantClosed(t, o, "b", "a", "c")
}

// Every value held, an Acquire of another key waits for a release; when
// its context ends first it fails with the context's error.
func TestWaitsForAPlace(t *testing.T) {
	o := &opener{t: t}
	s := o.set(1)
	h := hold(t, s, "a", false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.Acquire(ctx, "b", false); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire(b) with a held and MaxOpen 1: %v, want the context's deadline", err)
	}
	got := make(chan error)
	go func() { got <- useErr(s, "b") }()
	select {
	case err := <-got:
		t.Fatalf("Acquire(b) returned (%v) with a held", err)
	case <-time.After(20 * time.Millisecond):
	}
	h.Release()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	wantClosed(t, o, "a")
}

// A value is closed once the last holder releases it, and not before; a
// value no one holds is not closed until it must be.
func TestClosesAfterLastRelease(t *testing.T) {
	o := &opener{t: t}
	s := o.set(1)
	h1 := hold(t, s, "a", false)
	h2 := hold(t, s, "a", true)
	if h1.Value() != h2.Value() {
		t.Fatal("two holders of a were given different values")
	}
	s.Remove("a")
	if s.Has("a") || s.Len() != 1 {
		t.Fatalf("after Remove(a) held: Has %v, Len %d; want false, 1", s.Has("a"), s.Len())
	}
	h1.Release()
	wantClosed(t, o)
	h2.Release()
	wantClosed(t, o, "a")
	if s.Len() != 0 {
		t.Fatalf("Len %d after the last release", s.Len())
	}
	use(t, s, "b", false)
	wantClosed(t, o, "a")
}

// A value removed while held still takes its place until released: with
// MaxOpen 1 the next Acquire of its key waits for the release, then opens
// it again.
func TestRemoveHeldClosesAfterRelease(t *testing.T) {
	o := &opener{t: t}
	s := o.set(1)
	h := hold(t, s, "a", false)
	s.Remove("a")
	s.Remove("a") // twice is once
	got := holdLater(t, s, "a")
	select {
	case <-got:
		t.Fatal("a opened again while its removed value was held, MaxOpen 1")
	case <-time.After(20 * time.Millisecond):
	}
	wantClosed(t, o)
	h.Release()
	h2 := <-got
	wantClosed(t, o, "a")
	if h2 == nil || h2.Value() == h.Value() || h2.Value().closed.Load() {
		t.Fatal("Acquire after Remove did not open a new value")
	}
	h2.Release()
	s.RemoveFunc(func(k string) bool { return k == "a" })
	wantClosed(t, o, "a", "a")
	if opened, _ := o.counts(); len(opened) != 2 {
		t.Fatalf("opened %v", opened)
	}
}

// CloseAll closes the values no one holds at once, the others on release,
// and fails every Acquire after it.
func TestCloseAll(t *testing.T) {
	o := &opener{t: t}
	s := o.set(3)
	use(t, s, "a", false)
	h := hold(t, s, "b", false)
	s.CloseAll()
	wantClosed(t, o, "a")
	if _, err := s.Acquire(context.Background(), "b", false); !errors.Is(err, openset.ErrClosed) {
		t.Fatalf("Acquire of a held key after CloseAll: %v, want ErrClosed", err)
	}
	if _, err := s.Acquire(context.Background(), "c", false); !errors.Is(err, openset.ErrClosed) {
		t.Fatalf("Acquire after CloseAll: %v, want ErrClosed", err)
	}
	if s.Len() != 1 {
		t.Fatalf("Len %d with b held after CloseAll", s.Len())
	}
	h.Release()
	wantClosed(t, o, "a", "b")
	if opened, _ := o.counts(); !slices.Equal(opened, []string{"a", "b"}) || s.Len() != 0 {
		t.Fatalf("opened %v, Len %d", opened, s.Len())
	}
}

// An Acquire waiting for a place when CloseAll comes fails with ErrClosed.
func TestCloseAllWakesWaiters(t *testing.T) {
	o := &opener{t: t}
	s := o.set(1)
	h := hold(t, s, "a", false)
	waiting := make(chan error)
	go func() { waiting <- useErr(s, "b") }()
	time.Sleep(10 * time.Millisecond)
	s.CloseAll()
	if err := <-waiting; !errors.Is(err, openset.ErrClosed) {
		t.Fatalf("Acquire waiting for a place at CloseAll: %v, want ErrClosed", err)
	}
	wantClosed(t, o)
	h.Release()
	wantClosed(t, o, "a")
}

// An Open's error is that of every Acquire sharing the opening, takes no
// place, is not closed and is not kept: the next Acquire opens again.
func TestOpenErrorNotCached(t *testing.T) {
	broken := errors.New("broken")
	var failing atomic.Bool
	failing.Store(true)
	o := &opener{t: t, gate: make(chan struct{})}
	o.fail = func(string) error {
		if failing.Load() {
			return broken
		}
		return nil
	}
	s := o.set(1)
	const sharing = 4
	errs := make(chan error, sharing)
	for range sharing {
		go func() { errs <- useErr(s, "a") }()
	}
	for s.Len() == 0 { // the first Acquire is opening
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond) // the others join it
	close(o.gate)
	var failed int
	for range sharing {
		if err := <-errs; errors.Is(err, broken) {
			failed++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	opened, _ := o.counts()
	if failed != sharing {
		t.Fatalf("%d of %d Acquires failed, want all", failed, sharing)
	}
	t.Logf("%d Acquires shared %d failed opens", sharing, len(opened))
	if s.Has("a") || s.Len() != 0 {
		t.Fatalf("after a failed open: Has %v, Len %d", s.Has("a"), s.Len())
	}
	failing.Store(false)
	use(t, s, "a", false)
	use(t, s, "b", false)
	wantClosed(t, o, "a")
	if again, _ := o.counts(); len(again) != len(opened)+2 {
		t.Fatalf("opened %v after %v", again, opened)
	}
}

// An Acquire whose context ends while another opens its key's value
// fails, and lets the value be.
func TestContextEndsWhileOpening(t *testing.T) {
	o := &opener{t: t, gate: make(chan struct{})}
	s := o.set(1)
	done := holdLater(t, s, "a")
	for s.Len() == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := s.Acquire(ctx, "a", false); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire(a) while a opens, its context ended: %v", err)
	}
	close(o.gate)
	h := <-done
	if h == nil || h.Value().closed.Load() {
		t.Fatal("the opening Acquire did not get a's value")
	}
	h.Release()
	wantClosed(t, o)
}

// New refuses a configuration without Open or with no place.
func TestNewPanics(t *testing.T) {
	for _, cfg := range []openset.Config[string, int]{
		{MaxOpen: 1},
		{Open: func(context.Context, string) (int, error) { return 0, nil }},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%+v) did not panic", cfg)
				}
			}()
			openset.New(cfg)
		}()
	}
}
