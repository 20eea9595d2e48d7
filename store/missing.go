package store

import "fmt"

// MissingSchema wraps err, a database's error saying that one of Courier's
// tables does not exist, so that it matches [ErrSchemaOutdated] and says what
// to run: `courier migrate`, or migrateCall (the dialect's Go function, such as
// "postgres.NewDriver(pool).Migrate(ctx)"). Dialects call it where an
// application first meets the schema, writing to the outbox.
func MissingSchema(err error, migrateCall string) error {
	return fmt.Errorf("%w (%w): create Courier's tables first: run `courier migrate` (or %s)", err, ErrSchemaOutdated, migrateCall)
}
