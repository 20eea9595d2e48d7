// Package storetest is the conformance suite of Courier's store dialects:
// the behaviour store.RelayStore, store.Inserter, store.Inbox,
// store.ConsumerStore, store.Admin, store.Idempotency and the dialects'
// migrations promise, written once and run against every dialect and every
// driver kind a dialect supports. A dialect's test file builds a [Harness] and calls
// [Run]:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{Open: func(t testing.TB) *storetest.DB { … }})
//	}
//
// The suite covers atomic writes, claim order and per-key order, leases and
// their takeover, retries with backoff, dead letters, concurrent claimers,
// KeepPublished, stats, migrations (fresh, re-run, newer, missing, exported
// SQL), large payloads, unicode keys, the in-process wake-ups of
// store.LocalNotifier, an end-to-end run of three relays through an
// embedded NATS server, the per-key order contract (package relay,
// Ordering: writers serialised per aggregate are published in write order,
// unserialised ones in the order their rows become visible); on the consuming side inbox markers (duplicates,
// rollbacks, a duplicate waiting for the first delivery's transaction,
// retention), parked deliveries and their replays; the operators' Admin
// view of both kinds of dead letters; and Idempotency-Key records (claim,
// completion, release, lock takeover, expiry, 50 concurrent claims of one
// key). Every test gets a fresh database from the harness and
// talks to it for real; nothing is mocked.
package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
)

// Harness connects the suite to one dialect.
type Harness struct {
	// Open creates a fresh, empty database (no Courier schema yet) for one
	// test, and removes it when the test ends (t.Cleanup). The suite applies
	// the migrations itself, through DB.Migrate, where it needs them.
	Open func(t testing.TB) *DB
}

// DB is one test's database, as the dialect under test exposes it. Every
// field but Rebind is required.
type DB struct {
	// SQL is a database/sql handle on the database, for assertions with raw
	// SQL (the suite only uses portable SQL with ? placeholders, passed
	// through Rebind).
	SQL *sql.DB
	// Rebind rewrites a query written with ? placeholders into the form
	// SQL's driver takes; nil when the driver takes ? itself.
	Rebind func(query string) string
	// Writers write messages with each outbox inserter the dialect
	// supports (pgx.Tx and *sql.Tx for PostgreSQL, …); at least one.
	Writers []Writer
	// NewStore returns the dialect's store.RelayStore on the database (the
	// dialect's NewStore with StoreConfig{KeepPublished: keepPublished}).
	NewStore func(ctx context.Context, keepPublished bool) (store.RelayStore, error)
	// Migrate, SchemaVersion and CheckSchema are the dialect's functions of
	// those names, applied to the database.
	Migrate       func(ctx context.Context) ([]int, error)
	SchemaVersion func(ctx context.Context) (int, error)
	CheckSchema   func(ctx context.Context) error
	// Migrations and ExportSQL are the dialect's functions of those names.
	Migrations func() []store.Migration
	ExportSQL  func() []store.Migration
	// ExecScript runs a script of several statements (an exported
	// migration) the way an external migration tool would.
	ExecScript func(ctx context.Context, script string) error
	// Inboxes are the dialect's store.Inbox implementations on the
	// database, one per transaction type it supports, each adapted with
	// InboxOf; at least one.
	Inboxes []Inbox
	// ConsumerStore and Admin are the dialect's implementations of those
	// interfaces on the database.
	ConsumerStore store.ConsumerStore
	Admin         store.Admin
	// Idempotency lists the dialect's store.Idempotency implementations on
	// the database, one per transaction type, each adapted with
	// IdempotencyOf; at least one.
	Idempotency []Idempotency
	// SerialWrites says that the database runs one write transaction at a
	// time (SQLite): a transaction that wants to write waits until the one
	// writing has ended, so no two writers are ever concurrent. The
	// ordering tests expect that behaviour when it is set, and concurrent
	// writers when it is not.
	SerialWrites bool
}

