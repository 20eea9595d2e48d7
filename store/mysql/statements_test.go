package mysql

import (
	"strings"
	"testing"
)

// Every embedded migration splits into statements that each start with a
// keyword and carry no comment or stray semicolon.
func TestStatements(t *testing.T) {
	got := statements("-- a comment; with a semicolon\nCREATE TABLE a (\n    x INT\n);\n\n-- another\nINSERT INTO a VALUES (1);\nSELECT 1")
	want := []string{"CREATE TABLE a (\n    x INT\n)", "INSERT INTO a VALUES (1)", "SELECT 1"}
	if len(got) != len(want) {
		t.Fatalf("statements = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("statement %d = %q, want %q", i, got[i], want[i])
		}
	}
	for _, m := range Migrations() {
		stmts := statements(m.SQL)
		if len(stmts) == 0 {
			t.Fatalf("migration %d has no statements", m.Version)
		}
		for _, s := range stmts {
			if !strings.HasPrefix(s, "CREATE TABLE IF NOT EXISTS ") && !strings.HasPrefix(s, "INSERT IGNORE ") {
				t.Errorf("migration %d: statement %q is not idempotent (CREATE TABLE IF NOT EXISTS or INSERT IGNORE)", m.Version, firstLine(s))
			}
			if strings.Contains(s, ";") || strings.Contains(s, "--") {
				t.Errorf("migration %d: statement %q holds a semicolon or a comment", m.Version, firstLine(s))
			}
		}
	}
}
