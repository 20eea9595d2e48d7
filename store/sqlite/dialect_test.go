package sqlite

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"

	sqlite3 "modernc.org/sqlite/lib"
)

// A failed replay appends an entry of this process's clock; the relay's
// failures keep the latest columns.HistoryCap entries.
func TestHistories(t *testing.T) {
	for _, q := range []string{retrySQL, deadSQL} {
		if !strings.Contains(q, "json_array_length(coalesce(o.history, '[]')) >= "+strconv.Itoa(columns.HistoryCap)+" THEN") {
			t.Errorf("no history cap of %d in\n%s", columns.HistoryCap, q)
		}
	}
	q, args, err := replayFailed(time.Now(), 7, "boom")
	if err != nil || q != replayFailedSQL || len(args) != 3 || args[0] != int64(7) || args[1] != "boom" {
		t.Fatalf("replayFailed = %q, %v, %v", q, args, err)
	}
	var a store.Attempt
	if err := json.Unmarshal([]byte(args[2].(string)), &a); err != nil || a.Error != "boom" || time.Since(a.At) > time.Minute {
		t.Errorf("history entry %s: %+v, %v", args[2], a, err)
	}
}

// SQLite's errors are recognised by their codes.
func TestErrorCodes(t *testing.T) {
	ctx := context.Background()
	db, err := Open(filepath.Join(t.TempDir(), "codes.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "INSERT INTO courier_outbox (id) VALUES (1)")
	if !isMissing(err) || isUnique(err) {
		t.Errorf("insert into a missing table: %v: isMissing %v, isUnique %v", err, isMissing(err), isUnique(err))
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (k TEXT PRIMARY KEY, u TEXT UNIQUE)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES ('a', 'x')"); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{"INSERT INTO t VALUES ('a', 'y')", "INSERT INTO t VALUES ('b', 'x')"} {
		if _, err := db.ExecContext(ctx, stmt); !isUnique(err) || isMissing(err) {
			t.Errorf("%s: %v: isUnique %v, isMissing %v", stmt, err, isUnique(err), isMissing(err))
		}
	}
	// ROLLBACK with no transaction open fails with plain SQLITE_ERROR, which
	// rollback in open.go takes for "nothing to end".
	if _, err := db.ExecContext(ctx, "ROLLBACK"); errorCode(err) != sqlite3.SQLITE_ERROR {
		t.Errorf("ROLLBACK outside a transaction: %v (code %d)", err, errorCode(err))
	}
	if isMissing(nil) || isUnique(nil) {
		t.Error("nil is an SQLite error")
	}
}
