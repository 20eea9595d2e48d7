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

// idsIn writes runs of consecutive ids as ranges and the others as a list,
// whatever their order and repeats; a condition names exactly the ids.
func TestIDsIn(t *testing.T) {
	for _, c := range []struct {
		ids  []int64
		want string
	}{
		{[]int64{7}, "id IN (7)"},
		{[]int64{3, 1, 2}, "(id BETWEEN 1 AND 3)"},
		{[]int64{1, 2, 3, 5, 9, 10, 12, 3}, "(id BETWEEN 1 AND 3 OR id BETWEEN 9 AND 10 OR id IN (5,12))"},
		{[]int64{4, 6, 8}, "id IN (4,6,8)"},
	} {
		if got := idsIn(c.ids); got != c.want {
			t.Errorf("idsIn(%v) = %q, want %q", c.ids, got, c.want)
		}
	}
	// Every id of a larger set, and none between them, is named.
	ids := []int64{}
	for i := int64(1); i < 2000; i++ {
		if i%7 != 0 && i%11 != 3 {
			ids = append(ids, i)
		}
	}
	cond := idsIn(ids)
	named := map[int64]bool{}
	for _, part := range strings.Split(strings.Trim(cond, "()"), " OR ") {
		if rest, ok := strings.CutPrefix(part, "id BETWEEN "); ok {
			lo, hi, _ := strings.Cut(rest, " AND ")
			a, _ := strconv.ParseInt(lo, 10, 64)
			b, _ := strconv.ParseInt(hi, 10, 64)
			for i := a; i <= b; i++ {
				named[i] = true
			}
			continue
		}
		for _, n := range strings.Split(strings.TrimSuffix(strings.TrimPrefix(part, "id IN ("), ")"), ",") {
			i, _ := strconv.ParseInt(n, 10, 64)
			named[i] = true
		}
	}
	if len(named) != len(ids) {
		t.Fatalf("the condition names %d ids, want %d: %s", len(named), len(ids), cond)
	}
	for _, id := range ids {
		if !named[id] {
			t.Fatalf("the condition misses id %d: %s", id, cond)
		}
	}
}
