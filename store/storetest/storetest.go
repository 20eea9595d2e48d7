// Package storetest is the conformance suite of Courier's store dialects:
// the behaviour a store.Driver promises through the stores it hands out
// (store.RelayStore, store.Inserter, store.Inbox, store.ConsumerStore,
// store.Admin, store.Idempotency) and its migrations, written once and run
// against every dialect and every transaction type a dialect supports. The
// suite is generic over that type: a dialect's test file calls [Exercise]
// once per Driver it has, with a function that opens a fresh database:
//
//	func TestConformance(t *testing.T) {
//		storetest.Exercise(t, func(t testing.TB) storetest.Harness[*sql.Tx] {
//			db := … // a fresh, empty database, closed by t.Cleanup
//			return storetest.Harness[*sql.Tx]{Driver: sqlite.NewDriver(db), ExecScript: …}
//		})
//	}
//
// The suite covers atomic writes, claim order and per-key order, leases and
// their takeover, retries with backoff, dead letters, concurrent claimers,
// KeepPublished, stats, migrations (fresh, re-run, newer, missing, exported
// SQL), large payloads, unicode keys, the order in which unserialised
// writers' rows are claimed (package relay, Ordering: in the order they
// become visible); on the consuming side inbox markers (duplicates,
// rollbacks, a duplicate waiting for the first delivery's transaction,
// retention), failed runs, parked deliveries and their replays; the
// operators' Admin view of both kinds of dead letters; and Idempotency-Key
// records (claim, completion, release, lock takeover, expiry, 50 concurrent
// claims of one key). Every test gets a fresh database from the harness and
// talks to it for real; nothing is mocked.
//
// The suite stays at the store layer: what the relay, the outbox writer and
// a broker do with a dialect (wake-ups, relays publishing through NATS,
// serialised writers' order end to end) is tested in test/e2e.
package storetest

import (
	"context"
	"testing"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// Harness is one test's fresh database, as the suite reaches it.
type Harness[TTx any] struct {
	// Driver is the dialect's driver on the database: the suite applies the
	// migrations through it where it needs them, writes and checks rows
	// with its stores and its Exec and QueryRow.
	Driver store.Driver[TTx]
	// ExecScript runs a script of several statements (an exported
	// migration) the way an external migration tool would.
	ExecScript func(ctx context.Context, script string) error
}

// opener creates a fresh, empty database (no Courier schema yet) for one
// test, removed when the test ends (t.Cleanup).
type opener[TTx any] func(t testing.TB) Harness[TTx]

// Exercise runs the whole suite, one parallel subtest per behaviour, each on
// a database of its own from open.
func Exercise[TTx any](t *testing.T, open func(t testing.TB) Harness[TTx]) {
	if open == nil {
		t.Fatal("storetest: open is nil: give a function that creates a fresh database")
	}
	tests := []struct {
		name string
		fn   func(*testing.T, opener[TTx])
	}{
		{"AtomicWrite", testAtomicWrite[TTx]},
		{"EmptyPayload", testEmptyPayload[TTx]},
		{"ClaimOrder", testClaimOrder[TTx]},
		{"HotKeyClaimedInWholeRuns", testHotKey[TTx]},
		{"Leases", testLeases[TTx]},
		{"Retries", testRetries[TTx]},
		{"HistoryKeepsLatest20", testHistoryLimit[TTx]},
		{"DeadLetters", testDeadLetters[TTx]},
		{"ConcurrentClaimers", testConcurrentClaimers[TTx]},
		{"HeldKeyBacklogHoldsNoOtherKey", testHeldKeyBacklog[TTx]},
		{"RetryDueDuringClaim", testRetryDueDuringClaim[TTx]},
		{"ReleaseDuringClaim", testReleaseDuringClaim[TTx]},
		{"KeepPublished", testKeepPublished[TTx]},
		{"Stats", testStats[TTx]},
		{"Migrations", testMigrations[TTx]},
		{"MigrateConcurrently", testMigrateConcurrently[TTx]},
		{"SchemaNewer", testSchemaNewer[TTx]},
		{"SchemaOutdated", testSchemaOutdated[TTx]},
		{"ExportedSQL", testExportedSQL[TTx]},
		{"LargePayload", testLargePayload[TTx]},
		{"UnicodeKeys", testUnicodeKeys[TTx]},
		{"OrderOfUnserialisedWriters", testOrderUnserialised[TTx]},
		{"InboxMarkers", testInboxMarkers[TTx]},
		{"InboxDuplicateWaitsForFirst", testInboxConcurrent[TTx]},
		{"InboxMarkerRetention", testMarkerRetention[TTx]},
		{"InboxFailures", testInboxFailures[TTx]},
		{"ParkAndReplay", testParkAndReplay[TTx]},
		{"AdminDeadLetters", testAdminDeadLetters[TTx]},
		{"IdempotencyClaimAndComplete", testIdempotencyClaim[TTx]},
		{"IdempotencyTakeoverAndExpiry", testIdempotencyExpiry[TTx]},
		{"IdempotencyConcurrentClaims", testIdempotencyConcurrent[TTx]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open)
		})
	}
}

// DollarPlaceholders rewrites a statement written with ? placeholders into
// PostgreSQL's numbered ones ($1, $2, …), for tests that run portable SQL
// of their own through database/sql.
func DollarPlaceholders(query string) string { return sqltx.Dollar(query) }
