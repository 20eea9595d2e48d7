package ops

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/courier-go/courier/store/internal/sqltx"
)

// SQL is a DB on database/sql. Begin, when set, runs a transaction the
// dialect's way (SQLite's BEGIN IMMEDIATE); otherwise a default
// transaction of the pool runs it.
type SQL struct {
	C     sqltx.Conn
	DB    *sql.DB
	Begin func(ctx context.Context, fn func(sqltx.Conn) error) error
}

var _ DB = SQL{}

// Query implements DB.
func (s SQL) Query(ctx context.Context, query string, args []any, row func(scan func(...any) error) error) error {
	return sqltx.QueryEach(ctx, s.conn(), query, args, func(rows *sql.Rows) error { return row(rows.Scan) })
}

// Exec implements DB.
func (s SQL) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	return sqltx.Exec(ctx, s.conn(), query, args...)
}

func (s SQL) conn() sqltx.Conn {
	if s.C != nil {
		return s.C
	}
	return s.DB
}

// Tx implements DB.
func (s SQL) Tx(ctx context.Context, fn func(DB) error) error {
	if s.Begin != nil {
		return s.Begin(ctx, func(c sqltx.Conn) error { return fn(SQL{C: c}) })
	}
	return sqltx.InTx(ctx, s.DB, nil, "", func(tx *sql.Tx) error { return fn(SQL{C: tx}) })
}

// Times is the codec of time columns that the driver reads as time.Time
// and writes from one (PostgreSQL's timestamptz).
var Times = Codec{
	Encode: func(t time.Time) any { return t },
	Dest:   func(t *time.Time) any { return &timeDest{t} },
}

type timeDest struct{ t *time.Time }

func (d *timeDest) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		return nil
	case time.Time:
		*d.t = v.UTC()
		return nil
	default:
		return fmt.Errorf("cannot read %T as a time", src)
	}
}
