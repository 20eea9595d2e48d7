package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// Without a database URL, migrate --print speaks SQLite like every other
// command's default; --dialect picks another.
func TestMigratePrintDefaultsToSQLite(t *testing.T) {
	t.Setenv("COURIER_DATABASE_URL", "")
	os.Unsetenv("COURIER_DATABASE_URL")
	code, out, _ := runCLI(t, "migrate", "--print")
	if code != 0 || !strings.Contains(out, "(SQLite)") || strings.Contains(out, "PostgreSQL") {
		t.Fatalf("migrate --print: %d, want SQLite's SQL:\n%.300s", code, out)
	}
	code, out, _ = runCLI(t, "migrate", "--print", "--dialect", "postgres")
	if code != 0 || !strings.Contains(out, "(PostgreSQL") {
		t.Fatalf("migrate --print --dialect postgres: %d\n%.300s", code, out)
	}
}

// --dir names files the way the chosen tool wants them, numbered after the
// application's own migrations or by timestamp.
func TestMigrateExportLayouts(t *testing.T) {
	n := len(sqlite.ExportSQL())
	cases := []struct {
		args  string
		files []string // patterns of the first migration's files
		count int
		want  string // in the first file
	}{
		{"--tool golang-migrate --start 100", []string{`^0100_courier_outbox\.up\.sql$`}, n, "CREATE TABLE"},
		{"--tool golang-migrate --down", []string{`^0001_courier_outbox\.down\.sql$`, `^0001_courier_outbox\.up\.sql$`}, 2 * n, "cannot be reverted"},
		{"--tool goose --prefix timestamp", []string{`^\d{14}_courier_outbox\.sql$`}, n, "-- +goose Up"},
		{"--tool goose --dialect postgres", []string{`^0001_courier_outbox\.sql$`}, len(postgres.ExportSQL()), "-- +goose StatementBegin"},
		{"--tool flyway --start 50", []string{`^V50__courier_outbox\.sql$`}, n, "CREATE TABLE"},
		{"--since 2", []string{`^0001_courier_idempotency\.up\.sql$`}, n - 2, "CREATE TABLE"},
	}
	for _, c := range cases {
		dir := t.TempDir()
		code, _, errOut := runCLI(t, append([]string{"migrate", "--dir", dir}, strings.Fields(c.args)...)...)
		if code != 0 {
			t.Errorf("migrate --dir %s: exit %d %s", c.args, code, errOut)
			continue
		}
		entries, err := os.ReadDir(dir)
		testenv.Must(t, err, "read dir")
		if len(entries) != c.count {
			t.Errorf("migrate --dir %s: %d files, want %d", c.args, len(entries), c.count)
			continue
		}
		for i, p := range c.files {
			if !regexp.MustCompile(p).MatchString(entries[i].Name()) {
				t.Errorf("migrate --dir %s: file %d is %s, want %s", c.args, i, entries[i].Name(), p)
			}
		}
		body, err := os.ReadFile(filepath.Join(dir, entries[0].Name()))
		testenv.Must(t, err, "read")
		if !strings.Contains(string(body), c.want) {
			t.Errorf("migrate --dir %s: %s lacks %q", c.args, entries[0].Name(), c.want)
		}
	}
	for _, bad := range []struct{ args, want string }{
		{"--start 0", "--start is 0"},
		{"--since 99", "--since is 99"},
		{"--tool goose --down", "--down"},
	} {
		code, _, errOut := runCLI(t, append([]string{"migrate", "--dir", t.TempDir()}, strings.Fields(bad.args)...)...)
		if code != 1 || !strings.Contains(errOut, bad.want) {
			t.Errorf("migrate --dir %s: exit %d %q, want %q", bad.args, code, errOut, bad.want)
		}
	}
}

// The exported files, run in order as a migration tool runs them, leave a
// schema Courier accepts.
func TestMigrateExportedFilesApply(t *testing.T) {
	dir := t.TempDir()
	if code, _, errOut := runCLI(t, "migrate", "--dir", dir, "--tool", "golang-migrate", "--start", "20"); code != 0 {
		t.Fatalf("export: %s", errOut)
	}
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open")
	defer db.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "*.up.sql"))
	for _, f := range files {
		body, err := os.ReadFile(f)
		testenv.Must(t, err, "read")
		_, err = db.Exec(string(body))
		testenv.Must(t, err, "apply "+f)
	}
	if code, out, errOut := runCLI(t, "status", "--database-url", "sqlite://"+path); code != 0 {
		t.Fatalf("status after applying the exported files: %d %s %s", code, out, errOut)
	}
}
