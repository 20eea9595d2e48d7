package storetest

import (
	"context"
	"testing"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqltx"
	"github.com/courier-go/courier/store/memstore"
)

// Harness is one test's fresh database, as the suite reaches it.
type Harness[TTx any] struct {
	// Driver is the dialect's driver on the database, whose stores take
	// the time they compare with from the clock open was given: the suite
	// applies the migrations through it where it needs them, writes and
	// checks rows with its stores and its Exec and QueryRow.
	Driver store.Driver[TTx]
	// ExecScript runs a script of several statements (an exported
	// migration) the way an external migration tool would.
	ExecScript func(ctx context.Context, script string) error
}

// opener creates a fresh, empty database (no Courier schema yet) for one
// test, whose stores read clock, removed when the test ends (t.Cleanup).
type opener[TTx any] func(t testing.TB, clock store.Clock) Harness[TTx]

// Exercise runs the whole suite, one parallel subtest per behaviour, each on
// a database of its own from open: the relay store's part
// ([ExerciseRelayStore], on a relay store the Driver hands out), then what
// only a database has (migrations, the consuming side, Admin,
// Idempotency-Key records). open's clock is the suite's: the stores of the
// Driver it returns compare lease ends, retry times and key locks and
// expiries with it (see [store.Clock]).
func Exercise[TTx any](t *testing.T, open func(t testing.TB, clock store.Clock) Harness[TTx]) {
	if open == nil {
		t.Fatal("storetest: open is nil: give a function that creates a fresh database")
	}
	runRelayTests(t, func(t testing.TB, clock store.Clock) RelayHarness[TTx] {
		return openDB(t, open, clock, true).RelayHarness
	})
	runParallel(t, []test[opener[TTx]]{
		{"Migrations", testMigrations[TTx]},
		{"MigrateConcurrently", testMigrateConcurrently[TTx]},
		{"SchemaNewer", testSchemaNewer[TTx]},
		{"SchemaOutdated", testSchemaOutdated[TTx]},
		{"ExportedSQL", testExportedSQL[TTx]},
		{"InboxMarkers", testInboxMarkers[TTx]},
		{"InboxDuplicateWaitsForFirst", testInboxConcurrent[TTx]},
		{"InboxMarkerRetention", testMarkerRetention[TTx]},
		{"InboxFailures", testInboxFailures[TTx]},
		{"InboxMarkClearsFailures", testInboxMarkClearsFailures[TTx]},
		{"InboxRecordFailureBesideApply", testRecordFailureBesideApply[TTx]},
		{"InboxMarkGroup", testInboxMarkGroup[TTx]},
		{"InboxMarkGroupClearsFailures", testInboxMarkGroupClearsFailures[TTx]},
		{"InboxMarkGroupWaits", testInboxMarkGroupWaits[TTx]},
		{"InboxMarkGroupsShare", testInboxMarkGroupsShare[TTx]},
		{"InboxMarkGroupLarge", testInboxMarkGroupLarge[TTx]},
		{"ParkAndReplay", testParkAndReplay[TTx]},
		{"AdminDeadLetters", testAdminDeadLetters[TTx]},
		{"AdminLists", testAdminLists[TTx]},
		{"AdminListBounds", testAdminListBounds[TTx]},
		{"AdminScheduled", testAdminScheduled[TTx]},
		{"HeldKeyReplay", testHeldKeyReplay[TTx]},
		{"HeldKeyDiscard", testHeldKeyDiscard[TTx]},
		{"HeldKeysSweep", testHeldKeysSweep[TTx]},
		{"HeldBacklogBeyondWindow", testHeldBacklogBeyondWindow[TTx]},
		{"HeldKeyRace", testHeldKeyRace[TTx]},
		{"HeldKeyScheduled", testHeldKeyScheduled[TTx]},
		{"ConsumerHeldKeys", testConsumerHeldKeys[TTx]},
		{"Operations", testOperations[TTx]},
		{"ReplayRuns", testReplayRuns[TTx]},
		{"DeliveryWatches", testDeliveryWatches[TTx]},
		{"DeliveryLatency", testDeliveryLatency[TTx]},
		{"DeliveryLatencyLimit", testDeliveryLatencyLimit[TTx]},
		{"DeliveryLatencyTrim", testDeliveryLatencyTrim[TTx]},
		{"IdempotencyClaimAndComplete", testIdempotencyClaim[TTx]},
		{"IdempotencyTakeoverAndExpiry", testIdempotencyExpiry[TTx]},
		{"IdempotencyConcurrentClaims", testIdempotencyConcurrent[TTx]},
	}, func(*testing.T) opener[TTx] { return open })
}

// test is one behaviour of the suite, checked on an A.
type test[A any] struct {
	name string
	fn   func(*testing.T, A)
}

// runParallel runs each of tests as a parallel subtest, on what arg
// returns for it.
func runParallel[A any](t *testing.T, tests []test[A], arg func(*testing.T) A) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, arg(t))
		})
	}
}

// RelayHarness is one test's fresh outbox, as [ExerciseRelayStore] reaches
// it: only what a relay store and its writers need.
type RelayHarness[TTx any] struct {
	// Inserter writes messages in a transaction of InTx.
	Inserter store.Inserter[TTx]
	// InTx runs fn in a new transaction, commits it when fn returns nil and
	// rolls it back (returning fn's error) otherwise.
	InTx func(ctx context.Context, fn func(tx TTx) error) error
	// RelayStore returns a relay store on the outbox, configured by cfg,
	// whose time is the clock open was given. Every store it returns
	// works on the same rows.
	RelayStore func(ctx context.Context, cfg store.RelayConfig) (store.RelayStore, error)
	// SerialWrites reports that one write transaction runs at a time, as
	// [store.Database.SerialWrites] does.
	SerialWrites bool
	// Operations, when set, returns the operators' maintenance view of the
	// outbox (store.Operations), whose outbox part (status per topic and
	// relay, ended leases, retried rows, trims of published copies and dead
	// letters, the lock, the published copies and places an audit reads)
	// the suite then checks; skipped without.
	Operations func() store.Operations
	// Inspect, when set, shows what the store keeps beyond what Claim,
	// Complete and Stats return (failure records, dead letters, published
	// rows); the checks that need it are skipped without it.
	Inspect Inspector
}

