package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// Writing into a database Courier's migrations never ran on says what to
// run, on every dialect, and matches store.ErrSchemaOutdated.
func TestWriteBeforeMigrating(t *testing.T) {
	ctx := context.Background()
	msg := courier.NewMessage("orders", "k", "T", []byte("x"))
	check := func(t *testing.T, err error, migrateCall string) {
		t.Helper()
		if err == nil || !errors.Is(err, store.ErrSchemaOutdated) || !strings.Contains(err.Error(), "courier migrate") || !strings.Contains(err.Error(), migrateCall) {
			t.Fatalf("write before migrating: %v; want store.ErrSchemaOutdated and a hint to run courier migrate or %s", err, migrateCall)
		}
	}
	sqlTx := func(t *testing.T, db *sql.DB, w *outbox.Writer[*sql.Tx], msgs ...courier.Message) error {
		tx, err := db.BeginTx(ctx, nil)
		testenv.Must(t, err, "begin")
		defer tx.Rollback()
		return w.Write(ctx, tx, msgs...)
	}
	t.Run("sqlite", func(t *testing.T) {
		db, err := sqlite.Open(filepath.Join(t.TempDir(), "app.db"))
		testenv.Must(t, err, "open")
		defer db.Close()
		check(t, sqlTx(t, db, outbox.New(sqlite.DatabaseSQL(), outbox.Config{}), msg), "sqlite.NewDriver(db).Migrate(ctx)")
	})
	t.Run("mysql", func(t *testing.T) {
		my := testenv.MySQL(t, nil)
		check(t, sqlTx(t, my.DB, outbox.New(mysql.DatabaseSQL(), outbox.Config{}), msg), "mysql.NewDriver(db).Migrate(ctx)")
	})
	t.Run("postgres", func(t *testing.T) {
		pg := testenv.Postgres(t, nil)
		for _, msgs := range [][]courier.Message{{msg}, {msg, courier.NewMessage("orders", "k", "T", nil)}} {
			tx, err := pg.Pool.Begin(ctx)
			testenv.Must(t, err, "begin")
			err = outbox.New(postgres.Pgx(), outbox.Config{}).Write(ctx, tx, msgs...)
			_ = tx.Rollback(ctx)
			check(t, err, "postgres.NewDriver(pool).Migrate(ctx)")
		}
	})
}
