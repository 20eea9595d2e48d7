package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// Dialect is what differs between the dialects.
type Dialect struct {
	// Name prefixes errors, e.g. "mysql".
	Name string
	// DB is the pool every statement runs on.
	DB *sql.DB
	// InTx runs fn in a transaction of the inbox's or the idempotency
	// store's caller and commits it when fn returns nil.
	InTx func(ctx context.Context, fn func(*sql.Tx) error) error
	// WriteTx runs fn in a transaction that writes, as replaying a dead
	// letter does, and commits it when fn returns nil.
	WriteTx func(ctx context.Context, fn func(sqltx.Conn) error) error
	// HoldTx runs fn in a write transaction that claims wait for, as
	// replaying or discarding a dead letter that holds its key does, and
	// commits it when fn returns nil.
	HoldTx func(ctx context.Context, fn func(sqltx.Conn) error) error
	// LockRow ends a statement that reads a row the transaction then
	// changes, e.g. " FOR UPDATE"; empty where the transaction already
	// excludes other writers.
	LockRow string
	// IsDuplicate reports whether err is a duplicate-key error.
	IsDuplicate func(err error) bool
	// Now is the SQL of the current time in statements that record when
	// something happened: an expression such as "UTC_TIMESTAMP(6)" or a
	// placeholder "?" that NowArgs fills.
	Now string
	// NowArgs returns the arguments of Now; nil when Now takes none.
	NowArgs func() []any
	// Later returns the SQL of the time after from now, by the clock Now
	// reads, and its arguments.
	Later func(after time.Duration) (string, []any)
	// SkipLocked ends a locking read that passes over rows other
	// transactions hold, e.g. " FOR UPDATE SKIP LOCKED"; empty where the
	// transaction already excludes other writers.
	SkipLocked string
	// ReadLatest ends a read that must see the latest committed row rather
	// than the transaction's snapshot, e.g. " LOCK IN SHARE MODE"; empty
	// where every read does.
	ReadLatest string
	// WriteError returns nil for a nil err, else err, the error of what
	// ("schedule 3 messages"), with the fix when Courier's tables are
	// missing.
	WriteError func(err error, what string) error
	// HeaderValue returns the SQL of the first value of the header name
	// in the headers column of a parked delivery (a JSON object of arrays
	// of strings), NULL when there is none: MySQL's JSON_EXTRACT, whose
	// result JSON_UNQUOTE makes text; SQLite's json_extract, which makes
	// text itself and fails on text that is not JSON.
	HeaderValue func(name string) string
	// Times is the codec of time columns.
	Times
	// HoldKey is the condition on courier_inbox_holds that selects the
	// ordering key given as its one argument, along the table's key;
	// "ordering_key = ?" when empty.
	HoldKey string
	// CheckConsumer refuses a consumer name the schema cannot hold; nil
	// where any name fits.
	CheckConsumer func(consumer string) error
	// Stats reports the outbox's state.
	Stats func(ctx context.Context) (store.Stats, error)
	// MarkSQL inserts an inbox marker (consumer, message_id, then Now's
	// arguments) unless it exists, affecting one row when it inserts.
	MarkSQL string
	// MarkGroupSQL begins the statement that inserts the markers of a group
	// of messages unless they exist (store.GroupInbox): the rows follow,
	// each (consumer, message_id, Now), in the group's order.
	MarkGroupSQL string
	// MarkGroupReturning ends MarkGroupSQL with the clause that returns the
	// message_id of each marker it inserted; empty where the dialect has
	// none (MySQL), and then MarkGroup tells its markers from a concurrent
	// delivery's by the transaction's snapshot.
	MarkGroupReturning string
	// DeleteMarkersSQL deletes up to ?2 markers processed before ?1,
	// oldest first.
	DeleteMarkersSQL string
	// DeleteFailuresSQL deletes up to ?2 recorded failures from before
	// ?1, oldest first.
	DeleteFailuresSQL string
	// DeleteExpiredKeysSQL deletes up to a limit (its last argument)
	// idempotency records past their expiry; Now's arguments come first.
	DeleteExpiredKeysSQL string
	// ReplayFailed returns the statement that records a failed replay of
	// the parked delivery id, and its arguments: it clears
	// replay_requested, sets last_error to msg, counts the attempt and
	// appends {at, error} to the history.
	ReplayFailed func(id int64, msg string) (string, []any, error)
}