// Writer writes messages with one of the dialect's outbox inserters.
type Writer struct {
	// Name identifies the inserter in test names, such as "database/sql".
	Name string
	// Write writes msgs through an outbox.Writer built with cfg, in a
	// transaction of its own, and commits it (or rolls it back when commit
	// is false). An error from the outbox writer is returned as is.
	Write func(ctx context.Context, cfg outbox.Config, msgs []courier.Message, commit bool) error
	// InTx, when set, runs fn in a transaction of its own, with an
	// outbox.Writer built with cfg, and commits it when fn returns nil; when
	// fn fails it rolls back and returns fn's error. The ordering tests use
	// it to write messages together with SQL of their own (an aggregate's
	// row lock or version check) and to hold transactions open; writers
	// without it are left out of those tests. SQLWriter sets it.
	InTx func(ctx context.Context, cfg outbox.Config, fn func(tx Tx) error) error
}

// Tx is a Writer's open transaction: statements and outbox writes that
// commit or roll back together.
type Tx interface {
	// Exec runs a statement, written with the placeholders the driver takes
	// (see DB.Rebind), and returns the number of rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// QueryRow runs a query, written as for Exec, and scans its one row into
	// dest.
	QueryRow(ctx context.Context, dest []any, query string, args ...any) error
	// Write writes msgs to the outbox, in order.
	Write(ctx context.Context, msgs ...courier.Message) error
}

// SQLWriter returns the Writer of an inserter for *sql.Tx on db.
func SQLWriter(db *sql.DB, ins store.Inserter[*sql.Tx]) Writer {
	return Writer{
		Name: "database/sql",
		Write: func(ctx context.Context, cfg outbox.Config, msgs []courier.Message, commit bool) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return fmt.Errorf("begin: %w", err)
			}
			defer tx.Rollback() //nolint:errcheck // no-op after Commit
			if err := outbox.New(ins, cfg).Write(ctx, tx, msgs...); err != nil {
				return err
			}
			if !commit {
				return tx.Rollback()
			}
			return tx.Commit()
		},
		InTx: func(ctx context.Context, cfg outbox.Config, fn func(tx Tx) error) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return fmt.Errorf("begin: %w", err)
			}
			defer tx.Rollback() //nolint:errcheck // no-op after Commit
			if err := fn(sqlTx{tx: tx, w: outbox.New(ins, cfg)}); err != nil {
				return err
			}
			return tx.Commit()
		},
	}
}

// sqlTx is the Tx of SQLWriter.
type sqlTx struct {
	tx *sql.Tx
	w  *outbox.Writer[*sql.Tx]
}

func (s sqlTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s sqlTx) QueryRow(ctx context.Context, dest []any, query string, args ...any) error {
	return s.tx.QueryRowContext(ctx, query, args...).Scan(dest...)
}

func (s sqlTx) Write(ctx context.Context, msgs ...courier.Message) error {
	return s.w.Write(ctx, s.tx, msgs...)
}

// Inbox is one of a dialect's store.Inbox implementations with its
// transaction type hidden, so the suite runs each one alike.
type Inbox struct {
	// Name identifies the implementation in test names, such as "pgx".
	Name  string
	Inbox store.Inbox[any]
}

// InboxOf adapts ib for the suite.
func InboxOf[TTx any](name string, ib store.Inbox[TTx]) Inbox {
	return Inbox{Name: name, Inbox: anyInbox[TTx]{ib}}
}

type anyInbox[TTx any] struct{ ib store.Inbox[TTx] }

func (a anyInbox[TTx]) InTx(ctx context.Context, fn func(tx any) error) error {
	return a.ib.InTx(ctx, func(tx TTx) error { return fn(tx) })
}

func (a anyInbox[TTx]) Mark(ctx context.Context, tx any, consumer string, id uuid.UUID) (bool, error) {
	return a.ib.Mark(ctx, tx.(TTx), consumer, id)
}

