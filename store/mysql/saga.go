package mysql

import (
	"database/sql"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqlsagas"
)

// SQLSagas returns the saga store (package saga) for database/sql
// transactions on db. Transitions load the instance with SELECT … FOR
// UPDATE, so concurrent transitions of one instance queue on its row (and
// the version check guards the rest). Times are the orchestrator's clock in
// Unix microseconds.
func SQLSagas(db *sql.DB) store.Sagas[*sql.Tx] { return sqlsagas.New(dialect(db)) }