func (d Dialect) errorf(format string, args ...any) error {
	return fmt.Errorf(d.Name+": "+format, args...)
}

// Queued returns d whose InTx runs each transaction in its turn of q, so
// that the transactions of the stores made from it take turns in this
// process (see [sqltx.Queue]).
func (d Dialect) Queued(q sqltx.Queue) Dialect {
	inTx := d.InTx
	d.InTx = func(ctx context.Context, fn func(*sql.Tx) error) error {
		return q.Run(ctx, func() error { return inTx(ctx, fn) })
	}
	return d
}

// now returns Now's arguments.
func (d Dialect) now() []any {
	if d.NowArgs == nil {
		return nil
	}
	return d.NowArgs()
}

// The stores of a dialect's database. Each is a value: make them with the
// Dialect's methods of the same names.
type (
	// Admin is the operators' view (store.Admin) of a dialect's database.
	Admin struct{ d Dialect }
	// Consumers is the store of parked deliveries, failures and inbox markers
	// (store.ConsumerStore) of a dialect's database.
	Consumers struct{ d Dialect }
	// Inbox is the inbox (store.Inbox) for handlers that work in database/sql
	// transactions on a dialect's database.
	Inbox struct{ d Dialect }
	// Keys is the part of the idempotency-key store (store.Idempotency) that
	// the dialects share: everything but the claim, which each dialect builds
	// from its own locking, reading the record back with [Dialect.ReadKey].
	Keys struct{ d Dialect }
	// Idempotency is the idempotency-key store (store.Idempotency) of a
	// dialect's database: Keys, with the dialect's claim.
	Idempotency struct {
		Keys
		claim KeyClaimer
	}
)

// KeyClaimer claims an idempotency key as a dialect's locking does (see
// store.Idempotency's Claim). Its errors are unprefixed: Idempotency adds
// the dialect's name and what failed.
type KeyClaimer func(ctx context.Context, c store.KeyClaim) (store.KeyRecord, bool, error)

var (
	_ store.Admin          = Admin{}
	_ store.ConsumerStore  = Consumers{}
	_ store.Inbox[*sql.Tx] = Inbox{}

	_ store.Idempotency[*sql.Tx] = Idempotency{}
)

// Admin returns the operators' view of d's database.
func (d Dialect) Admin() Admin { return Admin{d} }

// Consumers returns the consumer store of d's database.
func (d Dialect) Consumers() Consumers { return Consumers{d} }

// Inbox returns the inbox of d's database.
func (d Dialect) Inbox() Inbox { return Inbox{d} }

// Idempotency returns the idempotency-key store of d's database, whose
// claims are claim's.
func (d Dialect) Idempotency(claim KeyClaimer) Idempotency { return Idempotency{Keys{d}, claim} }

// Times is a dialect's codec of time columns.
type Times struct {
	// Encode returns t as an argument of a time column.
	Encode func(t time.Time) any
	// Decode reads a time column's non-NULL value.
	Decode func(src any) (time.Time, error)
}

// dest is Dest as a func(*time.Time) any.
func (c Times) dest(t *time.Time) any { return c.Dest(t) }

// Time is a scan destination for a time column of a dialect: it stores
// the decoded value in *T, and reports in Valid whether the column was not
// NULL.
type Time struct {
	T      *time.Time
	Valid  bool
	decode func(any) (time.Time, error)
}

// Dest returns a scan destination for a time column that stores it in *t.
func (c Times) Dest(t *time.Time) *Time { return &Time{T: t, decode: c.Decode} }

// Scan implements sql.Scanner.
func (t *Time) Scan(src any) error {
	if src == nil {
		t.Valid = false
		return nil
	}
	v, err := t.decode(src)
	if err != nil {
		return err
	}
	*t.T, t.Valid = v, true
	return nil
}

// queryAll runs a query on q and scans each row with scan.
func queryAll[T any](ctx context.Context, q sqltx.Conn, scan func(interface{ Scan(...any) error }) (T, error), query string, args ...any) ([]T, error) {
	var out []T
	err := sqltx.QueryEach(ctx, q, query, args, func(rows *sql.Rows) error {
		v, err := scan(rows)
		if err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// Column runs a query of one column on q and returns its values.
func Column[T any](ctx context.Context, q sqltx.Conn, query string, args ...any) ([]T, error) {
	return queryAll(ctx, q, func(row interface{ Scan(...any) error }) (T, error) {
		var v T
		err := row.Scan(&v)
		return v, err
	}, query, args...)
}
