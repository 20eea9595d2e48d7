package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/courier-go/courier/internal/clocktest"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/sqlite"
)

// The stores compare with a clock the test moves: leases, retry delays,
// key locks and expiries end when it says.
func TestClock(t *testing.T) {
	clocktest.Run(t, func(t *testing.T, c store.Clock) store.Driver[*sql.Tx] {
		db, err := sqlite.Open(filepath.Join(t.TempDir(), "clock.db"))
		testenv.Must(t, err, "open")
		t.Cleanup(func() { db.Close() })
		_, err = sqlite.Migrate(context.Background(), db)
		testenv.Must(t, err, "migrate")
		return sqlite.NewDriver(db).WithClock(c)
	})
}
