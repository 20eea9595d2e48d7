package postgres

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// The SQLSTATE codes Courier recognises.
const (
	uniqueViolation       = "23505"
	invalidSchemaName     = "3F000"
	undefinedTable        = "42P01"
	duplicateObject       = "42710"
	insufficientPrivilege = "42501"
)

// errorCode returns the SQLSTATE of err, "" when err is not an error of the
// server's.
func errorCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
