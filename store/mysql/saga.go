package mysql

import (
	"context"
	"database/sql"
	"errors"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqlsagas"
)

// SQLSagas returns the saga store (package saga) for database/sql
// transactions on db. Transitions load the instance with SELECT … FOR
// UPDATE, so concurrent transitions of one instance queue on its row (and
// the version check guards the rest). Times are the orchestrator's clock in
// Unix microseconds.
func SQLSagas(db *sql.DB) store.Sagas[*sql.Tx] {
	return sqlsagas.New(db, sqlsagas.Dialect{
		Name: "mysql",
		InTx: func(ctx context.Context, fn func(*sql.Tx) error) error {
			return inTx(ctx, db, nil, "mysql: ", fn)
		},
		LockRow: " FOR UPDATE",
		IsDuplicate: func(err error) bool {
			var myErr *gomysql.MySQLError
			return errors.As(err, &myErr) && myErr.Number == 1062 // ER_DUP_ENTRY
		},
	})
}
