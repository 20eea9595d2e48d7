package sqlite

import (
	"database/sql"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqlsagas"
)

// SQLSagas returns the saga store (package saga) for database/sql
// transactions on db, a pool opened with [Open]. Its transactions begin
// with BEGIN IMMEDIATE, so transitions of one instance queue for the write
// lock; the version check still guards against a transition whose load
// happened in an earlier transaction.
func SQLSagas(db *sql.DB) store.Sagas[*sql.Tx] { return sqlsagas.New(dialect(db, nil)) }
