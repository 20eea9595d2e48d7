package main

import (
	"fmt"
	"os"
	"path/filepath"
)

type migrateCmd struct {
	dbFlags
	Print   bool   `help:"Print the SQL of every migration instead of applying it (for your own migration tool)." xor:"out" env:"COURIER_MIGRATE_PRINT"`
	Dir     string `help:"Write each migration as NNNN_courier_name.up.sql into this directory instead of applying it." type:"path" xor:"out" env:"COURIER_MIGRATE_DIR"`
	Dialect string `help:"Dialect to export with --print or --dir when no --database-url says: postgres, mysql or sqlite." enum:"postgres,mysql,sqlite," default:"" env:"COURIER_DIALECT"`
}

func (c *migrateCmd) Run(e *env) error {
	if c.Print || c.Dir != "" {
		return c.export(e)
	}
	d, err := c.open(e.ctx, true)
	if err != nil {
		return err
	}
	defer d.close()
	applied, err := d.migrate(e.ctx)
	if err != nil {
		return err
	}
	v, err := d.schemaVersion(e.ctx)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintf(e.stdout, "schema is up to date (version %d) in %s\n", v, d.where)
		return nil
	}
	fmt.Fprintf(e.stdout, "applied %d migration(s); schema is at version %d in %s\n", len(applied), v, d.where)
	return nil
}

func (c *migrateCmd) export(e *env) error {
	dialect := c.Dialect
	if c.DatabaseURL != "" {
		var err error
		if dialect, _, err = parseDatabaseURL(c.DatabaseURL); err != nil {
			return err
		}
	}
	if dialect == "" {
		dialect = "postgres"
	}
	for _, m := range exportSQL(dialect) {
		if c.Print {
			fmt.Fprintln(e.stdout, m.SQL)
			continue
		}
		if err := os.MkdirAll(c.Dir, 0o755); err != nil {
			return fmt.Errorf("--dir: %w", err)
		}
		name := filepath.Join(c.Dir, fmt.Sprintf("%04d_courier_%s.up.sql", m.Version, m.Name))
		if err := os.WriteFile(name, []byte(m.SQL), 0o644); err != nil {
			return fmt.Errorf("--dir: %w", err)
		}
		fmt.Fprintln(e.stdout, name)
	}
	return nil
}
