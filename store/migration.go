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
