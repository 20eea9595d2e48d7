package mysql

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier/store/internal/columns"
)

// Every embedded migration splits into statements that each start with a
// keyword, are idempotent and carry no comment or stray semicolon.
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
	for _, m := range migrations.Load() {
		stmts := statements(m.SQL)
		if len(stmts) == 0 {
			t.Fatalf("migration %d has no statements", m.Version)
		}
		for _, s := range stmts {
			// Migrate skips an index or a column that exists
			// (ER_DUP_KEYNAME, ER_DUP_FIELDNAME), so an ALTER TABLE adding
			// one index or one column is idempotent.
			addsOne := strings.HasPrefix(s, "ALTER TABLE ") && strings.Count(s, " ADD ") == 1 &&
				(strings.Contains(s, " ADD KEY ") || strings.Contains(s, " ADD COLUMN "))
			if !strings.HasPrefix(s, "CREATE TABLE IF NOT EXISTS ") && !strings.HasPrefix(s, "INSERT IGNORE ") && !addsOne {
				t.Errorf("migration %d: statement %q is not idempotent (CREATE TABLE IF NOT EXISTS, INSERT IGNORE, ALTER TABLE … ADD KEY or ADD COLUMN)", m.Version, firstLine(s))
			}
			if strings.Contains(s, ";") || strings.Contains(s, "--") {
				t.Errorf("migration %d: statement %q holds a semicolon or a comment", m.Version, firstLine(s))
			}
		}
	}
}

// DATETIME(6) columns hold UTC, read back whatever the DSN's parseTime and
// loc.
func TestTimeCodec(t *testing.T) {
	at := time.Date(2024, 3, 31, 1, 30, 0, 123456000, time.UTC)
	text := times.Encode(at).(string)
	if text != "2024-03-31 01:30:00.123456" {
		t.Fatalf("Encode = %q", text)
	}
	tokyo := time.FixedZone("JST", 9*3600)
	for _, src := range []any{text, []byte(text), time.Date(2024, 3, 31, 1, 30, 0, 123456000, tokyo)} {
		got, err := times.Decode(src)
		if err != nil || !got.Equal(at) {
			t.Errorf("Decode(%T) = %v, %v; want %v", src, got, err, at)
		}
	}
	if _, err := times.Decode(42); err == nil {
		t.Error("Decode(int) succeeded")
	}
}

func TestDialectStatements(t *testing.T) {
	// Retries and dead letters keep the latest columns.HistoryCap failures.
	trim := "IF(JSON_LENGTH(COALESCE(o.history, JSON_ARRAY())) >= " + strconv.Itoa(columns.HistoryCap) + ", "
	if !strings.Contains(retrySQL, trim) || !strings.Contains(deadSQL, trim) {
		t.Errorf("the statements that append a failure do not trim the history at %d", columns.HistoryCap)
	}
	d := dialect(nil, nil)
	q, args, err := d.ReplayFailed(7, "boom")
	if err != nil || q != replayFailedSQL || len(args) != 3 || args[0] != "boom" || args[2] != int64(7) {
		t.Errorf("ReplayFailed = %q, %v, %v", q, args, err)
	}
	if !strings.HasSuffix(d.ParkSQL(), "UTC_TIMESTAMP(6))") {
		t.Errorf("ParkSQL does not take the server's clock:\n%s", d.ParkSQL())
	}
}
