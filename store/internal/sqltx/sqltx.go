package sqltx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// InTx runs fn in a transaction on db begun with opts, commits it when fn
// returns nil and returns fn's error otherwise. Errors of begin and commit
// start with prefix (such as "mysql: "). The transaction is rolled back
// whenever it is not committed, also when fn panics: left open, it would
// keep its locks and its connection.
func InTx(ctx context.Context, db *sql.DB, opts *sql.TxOptions, prefix string, fn func(*sql.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("%sbegin: %w", prefix, err)
	}
	defer func() {
		if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) && err != nil {
			err = errors.Join(err, rerr)
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%scommit: %w", prefix, err)
	}
	return nil
}

// Exec runs query on q and returns the number of rows it affected.
func Exec(ctx context.Context, q Conn, query string, args ...any) (int64, error) {
	res, err := q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// QueryRow runs query in tx and scans its only row into dest.
func QueryRow(ctx context.Context, tx *sql.Tx, query string, dest []any, args ...any) error {
	return tx.QueryRowContext(ctx, query, args...).Scan(dest...)
}

// Dollar rewrites a statement written with ? placeholders into numbered
// ones ($1, $2, …), as PostgreSQL takes them. It does not look inside
// string literals: statements passed to it must not contain a literal ?.
func Dollar(query string) string {
	if !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Querier runs a query that returns one row; *sql.DB, *sql.Conn and *sql.Tx
// are Queriers.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Conn runs statements: *sql.DB, *sql.Conn and *sql.Tx are Conns.
type Conn interface {
	Querier
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Rows is what EachRow reads: *sql.Rows and pgx.Rows are Rows.
type Rows interface {
	Next() bool
	Err() error
}

// EachRow calls fn for each row of rows, until fn returns an error, and
// returns that error or the one rows ended with. The caller closes rows.
func EachRow[R Rows](rows R, fn func(R) error) error {
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// QueryEach runs a query on q and calls fn for each row, until fn returns
// an error.
func QueryEach(ctx context.Context, q Conn, query string, args []any, fn func(*sql.Rows) error) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return EachRow(rows, fn)
}
