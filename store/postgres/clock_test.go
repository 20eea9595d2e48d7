package postgres_test

import (
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier/internal/clocktest"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// The stores compare with a clock the test moves: leases, retry delays,
// key locks and expiries end when it says, through both drivers.
func TestClock(t *testing.T) {
	t.Run("pgx", func(t *testing.T) {
		clocktest.Run(t, func(t *testing.T, c store.Clock) store.Driver[pgx.Tx] {
			return postgres.NewDriver(testenv.Postgres(t, testenv.Migrate(postgres.NewDriver)).Pool).WithClock(c)
		})
	})
	t.Run("database/sql", func(t *testing.T) {
		clocktest.Run(t, func(t *testing.T, c store.Clock) store.Driver[*sql.Tx] {
			d := postgres.NewSQLDriver(testenv.Postgres(t, testenv.Migrate(postgres.NewDriver)).Pool).WithClock(c)
			t.Cleanup(func() { d.DB().Close() })
			return d
		})
	})
}
