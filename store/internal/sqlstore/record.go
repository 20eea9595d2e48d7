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
var RecordColumns = `id, attempts, ` + columns.Names

// ScanRecord reads a claimed row of RecordColumns, whose times t decodes.
func ScanRecord(row interface{ Scan(...any) error }, t Times) (store.Record, error) {
	var r store.Record
	dests := make([]any, 0, 2+len(columns.Message))
	dests = columns.AppendSQLDests(append(dests, &r.Seq, &r.Attempts), &r.Message, t.dest)
	if err := row.Scan(dests...); err != nil {
		return r, err
	}
	return r, columns.DecodeSQL(&r.Message, dests, "row", r.Seq)
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
