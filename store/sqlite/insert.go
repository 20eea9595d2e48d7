package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
)

// DatabaseSQL returns the outbox inserter for database/sql transactions on
// SQLite (*sql.Tx, also the one GORM, sqlx, bun or ent hand you), to pass to
// outbox.New. created_at is the writing process's clock.
func DatabaseSQL() store.Inserter[*sql.Tx] { return sqlInserter{} }

type sqlInserter struct{}

// sqlChunk rows per statement keeps its parameters (10 a row) well under
// SQLite's limit of 32766.
const sqlChunk = 1000

func (sqlInserter) Insert(ctx context.Context, tx *sql.Tx, msgs []courier.Message) error {
	now := time.Now().UnixMicro()
	for start := 0; start < len(msgs); start += sqlChunk {
		chunk := msgs[start:min(start+sqlChunk, len(msgs))]
		q, args := columns.Insert(chunk, times.Encode, ", created_at", "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", now)
		_, err := tx.ExecContext(ctx, q, args...)
		if err := migrations.InsertError(err, len(chunk), isMissing(err)); err != nil {
			return err
		}
	}
	return nil
}
