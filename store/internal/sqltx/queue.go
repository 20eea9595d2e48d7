package sqltx

import "context"

// Queue lines up transactions of this process on a database that runs one
// writer at a time (SQLite): each starts as soon as the previous one ends,
// instead of polling for the write lock through the database's busy
// handler, which sleeps between tries and leaves the lock idle meanwhile.
// Goroutines blocked on a channel send are served in arrival order. The
// zero Queue is not usable: make one with [NewQueue].
type Queue chan struct{}

// NewQueue returns an empty Queue.
func NewQueue() Queue { return make(Queue, 1) }

// Wait waits for the turn, or returns ctx's error when ctx ends first. A
// successful Wait must be followed by one Done.
func (q Queue) Wait(ctx context.Context) error {
	select {
	case q <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done ends the turn a Wait took.
func (q Queue) Done() { <-q }

// Run calls fn in its turn, or returns ctx's error when ctx ends first.
func (q Queue) Run(ctx context.Context, fn func() error) error {
	if err := q.Wait(ctx); err != nil {
		return err
	}
	defer q.Done()
	return fn()
}
