// Package schema holds what the dialects' migrations share: loading the
// embedded scripts, deciding which of them a database lacks, and checking a
// database's version against them. Each dialect keeps its scripts, its
// version table and how it applies them.
package schema

import (
	"fmt"
	"io/fs"

	"github.com/courier-go/courier/store"
)

// Load returns the migrations in fsys's folder "migrations", in version
// order. The scripts are embedded at build time and tests cover them, so a
// failure to load them is a bug: Load panics.
func Load(fsys fs.FS) []store.Migration {
	ms, err := store.LoadMigrations(fsys, "migrations")
	if err != nil {
		panic(err)
	}
	return ms
}

// Pending returns the migrations of ms that a database at version current
// lacks, in order, or an error wrapping [store.ErrSchemaNewer] when the
// database is ahead of ms.
func Pending(current int, ms []store.Migration) ([]store.Migration, error) {
	if latest := store.Latest(ms); current > latest {
		return nil, fmt.Errorf("database is at version %d, this binary knows up to %d: %w", current, latest, store.ErrSchemaNewer)
	}
	return ms[current:], nil
}

// Check returns err, the error of reading the version v, or else what
// [store.CheckVersion] says of v against ms.
func Check(v int, err error, ms []store.Migration, migrateCall string) error {
	if err != nil {
		return err
	}
	return store.CheckVersion(v, ms, migrateCall)
}
