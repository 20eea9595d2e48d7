package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/courier-go/courier/store/postgres"
)

type migrateCmd struct {
	dbFlags
	Print bool   `help:"Print the SQL of every migration instead of applying it (for your own migration tool)." xor:"out"`
	Dir   string `help:"Write each migration as NNNN_name.up.sql into this directory instead of applying it." type:"path" xor:"out"`
}

func (c *migrateCmd) Run(e *env) error {
	if c.Print || c.Dir != "" {
		return c.export(e)
	}
	pool, err := c.connect(e.ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	applied, err := postgres.Migrate(e.ctx, pool)
	if err != nil {
		return err
	}
	v, err := postgres.SchemaVersion(e.ctx, pool)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintf(e.stdout, "schema is up to date (version %d)\n", v)
		return nil
	}
	fmt.Fprintf(e.stdout, "applied %d migration(s); schema is at version %d\n", len(applied), v)
	return nil
}

func (c *migrateCmd) export(e *env) error {
	for _, m := range postgres.ExportSQL() {
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
