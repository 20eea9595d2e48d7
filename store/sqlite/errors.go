package sqlite

import (
	"errors"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// errorCode returns SQLite's result code of err (an extended code where
// SQLite has one, as modernc.org/sqlite turns them on), 0 when err is not
// an error of SQLite's.
func errorCode(err error) int {
	var e *sqlite.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

// isMissing reports whether err, the error of a fixed statement, says that
// its table or one of its columns does not exist: SQLite's plain
// SQLITE_ERROR is its code for "no such table" and "no such column", and a
// statement that is fixed has no other cause for it.
func isMissing(err error) bool { return errorCode(err) == sqlite3.SQLITE_ERROR }

// isUnique reports whether err is a violation of a UNIQUE or PRIMARY KEY
// constraint.
func isUnique(err error) bool {
	switch errorCode(err) {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return true
	}
	return false
}
