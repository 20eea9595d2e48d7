// Package sqlsagas is the saga store (store.Sagas) of the database/sql
// dialects whose courier_sagas tables have the same columns, '?'
// placeholders and times as Unix microseconds: MySQL/MariaDB and SQLite.
// Each dialect says, in its sqlstore.Dialect, how it runs a transaction, how
// it locks the loaded row and how it recognises a duplicate key.
package sqlsagas
