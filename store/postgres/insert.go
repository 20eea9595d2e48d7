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

const insertOne = "INSERT INTO courier_outbox (" + columns.Names + ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"

// insertMany takes one array per column, so the statement text (and its
// cached plan) is the same whatever the number of messages.
const insertMany = "INSERT INTO courier_outbox (" + columns.Names + ") " +
	"SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::int[], $6::text[], $7::bytea[], $8::jsonb[], $9::timestamptz[])"

// Pgx returns the outbox inserter for pgx transactions (pgx.Tx), to pass to
// outbox.New. It is also their store.Scheduler: scheduled messages are due
// by the server's clock.
func Pgx() store.Inserter[pgx.Tx] { return pgxInserter{} }

// pgxInserter writes messages in pgx transactions, and schedules them.
type pgxInserter struct{ pgxScheduler }

func (pgxInserter) Insert(ctx context.Context, tx pgx.Tx, msgs []courier.Message) error {
	if len(msgs) == 1 {
		m := &msgs[0]
		h := columns.HeadersJSON(m.Headers)
		_, err := tx.Exec(ctx, insertOne, [16]byte(m.ID), m.Topic, m.Key, m.Type, m.Version, m.ContentType, columns.Payload(m.Payload), h, m.OccurredAt)
		return migrations.InsertError(err, 1, errorCode(err) == undefinedTable)
	}
	var (
		// [16]byte, not uuid.UUID or string: those reach pgx as strings,
		// which fail binary encoding (building an error per element)
		// before the text encoding is tried.
		ids      = make([][16]byte, len(msgs))
		topics   = make([]string, len(msgs))
		keys     = make([]string, len(msgs))
		types    = make([]string, len(msgs))
		versions = make([]int32, len(msgs))
		cts      = make([]string, len(msgs))
		payloads = make([][]byte, len(msgs))
		headers  = make([]*string, len(msgs))
		times    = make([]time.Time, len(msgs))
	)
	for i := range msgs {
		m := &msgs[i]
		h := columns.HeadersJSON(m.Headers)
		if h != nil {
			s := string(h)
			headers[i] = &s
		}
		ids[i], topics[i], keys[i], types[i] = [16]byte(m.ID), m.Topic, m.Key, m.Type
		versions[i], cts[i], payloads[i], times[i] = int32(m.Version), m.ContentType, columns.Payload(m.Payload), m.OccurredAt
	}
	_, err := tx.Exec(ctx, insertMany, ids, topics, keys, types, versions, cts, payloads, headers, times)
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
		m := &msgs[i]
		h := columns.HeadersJSON(m.Headers)
		b.Queue(insertOne, [16]byte(m.ID), m.Topic, m.Key, m.Type, m.Version, m.ContentType, columns.Payload(m.Payload), h, m.OccurredAt)
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
		q, args := columns.Insert(chunk, func(t time.Time) any { return t }, "", "(?, ?, ?, ?, ?, ?, ?, ?, ?)")
		_, err := tx.ExecContext(ctx, sqltx.Dollar(q), args...)
		if err := migrations.InsertError(err, len(chunk), errorCode(err) == undefinedTable); err != nil {
			return err
		}
	}
	return nil
}
