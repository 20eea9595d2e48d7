package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqlstore"
)

// DatabaseSQL returns the outbox inserter for database/sql transactions on
// SQLite (*sql.Tx, also the one GORM, sqlx, bun or ent hand you), to pass to
// outbox.New. created_at is the writing process's clock. It is also their
// store.Scheduler: scheduled messages are due by the process's clock.
func DatabaseSQL() store.Inserter[*sql.Tx] { return inserter(nil) }

// inserter returns the inserter that schedules on clock (nil: the
// process's).
func inserter(clock store.Clock) store.Inserter[*sql.Tx] {
	return sqlInserter{dialect(nil, clock).Schedules()}
}

// sqlInserter writes messages in database/sql transactions, and schedules
// them.
type sqlInserter struct{ schedules sqlstore.Schedules }

// sqlChunk rows per statement keeps its parameters (10 a row) well under
// SQLite's limit of 32766.
const sqlChunk = 1000

func (sqlInserter) Insert(ctx context.Context, tx *sql.Tx, msgs []courier.Message) error {
	now := time.Now().UnixMicro()
	for start := 0; start < len(msgs); start += sqlChunk {
		chunk := msgs[start:min(start+sqlChunk, len(msgs))]
		q, args := columns.Insert(chunk, times.Encode, ", created_at", ", ?", now)
		_, err := tx.ExecContext(ctx, q, args...)
		if err := migrations.InsertError(err, len(chunk), isMissing(err)); err != nil {
			return err
		}
	}
	return nil
}

// Schedule implements store.Scheduler, sqlChunk messages a statement.
func (i sqlInserter) Schedule(ctx context.Context, tx *sql.Tx, due store.Due, msgs []courier.Message) error {
	for start := 0; start < len(msgs); start += sqlChunk {
		if err := i.schedules.Schedule(ctx, tx, due, msgs[start:min(start+sqlChunk, len(msgs))]); err != nil {
			return err
		}
	}
	return nil
}

// Cancel implements store.Scheduler.
func (i sqlInserter) Cancel(ctx context.Context, tx *sql.Tx, id uuid.UUID) error {
	return i.schedules.Cancel(ctx, tx, id)
}
