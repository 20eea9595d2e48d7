package e2e

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

func TestSQLite(t *testing.T) {
	exercise(t, func(t testing.TB) store.Driver[*sql.Tx] {
		db, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
		testenv.Must(t, err, "open")
		t.Cleanup(func() { db.Close() })
		d := sqlite.NewDriver(db)
		_, err = d.Migrate(context.Background())
		testenv.Must(t, err, "migrate")
		return d
	})
}

func TestPostgres(t *testing.T) {
	t.Run("pgx", func(t *testing.T) {
		exercise(t, func(t testing.TB) store.Driver[pgx.Tx] {
			return postgres.NewDriver(testenv.Postgres(t, testenv.Migrate(postgres.NewDriver)).Pool)
		})
	})
	t.Run("database/sql", func(t *testing.T) {
		exercise(t, func(t testing.TB) store.Driver[*sql.Tx] {
			d := postgres.NewSQLDriver(testenv.Postgres(t, testenv.Migrate(postgres.NewDriver)).Pool)
			t.Cleanup(func() { d.DB().Close() })
			return d
		})
	})
}

func TestMySQL(t *testing.T) {
	exercise(t, func(t testing.TB) store.Driver[*sql.Tx] {
		return mysql.NewDriver(testenv.MySQL(t, testenv.Migrate(mysql.NewDriver)).DB)
	})
}

// exercise runs every end-to-end test, in parallel, each on a fresh,
// migrated database from open.
func exercise[TTx any](t *testing.T, open func(t testing.TB) store.Driver[TTx]) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, store.Driver[TTx])
	}{
		{"LocalNotifierWakesRelay", testWakeUp[TTx]},
		{"EndToEnd", testEndToEnd[TTx]},
		{"OrderOfSerialisedWriters", testOrderSerialised[TTx]},
		{"Scheduled", testScheduled[TTx]},
		{"ScheduledDeadLetter", testScheduledDeadLetter[TTx]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
}
