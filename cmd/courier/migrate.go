package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/courier-go/courier/internal/escape"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
)

type migrateCmd struct {
	dbFlags
	Print   bool   `help:"Print the SQL of every migration instead of applying it (for your own migration tool)." xor:"out" env:"COURIER_MIGRATE_PRINT"`
	Dir     string `help:"Write each migration as a file into this directory instead of applying it, named as --tool wants." type:"path" xor:"out" env:"COURIER_MIGRATE_DIR"`
	Dialect string `help:"Dialect to export with --print or --dir when no --database-url says: sqlite (the default, as for every command), postgres or mysql." enum:"postgres,mysql,sqlite," default:"" env:"COURIER_DIALECT"`
	Tool    string `help:"With --dir, the migration tool that runs the files: courier (NNNN_courier_NAME.up.sql), golang-migrate (NNNN_courier_NAME.up.sql, .down.sql with --down), goose (NNNN_courier_NAME.sql with -- +goose Up/Down) or flyway (VN__courier_NAME.sql)." enum:"courier,golang-migrate,goose,flyway" default:"courier" env:"COURIER_MIGRATE_TOOL"`
	Prefix  string `help:"With --dir, how files are numbered: sequence (from --start) or timestamp (YYYYMMDDHHMMSS, now, one second apart)." enum:"sequence,timestamp" default:"sequence" env:"COURIER_MIGRATE_PREFIX"`
	Start   int    `help:"With --dir and --prefix sequence, the number of the first file: put Courier's migrations after your own." default:"1" env:"COURIER_MIGRATE_START"`
	Since   int    `help:"Export only the migrations after this schema version (the ones an upgrade adds; courier status on the database shows its version)." default:"0" env:"COURIER_MIGRATE_SINCE"`
	Down    bool   `help:"With --dir and --tool golang-migrate, also write a .down.sql for each migration (Courier's migrations cannot be reverted: it says so and does nothing)." env:"COURIER_MIGRATE_DOWN"`
}

func (c *migrateCmd) Run(e *env) error {
	if c.Print || c.Dir != "" {
		return c.export(e)
	}
	if err := c.checkTenants(); err != nil {
		return err
	}
	if c.tenanted() && c.Tenant == "" {
		return c.migrateTenants(e)
	}
	d, err := c.open(e.ctx, true, "")
	if err != nil {
		return err
	}
	defer d.Close()
	return migrateOne(e, d, "")
}

// migrateTenants migrates the fleet's database (--database-url) when
// given, then every tenant's, creating a tenant's PostgreSQL schema or
// SQLite file when it does not exist. A tenant that fails is reported and
// the others are migrated; the command then fails.
func (c *migrateCmd) migrateTenants(e *env) error {
	if c.DatabaseURL != "" {
		opts := urlOptions
		opts.Create = true
		d, err := dburl.Open(e.ctx, c.DatabaseURL, opts)
		if err != nil {
			return err
		}
		err = migrateOne(e, d, "")
		d.Close()
		if err != nil {
			return err
		}
	}
	ts, _, err := c.allTenants(e.ctx, e.log) // a rejected entry is logged
	if err != nil {
		return err
	}
	failed := 0
	for _, t := range ts {
		d, err := dburl.Open(e.ctx, t.URL, tenantOptions(t, true))
		if err == nil {
			err = migrateOne(e, d, "tenant "+t.Name+": ")
			d.Close()
		}
		if err != nil {
			failed++
			fmt.Fprintf(e.stdout, "tenant %s: %s\n", escape.Line(t.Name), escape.Line(err.Error()))
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d tenants not migrated (above)", failed, len(ts))
	}
	return nil
}

// migrateOne migrates d and says what it did, after prefix.
func migrateOne(e *env, d *dburl.DB, prefix string) error {
	applied, err := d.Migrate(e.ctx)
	if err != nil {
		return err
	}
	v, err := d.SchemaVersion(e.ctx)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintf(e.stdout, "%sschema is up to date (version %d) in %s\n", prefix, v, d)
		return nil
	}
	fmt.Fprintf(e.stdout, "%sapplied %d migration(s); schema is at version %d in %s\n", prefix, len(applied), v, d)
	return nil
}

