// Package storetest is the conformance suite of Courier's store dialects:
// the behaviour a store.Driver promises through the stores it hands out
// (store.RelayStore, store.Inserter, store.Inbox, store.ConsumerStore,
// store.Admin, store.Idempotency) and its migrations, written once and run
// against every dialect and every transaction type a dialect supports. The
// suite is generic over that type: a dialect's test file calls [Exercise]
// once per Driver it has, with a function that opens a fresh database
// whose stores read the suite's clock:
//
//	func TestConformance(t *testing.T) {
//		storetest.Exercise(t, func(t testing.TB, clock store.Clock) storetest.Harness[*sql.Tx] {
//			db := … // a fresh, empty database, closed by t.Cleanup
//			return storetest.Harness[*sql.Tx]{Driver: sqlite.NewDriver(db).WithClock(clock), ExecScript: …}
//		})
//	}
//
// The relay store's part of the suite, [ExerciseRelayStore], needs no
// database: only an Inserter, transactions and relay stores
// ([RelayHarness]), checked through Claim, Complete and Stats (and an
// optional [Inspector] for what those do not return). Exercise runs it on
// the Driver's stores; store/memstore runs it on the outbox in memory.
//
// The suite covers atomic writes, claim order and per-key order, leases and
// their takeover, retries with backoff, dead letters, concurrent claimers,
// KeepPublished, stats, migrations (fresh, re-run, newer, missing, exported
// SQL), large payloads, unicode keys, the order in which unserialised
// writers' rows are claimed (package relay, Ordering: in the order they
// become visible); on the consuming side inbox markers (duplicates,
// rollbacks, a duplicate waiting for the first delivery's transaction,
// retention), failed runs (deleted with the marker that applies their
// message, without holding up other messages' failures), parked
// deliveries and their replays; the
// operators' Admin view of both kinds of dead letters (their lists a page
// at a time, filtered, as summaries); their maintenance
// view (Operations: status, reconciliation, retention trims, the lock, and
// what an audit of the broker reads: the published copies of a window and
// where the database holds given messages); and
// Idempotency-Key records (claim, completion, release, lock takeover, expiry, 50 concurrent
// claims of one key). Every test gets a fresh database from the harness and
// talks to it for real; nothing is mocked. Each test has a clock of its own
// (a [memstore.Clock]), which it moves forward instead of sleeping until a
// lease ends or a retry falls due.
//
// The suite stays at the store layer: what the relay, the outbox writer and
// a broker do with a dialect (wake-ups, relays publishing through NATS,
// serialised writers' order end to end) is tested in test/e2e.
package storetest
