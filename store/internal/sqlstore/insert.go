package sqlstore

import (
	"context"
	"database/sql"
	"iter"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
)

// Inserter is the outbox inserter (store.Inserter) and the scheduler
// (store.Scheduler) of a dialect's database/sql transactions: both write
// a statement per chunk of messages.
type Inserter struct {
	// Schedules schedules each chunk.
	Schedules Schedules
	// Rows and Bytes bound a chunk: at most Rows messages and, beyond its
	// first message, at most Bytes of payloads and headers (0: no bound).
	Rows, Bytes int
	// Created returns the SQL of an inserted row's created_at and its
	// arguments: "UTC_TIMESTAMP(6)", or "?" and the time.
	Created func() (string, []any)
	// InsertError returns nil for a nil err, else err, the error of
	// inserting n messages, with the fix when Courier's tables are missing.
	InsertError func(err error, n int) error
}

var (
	_ store.Inserter[*sql.Tx]  = Inserter{}
	_ store.Scheduler[*sql.Tx] = Inserter{}
)

// Insert implements store.Inserter, a statement per chunk.
func (i Inserter) Insert(ctx context.Context, tx *sql.Tx, msgs []courier.Message) error {
	created, args := i.Created()
	for chunk := range i.chunks(msgs) {
		q, args := columns.Insert(chunk, i.Schedules.d.Encode, ", created_at", ", "+created, args...)
		_, err := tx.ExecContext(ctx, q, args...)
		if err := i.InsertError(err, len(chunk)); err != nil {
			return err
		}
	}
	return nil
}

// Schedule implements store.Scheduler, a statement per chunk.
func (i Inserter) Schedule(ctx context.Context, tx *sql.Tx, due store.Due, msgs []courier.Message) error {
	for chunk := range i.chunks(msgs) {
		if err := i.Schedules.Schedule(ctx, tx, due, chunk); err != nil {
			return err
		}
	}
	return nil
}

// Cancel implements store.Scheduler.
func (i Inserter) Cancel(ctx context.Context, tx *sql.Tx, id uuid.UUID) error {
	return i.Schedules.Cancel(ctx, tx, id)
}

// chunks yields msgs a statement's worth at a time (Rows, Bytes).
func (i Inserter) chunks(msgs []courier.Message) iter.Seq[[]courier.Message] {
	return func(yield func([]courier.Message) bool) {
		for start := 0; start < len(msgs); {
			end, size := start, 0
			if i.Bytes == 0 {
				end = min(start+i.Rows, len(msgs))
			}
			for end < len(msgs) && end-start < i.Rows {
				m := &msgs[end]
				n := len(m.Payload)
				for k, v := range m.Headers {
					n += len(k) + len(v)
				}
				if i.Bytes > 0 && end > start && size+n > i.Bytes {
					break
				}
				size += n
				end++
			}
			if !yield(msgs[start:end]) {
				return
			}
			start = end
		}
	}
}
