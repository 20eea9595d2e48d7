package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// RecordColumns are the outbox columns [ScanRecord] reads, in its order.
const RecordColumns = `id, attempts, message_id, topic, ordering_key, type, version,
       content_type, payload, headers, occurred_at`

// ScanRecord reads a claimed row of RecordColumns, whose times t decodes.
func ScanRecord(row interface{ Scan(...any) error }, t Times) (store.Record, error) {
	var (
		r       store.Record
		m       = &r.Message
		headers []byte
	)
	if err := row.Scan(&r.Seq, &r.Attempts, &m.ID, &m.Topic, &m.Key, &m.Type, &m.Version,
		&m.ContentType, &m.Payload, &headers, t.Dest(&m.OccurredAt)); err != nil {
		return r, err
	}
	m.Payload = columns.Payload(m.Payload)
	return r, columns.DecodeJSON(headers, &m.Headers, "headers of row", r.Seq)
}

// ReadRecords runs query, a SELECT of RecordColumns, on q and returns its
// rows, of which there are at most n, decoded with t.
func ReadRecords(ctx context.Context, q sqltx.Conn, t Times, n int, query string, args ...any) ([]store.Record, error) {
	recs := make([]store.Record, 0, n)
	err := sqltx.QueryEach(ctx, q, query, args, func(rows *sql.Rows) error {
		r, err := ScanRecord(rows, t)
		recs = append(recs, r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read rows: %w", err)
	}
	return recs, nil
}
