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

// harness gives the conformance suite a fresh file per test.
func harness() storetest.Harness {
	return storetest.Harness{Open: func(t testing.TB) *storetest.DB {
		db, _ := openFile(t)
		return &storetest.DB{
			SQL:     db,
			Writers: []storetest.Writer{storetest.SQLWriter(db, sqlite.DatabaseSQL())},
			NewStore: func(ctx context.Context, keep bool) (store.RelayStore, error) {
				return sqlite.NewStore(ctx, db, sqlite.StoreConfig{KeepPublished: keep})
			},
			Migrate:       func(ctx context.Context) ([]int, error) { return sqlite.Migrate(ctx, db) },
			SchemaVersion: func(ctx context.Context) (int, error) { return sqlite.SchemaVersion(ctx, db) },
			CheckSchema:   func(ctx context.Context) error { return sqlite.CheckSchema(ctx, db) },
			Migrations:    sqlite.Migrations,
			ExportSQL:     sqlite.ExportSQL,
			Inboxes:       []storetest.Inbox{storetest.InboxOf("database/sql", sqlite.SQLInbox(db))},
			ConsumerStore: sqlite.ConsumerStore(db),
			Admin:         sqlite.Admin(db),
			Idempotency:   []storetest.Idempotency{storetest.IdempotencyOf("database/sql", sqlite.SQLIdempotency(db))},
			SerialWrites:  true,
			ExecScript: func(ctx context.Context, script string) error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback()
				if _, err := tx.ExecContext(ctx, script); err != nil {
					return err
				}
				return tx.Commit()
			},
		}
	}}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, harness())
}