// Idempotency is one of a dialect's store.Idempotency implementations with
// its transaction type hidden, so the suite runs each one alike.
type Idempotency struct {
	// Name identifies the implementation in test names, such as "pgx".
	Name  string
	Store store.Idempotency[any]
}

// IdempotencyOf adapts st for the suite.
func IdempotencyOf[TTx any](name string, st store.Idempotency[TTx]) Idempotency {
	return Idempotency{Name: name, Store: anyIdempotency[TTx]{st}}
}

type anyIdempotency[TTx any] struct{ st store.Idempotency[TTx] }

func (a anyIdempotency[TTx]) InTx(ctx context.Context, fn func(tx any) error) error {
	return a.st.InTx(ctx, func(tx TTx) error { return fn(tx) })
}

func (a anyIdempotency[TTx]) Claim(ctx context.Context, c store.KeyClaim) (store.KeyRecord, bool, error) {
	return a.st.Claim(ctx, c)
}

func (a anyIdempotency[TTx]) Complete(ctx context.Context, tx any, scope, key string, owner uuid.UUID, resp store.StoredResponse) (bool, error) {
	return a.st.Complete(ctx, tx.(TTx), scope, key, owner, resp)
}

func (a anyIdempotency[TTx]) Release(ctx context.Context, scope, key string, owner uuid.UUID) error {
	return a.st.Release(ctx, scope, key, owner)
}

func (a anyIdempotency[TTx]) DeleteExpired(ctx context.Context, limit int) (int64, error) {
	return a.st.DeleteExpired(ctx, limit)
}

// DollarPlaceholders is a Rebind for drivers that number their
// placeholders ($1, $2, … as PostgreSQL does).
func DollarPlaceholders(query string) string {
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

// Run runs the whole suite, one subtest per behaviour.
func Run(t *testing.T, h Harness) {
	if h.Open == nil {
		t.Fatal("storetest: Harness.Open is nil: give a function that creates a fresh database")
	}
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"AtomicWrite", testAtomicWrite},
		{"EmptyPayload", testEmptyPayload},
		{"ClaimOrder", testClaimOrder},
		{"HotKeyClaimedInWholeRuns", testHotKey},
		{"Leases", testLeases},
		{"Retries", testRetries},
		{"HistoryKeepsLatest20", testHistoryLimit},
		{"DeadLetters", testDeadLetters},
		{"ConcurrentClaimers", testConcurrentClaimers},
		{"HeldKeyBacklogHoldsNoOtherKey", testHeldKeyBacklog},
		{"RetryDueDuringClaim", testRetryDueDuringClaim},
		{"ReleaseDuringClaim", testReleaseDuringClaim},
		{"KeepPublished", testKeepPublished},
		{"Stats", testStats},
		{"Migrations", testMigrations},
		{"MigrateConcurrently", testMigrateConcurrently},
		{"SchemaNewer", testSchemaNewer},
		{"SchemaOutdated", testSchemaOutdated},
		{"ExportedSQL", testExportedSQL},
		{"LargePayload", testLargePayload},
		{"UnicodeKeys", testUnicodeKeys},
		{"LocalNotifierWakesRelay", testWakeUp},
		{"EndToEnd", testEndToEnd},
		{"OrderOfUnserialisedWriters", testOrderUnserialised},
		{"OrderOfSerialisedWriters", testOrderSerialised},
		{"InboxMarkers", testInboxMarkers},
		{"InboxDuplicateWaitsForFirst", testInboxConcurrent},
		{"InboxMarkerRetention", testMarkerRetention},
		{"InboxFailures", testInboxFailures},
		{"ParkAndReplay", testParkAndReplay},
		{"AdminDeadLetters", testAdminDeadLetters},
		{"IdempotencyClaimAndComplete", testIdempotencyClaim},
		{"IdempotencyTakeoverAndExpiry", testIdempotencyExpiry},
		{"IdempotencyConcurrentClaims", testIdempotencyConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}
