package sqlite

import (
	"context"
	"database/sql"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqlsagas"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// SQLSagas returns the saga store (package saga) for database/sql
// transactions on db, a pool opened with [Open]. Its transactions begin
// with BEGIN IMMEDIATE, so transitions of one instance queue for the write
// lock; the version check still guards against a transition whose load
// happened in an earlier transaction.
func SQLSagas(db *sql.DB) store.Sagas[*sql.Tx] {
	return sqlsagas.New(db, sqlsagas.Dialect{
		Name: "sqlite",
		InTx: func(ctx context.Context, fn func(*sql.Tx) error) error {
			return sqltx.InTx(ctx, db, nil, "sqlite: ", fn)
		},
		IsDuplicate: isUnique,
	})
}
