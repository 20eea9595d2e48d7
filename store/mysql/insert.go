package mysql

import (
	"context"
	"database/sql"
	"iter"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqlstore"
)

// DatabaseSQL returns the outbox inserter for database/sql transactions on
// MySQL or MariaDB (*sql.Tx from github.com/go-sql-driver/mysql, also the one
// GORM, sqlx, bun or ent hand you), to pass to outbox.New. created_at is the
// server's UTC_TIMESTAMP(6). It is also their store.Scheduler: scheduled
// messages are due by the server's clock.
func DatabaseSQL() store.Inserter[*sql.Tx] { return inserter(nil) }

// inserter returns the inserter that schedules on clock (nil: the
// server's).
func inserter(clock store.Clock) store.Inserter[*sql.Tx] {
	return sqlInserter{dialect(nil, clock).Schedules()}
}

// sqlInserter writes messages in database/sql transactions, and schedules
// them.
type sqlInserter struct{ schedules sqlstore.Schedules }

// A statement carries at most chunkRows messages and, beyond its first
// message, at most chunkBytes of payloads and headers, so it stays within
// the smallest max_allowed_packet in use (4 MiB on old servers) even when
// the DSN sets interpolateParams.
const (
	chunkRows  = 500
	chunkBytes = 1 << 20
)

func (sqlInserter) Insert(ctx context.Context, tx *sql.Tx, msgs []courier.Message) error {
	for chunk := range chunks(msgs) {
		if err := insertChunk(ctx, tx, chunk); err != nil {
			return err
		}
	}
	return nil
}

// Schedule implements store.Scheduler, a statement per chunk.
func (i sqlInserter) Schedule(ctx context.Context, tx *sql.Tx, due store.Due, msgs []courier.Message) error {
	for chunk := range chunks(msgs) {
		if err := i.schedules.Schedule(ctx, tx, due, chunk); err != nil {
			return err
		}
	}
	return nil
}

// Cancel implements store.Scheduler.
func (i sqlInserter) Cancel(ctx context.Context, tx *sql.Tx, id uuid.UUID) error {
	return i.schedules.Cancel(ctx, tx, id)
}

// chunks yields msgs a statement's worth at a time (chunkRows,
// chunkBytes).
func chunks(msgs []courier.Message) iter.Seq[[]courier.Message] {
	return func(yield func([]courier.Message) bool) {
		for start := 0; start < len(msgs); {
			end, size := start, 0
			for end < len(msgs) && end-start < chunkRows {
				m := &msgs[end]
				n := len(m.Payload)
				for k, v := range m.Headers {
					n += len(k) + len(v)
				}
				if end > start && size+n > chunkBytes {
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

func insertChunk(ctx context.Context, tx *sql.Tx, chunk []courier.Message) error {
	q, args := columns.Insert(chunk, times.Encode, ", created_at", ", UTC_TIMESTAMP(6)")
	_, err := tx.ExecContext(ctx, q, args...)
	return migrations.InsertError(err, len(chunk), errorNumber(err) == errNoSuchTable)
}
