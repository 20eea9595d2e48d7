// Package sqlstore is the code that Courier's database/sql dialects with '?'
// placeholders, MySQL/MariaDB and SQLite, share: the operators' view
// (store.Admin), the consuming side's parked deliveries, failures and
// markers (store.ConsumerStore), the inbox (store.Inbox) and the
// idempotency-key store (store.Idempotency), whose claim each dialect gives
// from its own locking. Their tables have the same columns; what differs
// is described by a [Dialect]: how a transaction runs, how times are
// written and read, what "now" is, and the few statements whose SQL
// differs.
//
// Statements are built from the Dialect without I/O (as Watermill's schema
// adapters build theirs), so each dialect's SQL can be checked in unit
// tests.
package sqlstore
