// Package sqldriver is the store.Driver[*sql.Tx] that Courier's
// database/sql dialects with ? placeholders, MySQL/MariaDB and SQLite,
// share. A [Dialect] holds what differs between them (the schema, the
// relay's store, the claim of idempotency keys, the maintenance view, the
// relay's polling interval, whether the database has one writer); the
// [Driver] hands out every store of one database from it, each on the
// Driver's clock.
//
// A dialect's package embeds the Driver through an unexported alias, so
// that its own Driver type gains the methods without an exported field,
// and adds the one method whose result type is its own: WithClock.
package sqldriver
