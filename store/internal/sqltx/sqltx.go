// Package sqltx holds the database/sql transaction helpers every dialect
// shares: running a function in a transaction that is always ended, and
// statements written with ? placeholders for drivers that number theirs.
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

// Exec runs query in tx and returns the number of rows it affected.
func Exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (int64, error) {
	res, err := tx.ExecContext(ctx, query, args...)
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

// DB is the database/sql part every dialect's Driver shares: the methods
// that need only the *sql.DB and take ? placeholders as they are. A dialect
// embeds it through an unexported alias, so its Driver gains the methods
// and no exported field.
type DB struct {
	// SQL is the database.
	SQL *sql.DB
	// Prefix starts the errors of begin and commit, such as "mysql: ".
	Prefix string
}

// Ping checks that the database answers.
func (d DB) Ping(ctx context.Context) error { return d.SQL.PingContext(ctx) }

// Rebind returns query as it is: the driver takes ? placeholders.
func (DB) Rebind(query string) string { return query }

// InTx runs fn in a transaction of the database (see [InTx]).
func (d DB) InTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return InTx(ctx, d.SQL, nil, d.Prefix, fn)
}

// Exec runs query in tx and returns the rows it affected.
func (DB) Exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (int64, error) {
	return Exec(ctx, tx, query, args...)
}

// QueryRow runs query in tx and scans its row into dest.
func (DB) QueryRow(ctx context.Context, tx *sql.Tx, query string, dest []any, args ...any) error {
	return QueryRow(ctx, tx, query, dest, args...)
}
