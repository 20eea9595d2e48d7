// Package store defines what Courier needs from a database, one small
// interface per job, and the types that cross them. Each SQL dialect lives in
// a sub-package (store/postgres, …) and implements these interfaces; the
// packages that write messages (outbox) and move them (relay) depend only on
// this package, never on a dialect.
//
// A dialect hands out its stores through one value, its [Driver] (such as
// postgres.NewDriver(pool)): every store of a database, on the Driver's
// [Clock]. The dialect packages own the schema: embedded, versioned
// migrations applied by their Driver's Migrate or by `courier migrate`.
//
// Operators' tools read and maintain a database through [Admin] (dead
// letters) and [Operations] (status, reconciliation of what is stuck,
// retention); docs/operations.md describes both and what each query costs.
// [ReplayRuns] keeps the record of replays of dead letters (courier dlq
// replay, the dashboard), so that every tool sees every run.
package store
