package shop

import (
	"database/sql"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// sagas returns the dialect's saga store, for the orders service.
func (d *DB) sagas() store.Sagas[*sql.Tx] {
	switch d.dialect {
	case Postgres:
		return postgres.SQLSagas(d.sql)
	case MySQL:
		return mysql.SQLSagas(d.sql)
	}
	return sqlite.SQLSagas(d.sql)
}
