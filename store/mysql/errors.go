package mysql

import (
	"errors"

	gomysql "github.com/go-sql-driver/mysql"
)

// The server's error numbers Courier recognises.
const (
	// errDupEntry is ER_DUP_ENTRY: a unique key already holds the value.
	errDupEntry = 1062
	// errDupKeyName is ER_DUP_KEYNAME: an index of that name exists.
	errDupKeyName = 1061
	// errDupFieldName is ER_DUP_FIELDNAME: a column of that name exists.
	errDupFieldName = 1060
	// errNoSuchTable is ER_NO_SUCH_TABLE.
	errNoSuchTable = 1146
	// errDeadlock is ER_LOCK_DEADLOCK: InnoDB rolled the transaction back
	// to break a cycle of lock waits.
	errDeadlock = 1213
)

// errorNumber returns the MySQL error number of err, 0 when err is not a
// MySQL server error.
func errorNumber(err error) uint16 {
	var myErr *gomysql.MySQLError
	if errors.As(err, &myErr) {
		return myErr.Number
	}
	return 0
}
