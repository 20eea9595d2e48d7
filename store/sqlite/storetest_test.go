package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/sqlite"
	"github.com/courier-go/courier/store/storetest"
)

// openFile opens a fresh database file in the test's temporary directory.
func openFile(t testing.TB) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outbox.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

// The conformance suite, on a fresh file per test.
func TestConformance(t *testing.T) {
	storetest.Exercise(t, harness)
}

// The relay store alone: claims and completes, no broker.
func BenchmarkRelayStore(b *testing.B) {
	storetest.BenchmarkRelayStore(b, harness)
}

// The inbox alone: the transaction that marks a message applied.
func BenchmarkInbox(b *testing.B) {
	storetest.BenchmarkInbox(b, harness)
}

// harness opens a fresh file for the conformance suite.
func harness(t testing.TB, clock store.Clock) storetest.Harness[*sql.Tx] {
	db, _ := openFile(t)
	d := sqlite.NewDriver(db).WithClock(clock)
	// An exported script runs in one transaction, as the sqlite3 shell
	// runs a file of statements.
	script := func(ctx context.Context, script string) error {
		return d.InTx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, script)
			return err
		})
	}
	return storetest.Harness[*sql.Tx]{Driver: d, ExecScript: script}
}
