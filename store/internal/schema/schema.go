package schema

import (
	"fmt"
	"io/fs"
	"strings"

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

// Set is a dialect's migrations: its embedded scripts, its version table
// and how its exported scripts record themselves.
type Set struct {
	fsys         fs.FS
	versionTable string
	database     string
	migrateCall  string
	record       string
}

// New returns the migrations embedded in fsys's folder "migrations", for
// database (named in exported scripts, e.g. "SQLite"), whose version table is
// created by versionTable and whose Go function that applies them is
// migrateCall (e.g. "sqlite.NewDriver(db).Migrate(ctx)"). record is the
// statement, with %d for the version and %s for the name, that an exported
// script ends with.
func New(fsys fs.FS, versionTable, database, migrateCall, record string) Set {
	return Set{fsys: fsys, versionTable: versionTable, database: database, migrateCall: migrateCall, record: record}
}

// Load returns the migrations in version order (see [Load]).
func (s Set) Load() []store.Migration { return Load(s.fsys) }

// Check returns err, the error of reading the version v, or else what
// [store.CheckVersion] says of v against the migrations.
func (s Set) Check(v int, err error) error { return Check(v, err, s.Load(), s.migrateCall) }

// Pending returns the migrations that a database at version current lacks
// (see [Pending]), or err, the error of reading current.
func (s Set) Pending(current int, err error) ([]store.Migration, error) {
	if err != nil {
		return nil, err
	}
	return Pending(current, s.Load())
}

// InsertError returns nil when err is nil, else err, the error of an
// insert of n outbox messages, prefixed with the dialect's name ("mysql:
// insert 3 outbox messages: …"); when missing says the outbox table does
// not exist, the error also says how to create it ([store.MissingSchema]).
func (s Set) InsertError(err error, n int, missing bool) error {
	return s.WriteError(err, fmt.Sprintf("insert %d outbox messages", n), missing)
}

// WriteError returns nil when err is nil, else err, the error of what
// ("schedule 3 messages"), prefixed with the dialect's name; when missing
// says a table of Courier's does not exist, the error also says how to
// create it ([store.MissingSchema]).
func (s Set) WriteError(err error, what string, missing bool) error {
	if err == nil {
		return nil
	}
	err = fmt.Errorf("%s: %s: %w", s.name(), what, err)
	if missing {
		return store.MissingSchema(err, s.migrateCall)
	}
	return err
}

// Version reads the schema version with read, which scans the highest
// applied version into its argument: 0 when absent says read's error is
// the database's "the version table does not exist", and read's other
// errors prefixed with the dialect's name ("mysql: read schema version: …").
func (s Set) Version(read func(v *int) error, absent func(error) bool) (int, error) {
	var v int
	if err := read(&v); err != nil {
		if absent(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("%s: read schema version: %w", s.name(), err)
	}
	return v, nil
}

// name returns the dialect's name, that of migrateCall's package.
func (s Set) name() string {
	name, _, _ := strings.Cut(s.migrateCall, ".")
	return name
}

// Export returns each migration as a script for an external migration
// tool, as [store.ExportScripts] builds it.
func (s Set) Export() []store.Migration {
	return store.ExportScripts(s.Load(), s.database, s.versionTable, func(m store.Migration) string {
		return fmt.Sprintf(s.record, m.Version, m.Name)
	})
}
