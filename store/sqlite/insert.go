package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"

	sqlite3 "modernc.org/sqlite/lib"
)

const insertColumns = "message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at"

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
		var q strings.Builder
		q.WriteString("INSERT INTO courier_outbox (" + insertColumns + ") VALUES ")
		args := make([]any, 0, len(chunk)*10)
		for i := range chunk {
			m := &chunk[i]
			h := columns.HeadersText(m.Headers)
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
			args = append(args, m.ID.String(), m.Topic, m.Key, m.Type, m.Version, m.ContentType, columns.Payload(m.Payload), h,
				m.OccurredAt.UnixMicro(), now)
		}
		if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
			return insertError(fmt.Errorf("sqlite: insert %d outbox messages: %w", len(chunk), err))
		}
	}
	return nil
}

// insertError adds the fix to an insert that failed because the outbox
// table does not exist. The statement is fixed, so SQLite's plain
// SQLITE_ERROR (its code for "no such table" and "no such column") can only
// mean that the schema is missing or behind.
func insertError(err error) error {
	if errorCode(err) == sqlite3.SQLITE_ERROR {
		return store.MissingSchema(err, "sqlite.Migrate")
	}
	return err
}
