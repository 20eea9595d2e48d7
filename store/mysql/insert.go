package mysql

import (
	"context"
	"database/sql"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
)

// DatabaseSQL returns the outbox inserter for database/sql transactions on
// MySQL or MariaDB (*sql.Tx from github.com/go-sql-driver/mysql, also the one
// GORM, sqlx, bun or ent hand you), to pass to outbox.New. created_at is the
// server's UTC_TIMESTAMP(6).
func DatabaseSQL() store.Inserter[*sql.Tx] { return sqlInserter{} }

type sqlInserter struct{}

// A statement carries at most chunkRows messages and, beyond its first
// message, at most chunkBytes of payloads and headers, so it stays within
// the smallest max_allowed_packet in use (4 MiB on old servers) even when
// the DSN sets interpolateParams.
const (
	chunkRows  = 500
	chunkBytes = 1 << 20
)

func (sqlInserter) Insert(ctx context.Context, tx *sql.Tx, msgs []courier.Message) error {
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
		if err := insertChunk(ctx, tx, msgs[start:end]); err != nil {
			return err
		}
		start = end
	}
	return nil
}

func insertChunk(ctx context.Context, tx *sql.Tx, chunk []courier.Message) error {
	q, args := columns.Insert(chunk, times.Encode, ", created_at", "(?, ?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6))")
	_, err := tx.ExecContext(ctx, q, args...)
	return migrations.InsertError(err, len(chunk), errorNumber(err) == errNoSuchTable)
}
