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
//
// # Held keys
//
// A relay that holds the keys of a topic completes a message that failed
// for good with a Dead failure whose Hold is set. Its dead letter then
// holds its ordering key: claims treat the key as held, as a live lease's,
// and move the key's later rows they meet (at most the claim's window of
// rows) out of the outbox into courier_outbox_held, behind the dead
// letter, so that a held key's backlog neither fills a claim's window nor
// keeps rows to scan. [Admin] shows them (HeldKeys, ListHeld, the held
// counts of Stats, DeadLetter.Holds and Held) and releases them:
// ReplayDeadLetter puts the dead letter, then the messages held behind it,
// then its key's messages still pending, back into the outbox under new
// ids, in that order, so a relay publishes them in that order;
// DiscardDeadLetter deletes the dead letter and does the same with the
// others. Either runs in one transaction that claims wait for, so no
// message is ever left behind a dead letter that is gone. Releasing a key
// reads the key's pending rows, which no index serves: a scan of the
// outbox. A release is a writer of its key that the application's writers
// are not serialised with: a message of the key written by a transaction
// open while the release runs goes after the released ones when it commits
// before the release reads the key's rows, and may go before them (its id
// is below their new ones) when it commits after, as messages of
// concurrent writers do (relay, Ordering). Release a key while its writers
// are idle where that matters.
//
// While no dead letter holds its key the claims cost what they did: one
// probe of an empty index (partial on PostgreSQL and SQLite, on holds on
// MySQL) in the statement that reads the held keys.
//
// [ReplayRuns] keeps the record of replays of dead letters (courier dlq
// replay, the dashboard), so that every tool sees every run.
package store
