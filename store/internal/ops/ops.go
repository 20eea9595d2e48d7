package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/courier-go/courier/store"
)

// DB runs the statements of one database.
type DB interface {
	// Query runs query and calls row for each row with a function that
	// scans it.
	Query(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error
	// Exec runs a statement and returns the rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// Tx runs fn in a transaction, committing it when fn returns nil.
	Tx(ctx context.Context, fn func(DB) error) error
}

// Codec writes and reads one kind of time column.
type Codec struct {
	// Encode returns t as an argument for the column.
	Encode func(t time.Time) any
	// Dest returns a scan destination storing the column in *t, and
	// leaving it zero for NULL.
	Dest func(t *time.Time) any
}

// Dialect is what differs between the dialects.
type Dialect struct {
	// Name prefixes errors, e.g. "mysql".
	Name string
	// DB runs the statements.
	DB DB
	// Clock is the store's clock; nil reads the database's with NowSQL
	// (or this process's when NowSQL is empty).
	Clock store.Clock
	// NowSQL selects the database's clock, e.g. "SELECT now()".
	NowSQL string
	// Time is the codec of the outbox's, the inbox's and the keys' time
	// columns; SagaTime that of the sagas' (Unix microseconds on MySQL and
	// SQLite).
	Time, SagaTime Codec
	// LeaseRows is the expression counting a lease row's ids, e.g.
	// "cardinality(ids)".
	LeaseRows string
	// LeasedByTopic selects (topic, leased rows) of the leases live at its
	// one parameter.
	LeasedByTopic string
	// Estimate selects the database's estimate of the rows of the table
	// named by its one parameter; empty when there is none.
	Estimate string
	// OrderedTimes is true when the time columns of the published copies
	// and the inbox markers have B-tree indexes, so that their oldest row
	// is cheap to find.
	OrderedTimes bool
	// Delete returns the statement deleting one batch of table's rows
	// whose col is in [?, ?) (when from, else below ?) up to ? rows,
	// oldest first. When returning, it selects (deleted, newest col
	// deleted) instead of affecting rows. key names the columns that
	// identify a row, for dialects that need them.
	Delete func(table, col, key string, from bool) (query string, returning bool)
	// TrimSettings, when set, runs first in a batch's transaction (e.g.
	// planner settings for the batch's statement).
	TrimSettings string
	// Slots selects the database's logical replication slots, as
	// store.ReplicationSlot's fields in their order (name, plugin, active,
	// active pid, wal status, lag bytes, retained bytes, lag seconds; the
	// pid and the seconds NULL when unknown), by name; empty when the
	// database has none.
	Slots string
	// TryLock takes the named maintenance lock, as store.Operations does.
	TryLock func(ctx context.Context, name string) (release func(), ok bool, err error)
}

// Ops is the store.Operations of a Dialect.
type Ops struct{ d Dialect }

var _ store.Operations = Ops{}

// New returns the operations of d's database.
func New(d Dialect) Ops { return Ops{d} }

func (o Ops) errorf(format string, args ...any) error {
	return fmt.Errorf(o.d.Name+": "+format, args...)
}

// now reads the store's clock.
func (o Ops) now(ctx context.Context) (time.Time, error) {
	if o.d.Clock != nil {
		return o.d.Clock().UTC().Truncate(time.Microsecond), nil
	}
	if o.d.NowSQL == "" {
		return time.Now().UTC().Truncate(time.Microsecond), nil
	}
	var now time.Time
	err := o.d.DB.Query(ctx, o.d.NowSQL, nil, func(scan func(...any) error) error { return scan(o.d.Time.Dest(&now)) })
	if err != nil {
		return now, o.errorf("read the clock: %w", err)
	}
	return now.UTC(), nil
}

// one runs a query of one row.
func (o Ops) one(ctx context.Context, query string, args []any, dest ...any) error {
	found := false
	err := o.d.DB.Query(ctx, query, args, func(scan func(...any) error) error {
		found = true
		return scan(dest...)
	})
	if err == nil && !found {
		err = errors.New("no row")
	}
	return err
}

// count counts the rows of table that where selects (a condition, or
// "1 = 1"). Where the database keeps an estimate of the table's rows and
// it exceeds store.CountLimit, that estimate less minus is the count, read
// without touching the table; otherwise the rows are counted, reading at
// most store.CountLimit+1 of them (and the count is store.CountLimit, a
// lower bound marked as an estimate, when there are more).
func (o Ops) count(ctx context.Context, table, where string, args []any, minus int64) (store.Count, error) {
	if o.d.Estimate != "" {
		var est int64
		if err := o.one(ctx, o.d.Estimate, []any{table}, &est); err != nil {
			return store.Count{}, err
		}
		if est-minus > store.CountLimit {
			return store.Count{N: est - minus, Estimated: true}, nil
		}
	}
	var n int64
	q := `SELECT count(*) FROM (SELECT 1 AS one FROM ` + table + ` WHERE ` + where + ` LIMIT ` + fmt.Sprint(store.CountLimit+1) + `) AS c`
	if err := o.one(ctx, q, args, &n); err != nil {
		return store.Count{}, err
	}
	if n > store.CountLimit {
		return store.Count{N: store.CountLimit, Estimated: true}, nil
	}
	return store.Count{N: n}, nil
}