// Inspector shows what a relay store keeps beyond what its API returns.
type Inspector interface {
	// Failures returns the failure record of the pending row seq.
	Failures(ctx context.Context, seq int64) (Failures, error)
	// DeadLetters returns every dead letter, oldest first.
	DeadLetters(ctx context.Context) ([]store.DeadLetter, error)
	// Published returns the copy of the published row seq kept with
	// RelayConfig.KeepPublished; ok is false when there is none.
	Published(ctx context.Context, seq int64) (p Published, ok bool, err error)
}

// Failures is a pending row's record of failed publishes.
type Failures struct {
	// Attempts counts the counted failures.
	Attempts int
	// LastError is the latest failure's error, empty before any.
	LastError string
	// History is the latest failures, oldest first.
	History []store.PublishAttempt
}

// Published is a published row kept with RelayConfig.KeepPublished.
type Published struct {
	// MessageID is the message's id.
	MessageID string
	// Attempts counts the failures counted before the row was published.
	Attempts int
	// Payload is the message's payload.
	Payload []byte
	// Dated says that the row records when it was published.
	Dated bool
}

// ExerciseRelayStore runs the relay store's part of the suite, one parallel
// subtest per behaviour, each on an outbox of its own from open: atomic
// writes, claim order and per-key order, hot keys, leases and their
// takeover, retries with backoff, both to the microsecond of the clock, the history's limit, dead letters,
// concurrent claimers, a held key's backlog, races between claims and
// retries or releases, KeepPublished, stats, large payloads, unicode keys,
// unserialised writers' order, and with Operations what an audit reads
// (the published copies of a window, where given messages are held). Every
// check goes through the harness's stores (and its Inspector). open's clock
// is the suite's: the relay stores compare lease ends and retry times with
// it, and the suite moves it forward instead of sleeping until a deadline
// passes.
func ExerciseRelayStore[TTx any](t *testing.T, open func(t testing.TB, clock store.Clock) RelayHarness[TTx]) {
	if open == nil {
		t.Fatal("storetest: open is nil: give a function that creates a fresh outbox")
	}
	runRelayTests(t, open)
}

// runRelayTests runs the relay store's tests, each on an outbox from open
// with a clock of its own.
func runRelayTests[TTx any](t *testing.T, open func(t testing.TB, clock store.Clock) RelayHarness[TTx]) {
	runParallel(t, []test[*relayDB[TTx]]{
		{"AtomicWrite", testAtomicWrite[TTx]},
		{"EmptyPayload", testEmptyPayload[TTx]},
		{"ClaimOrder", testClaimOrder[TTx]},
		{"HotKeyClaimedInWholeRuns", testHotKey[TTx]},
		{"Leases", testLeases[TTx]},
		{"LeaseEndsOnTime", testLeaseEndsOnTime[TTx]},
		{"Retries", testRetries[TTx]},
		{"RetryDueOnTime", testRetryDueOnTime[TTx]},
		{"HistoryKeepsLatest20", testHistoryLimit[TTx]},
		{"DeadLetters", testDeadLetters[TTx]},
		{"ConcurrentClaimers", testConcurrentClaimers[TTx]},
		{"HeldKeyBacklogHoldsNoOtherKey", testHeldKeyBacklog[TTx]},
		{"RetryDueDuringClaim", testRetryDueDuringClaim[TTx]},
		{"ReleaseDuringClaim", testReleaseDuringClaim[TTx]},
		{"KeepPublished", testKeepPublished[TTx]},
		{"Stats", testStats[TTx]},
		{"LargePayload", testLargePayload[TTx]},
		{"UnicodeKeys", testUnicodeKeys[TTx]},
		{"OrderOfUnserialisedWriters", testOrderUnserialised[TTx]},
		{"OperationsOutbox", testOperationsOutbox[TTx]},
		{"PublishedBetween", testPublishedBetween[TTx]},
		{"PublishedBefore", testPublishedBefore[TTx]},
		{"Locate", testLocate[TTx]},
		{"ScheduledDueOnTime", testScheduledDueOnTime[TTx]},
		{"ScheduledOrder", testScheduledOrder[TTx]},
		{"ScheduledCancel", testScheduledCancel[TTx]},
		{"ScheduledCancelRace", testScheduledCancelRace[TTx]},
		{"ScheduledConcurrentReleases", testScheduledConcurrentReleases[TTx]},
		{"ScheduledStatus", testScheduledStatus[TTx]},
	}, func(t *testing.T) *relayDB[TTx] {
		clock := memstore.NewClock()
		h := open(t, clock.Now)
		if h.Inserter == nil || h.InTx == nil || h.RelayStore == nil {
			t.Fatal("storetest: the RelayHarness lacks its Inserter, InTx or RelayStore")
		}
		return &relayDB[TTx]{RelayHarness: h, clock: clock}
	})
}

// DollarPlaceholders rewrites a statement written with ? placeholders into
// PostgreSQL's numbered ones ($1, $2, …), for tests that run portable SQL
// of their own through database/sql.
func DollarPlaceholders(query string) string { return sqltx.Dollar(query) }