func (c *migrateCmd) export(e *env) error {
	dialect, err := c.dialect() // sqlite without a URL: the embedded default, as for every command
	if err != nil {
		return err
	}
	if c.DatabaseURL == "" && c.Dialect != "" {
		dialect = c.Dialect
	}
	all, err := dburl.ExportSQL(dialect)
	if err != nil {
		return err
	}
	switch {
	case c.Start < 1:
		return fmt.Errorf("--start is %d: use 1 or more", c.Start)
	case c.Since < 0 || c.Since >= store.Latest(all):
		return fmt.Errorf("--since is %d: use a schema version from 0 to %d (the latest %s migration is %d)", c.Since, store.Latest(all)-1, dialect, store.Latest(all))
	case c.Down && c.Tool != "golang-migrate":
		return fmt.Errorf("--down is for --tool golang-migrate (goose files hold their own Down section; courier and flyway have none)")
	}
	ms := all[c.Since:]
	if c.Print {
		for _, m := range ms {
			fmt.Fprintln(e.stdout, m.SQL)
		}
		return nil
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("--dir: %w", err)
	}
	stamp := time.Now().UTC().Truncate(time.Second)
	whole := dollarQuoted(all)
	var files []exportFile
	for i, m := range ms {
		prefix := fmt.Sprintf("%04d", c.Start+i)
		if c.Prefix == "timestamp" {
			prefix = stamp.Add(time.Duration(i) * time.Second).Format("20060102150405")
		}
		files = append(files, exportFiles(c.Tool, prefix, m, c.Down, whole)...)
	}
	names, err := writeNewFiles(c.Dir, files)
	if err != nil {
		return err
	}
	for _, name := range names {
		fmt.Fprintln(e.stdout, name)
	}
	return nil
}

// writeNewFiles writes files into dir, each as a new file: a name that
// exists in dir (a file, a directory, a symbolic link, dangling or not) is
// never written over nor through, whoever made it, another export running
// at the same moment included. When one cannot be written, the files this
// call created are removed (they are its own) and the error names the one
// that failed. It returns the paths written.
func writeNewFiles(dir string, files []exportFile) ([]string, error) {
	var made []string
	undo := func() {
		for _, name := range made {
			_ = os.Remove(name)
		}
	}
	for _, f := range files {
		name := filepath.Join(dir, f.name)
		// O_EXCL: created here or not at all; it fails on a symbolic
		// link too, which it does not follow.
		fh, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			undo()
			return nil, fmt.Errorf("--dir: %s exists already (nothing is written over; the files this export wrote are removed): export into an empty directory, or pick other numbers with --start, --since or --prefix timestamp", name)
		}
		if err != nil {
			undo()
			return nil, fmt.Errorf("--dir: %w", err)
		}
		made = append(made, name)
		_, err = fh.WriteString(f.body)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			undo()
			return nil, fmt.Errorf("--dir: write %s: %w (the files this export wrote are removed)", name, err)
		}
	}
	return made, nil
}

// exportFile is one file of an exported migration.
type exportFile struct{ name, body string }

// dollarQuoted reports whether any of the scripts ms holds a dollar-quoted
// string ($$ … $$, $body$ … $body$): PostgreSQL's function bodies, whose
// semicolons a tool that splits scripts into statements must not split at.
func dollarQuoted(ms []store.Migration) bool {
	return slices.ContainsFunc(ms, func(m store.Migration) bool { return dollarQuote.MatchString(m.SQL) })
}

// dollarQuote matches the opening of a dollar-quoted string.
var dollarQuote = regexp.MustCompile(`\$[A-Za-z_]*\$`)

// exportFiles lays out migration m as tool expects it, under prefix (its
// number or timestamp). whole runs each script as one statement where tool
// would split it (goose): set when the dialect's scripts hold function
// bodies (see dollarQuoted), for every script of the dialect alike.
func exportFiles(tool, prefix string, m store.Migration, down, whole bool) []exportFile {
	base := prefix + "_courier_" + m.Name
	irreversible := fmt.Sprintf("-- courier migration %04d_%s cannot be reverted: restore a backup, or drop Courier's courier_* tables by hand.\n", m.Version, m.Name)
	switch tool {
	case "golang-migrate":
		fs := []exportFile{{base + ".up.sql", m.SQL}}
		if down {
			fs = append(fs, exportFile{base + ".down.sql", irreversible})
		}
		return fs
	case "goose":
		up := m.SQL
		if whole {
			up = "-- +goose StatementBegin\n" + strings.TrimRight(up, "\n") + "\n-- +goose StatementEnd\n"
		}
		return []exportFile{{base + ".sql", "-- +goose Up\n" + up + "\n-- +goose Down\n" + irreversible}}
	case "flyway":
		return []exportFile{{"V" + strings.TrimLeft(prefix, "0") + "__courier_" + m.Name + ".sql", m.SQL}}
	}
	return []exportFile{{base + ".up.sql", m.SQL}}
}
