package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqltx"
)

var insertOne = "INSERT INTO courier_outbox (" + columns.Names + ") VALUES (" + columns.Params(1) + ")"

// insertMany takes one array per column, so the statement text (and its
// cached plan) is the same whatever the number of messages.
var insertMany = "INSERT INTO courier_outbox (" + columns.Names + ") SELECT * FROM unnest(" + columns.Unnest(1) + ")"

// Pgx returns the outbox inserter for pgx transactions (pgx.Tx), to pass to
// outbox.New. It is also their store.Scheduler: scheduled messages are due
// by the server's clock.
func Pgx() store.Inserter[pgx.Tx] { return pgxInserter{} }

// pgxInserter writes messages in pgx transactions, and schedules them.
type pgxInserter struct{ pgxScheduler }

func (pgxInserter) Insert(ctx context.Context, tx pgx.Tx, msgs []courier.Message) error {
	var err error
	if len(msgs) == 1 {
		_, err = tx.Exec(ctx, insertOne, columns.AppendPgx(make([]any, 0, len(columns.Message)), &msgs[0])...)
	} else {
		_, err = tx.Exec(ctx, insertMany, columns.Arrays(len(msgs), func(i int) *courier.Message { return &msgs[i] })...)
	}
	return migrations.InsertError(err, len(msgs), errorCode(err) == undefinedTable)
}

// QueueMessages validates msgs against limits (zero fields: Courier's
// defaults) and queues their insertion into b, a batch the caller sends in its
// own transaction together with its business statements, so the change and
// its messages travel to the database in one round trip:
//
//	var b pgx.Batch
//	b.Queue("INSERT INTO orders (id, total) VALUES ($1, $2)", id, total)
//	if err := postgres.QueueMessages(&b, courier.Limits{}, msg); err != nil { … }
//	if err := tx.SendBatch(ctx, &b).Close(); err != nil { … }
//	return tx.Commit(ctx)
//
// The outbox.Writer costs one more round trip per transaction; this is for
// the write paths where that matters. Nothing is queued when a message is
// invalid.
func QueueMessages(b *pgx.Batch, limits courier.Limits, msgs ...courier.Message) error {
	if err := validate(limits, msgs); err != nil {
		return err
	}
	for i := range msgs {
		b.Queue(insertOne, columns.AppendPgx(make([]any, 0, len(columns.Message)), &msgs[i])...)
	}
	return nil
}

// validate checks each of msgs against limits, naming the first invalid
// one, for the functions that queue messages into the caller's batch
// (outbox.Writer validates those the inserters get).
func validate(limits courier.Limits, msgs []courier.Message) error {
	for i := range msgs {
		if err := msgs[i].Validate(limits); err != nil {
			return fmt.Errorf("postgres: message %d of %d: %w", i+1, len(msgs), err)
		}
	}
	return nil
}

// DatabaseSQL returns the outbox inserter for database/sql transactions on
// PostgreSQL (*sql.Tx from pgx's stdlib driver, lib/pq, or the transaction
// GORM, sqlx, bun or ent hand you), to pass to outbox.New. It is also their
// store.Scheduler: scheduled messages are due by the server's clock.
func DatabaseSQL() store.Inserter[*sql.Tx] { return sqlInserter{} }

// sqlInserter writes messages in database/sql transactions, and schedules
// them.
type sqlInserter struct{ sqlScheduler }

// sqlChunk keeps each statement well under PostgreSQL's 65535 parameters.
const sqlChunk = 1000

func (sqlInserter) Insert(ctx context.Context, tx *sql.Tx, msgs []courier.Message) error {
	for start := 0; start < len(msgs); start += sqlChunk {
		chunk := msgs[start:min(start+sqlChunk, len(msgs))]
		q, args := columns.Insert(chunk, func(t time.Time) any { return t }, "", "")
		_, err := tx.ExecContext(ctx, sqltx.Dollar(q), args...)
		if err := migrations.InsertError(err, len(chunk), errorCode(err) == undefinedTable); err != nil {
			return err
		}
	}
	return nil
}
