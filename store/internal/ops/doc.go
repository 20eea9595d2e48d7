// Package ops is the operators' maintenance view (store.Operations) that
// the SQL dialects share: status, reconciliation, retention deletes and the
// maintenance lock. Statements are written once with ? placeholders (the
// PostgreSQL adapter numbers them); a [Dialect] holds what differs: how
// times are written and read, the few expressions whose SQL differs, the
// shape of a batched delete and the lock.
//
// Every statement compares times with one reading of the store's clock,
// passed as a parameter, so the suite's clock drives them in tests and the
// database's own (read once per call) in production.
package ops
