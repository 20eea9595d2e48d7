package ops

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/courier-go/courier/store/internal/sqltx"
)

// Conn runs statements: *sql.DB, *sql.Conn and *sql.Tx are Conns.
type Conn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// SQL is a DB on database/sql. Begin, when set, runs a transaction the
// dialect's way (SQLite's BEGIN IMMEDIATE); otherwise a default
// transaction of the pool runs it.
type SQL struct {
	C     Conn
	DB    *sql.DB
	Begin func(ctx context.Context, fn func(Conn) error) error
}

var _ DB = SQL{}

// Query implements DB.
func (s SQL) Query(ctx context.Context, query string, args []any, row func(scan func(...any) error) error) error {
	rows, err := s.conn().QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Exec implements DB.
func (s SQL) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.conn().ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s SQL) conn() Conn {
	if s.C != nil {
		return s.C
	}
	return s.DB
}

// Tx implements DB.
func (s SQL) Tx(ctx context.Context, fn func(DB) error) error {
	if s.Begin != nil {
		return s.Begin(ctx, func(c Conn) error { return fn(SQL{C: c}) })
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
