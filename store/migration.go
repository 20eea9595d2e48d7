package store

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one step of a dialect's schema. Versions start at 1 and
// increase by one; a database records the versions it has applied.
type Migration struct {
	// Version is the step's number.
	Version int
	// Name describes the step ("outbox").
	Name string
	// SQL is the step's DDL, run in one transaction.
	SQL string
}

// LoadMigrations reads migrations named NNNN_name.sql from dir in fsys (an
// embedded file system, usually) and returns them in version order. It fails
// on a malformed name or a gap in the numbering.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("store: read migrations: %w", err)
	}
	var ms []Migration
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, rest, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("store: migration file %q: name it NNNN_description.sql", name)
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("store: read migration %q: %w", name, err)
		}
		ms = append(ms, Migration{Version: v, Name: rest, SQL: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("store: migrations must be numbered 1, 2, 3…; found %d at position %d", m.Version, i+1)
		}
	}
	return ms, nil
}

// Latest returns the highest version in ms, or 0.
func Latest(ms []Migration) int {
	if len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// CheckVersion compares a database's schema version v with the latest
// version ms holds. It returns nil when they are equal, an error wrapping
// [ErrSchemaOutdated] that says to run `courier migrate` (or migrateCall,
// the dialect's Go function) when v is behind, and one wrapping
// [ErrSchemaNewer] when the database is ahead of this binary.
func CheckVersion(v int, ms []Migration, migrateCall string) error {
	latest := Latest(ms)
	switch {
	case v < latest:
		return fmt.Errorf("%w: the database is at version %d, courier needs %d; run `courier migrate` (or %s)", ErrSchemaOutdated, v, latest, migrateCall)
	case v > latest:
		return fmt.Errorf("%w: the database is at version %d, this courier knows up to %d; upgrade courier", ErrSchemaNewer, v, latest)
	}
	return nil
}

// ExportScripts turns ms into standalone scripts for an external migration
// tool: a comment naming the migration and the database, versionTable (the
// DDL that creates courier_schema_migrations if missing), the migration,
// and the statement record returns, which records the version so that
// Courier's own schema check agrees afterwards.
func ExportScripts(ms []Migration, database, versionTable string, record func(m Migration) string) []Migration {
	out := make([]Migration, len(ms))
	for i, m := range ms {
		var b strings.Builder
		fmt.Fprintf(&b, "-- courier migration %04d_%s (%s)\n", m.Version, m.Name, database)
		b.WriteString(versionTable)
		b.WriteString("\n\n")
		b.WriteString(strings.TrimSpace(m.SQL))
		b.WriteString("\n\n")
		b.WriteString(record(m))
		b.WriteString("\n")
		out[i] = Migration{Version: m.Version, Name: m.Name, SQL: b.String()}
	}
	return out
}
