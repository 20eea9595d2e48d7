package mysql_test

import (
	"database/sql"
	"testing"

	"github.com/courier-go/courier/internal/clocktest"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
)

// The stores compare with a clock the test moves: leases, retry delays,
// key locks and expiries end when it says.
func TestClock(t *testing.T) {
	clocktest.Run(t, func(t *testing.T, c store.Clock) store.Driver[*sql.Tx] {
		return mysql.NewDriver(testenv.MySQL(t, testenv.Migrate(mysql.NewDriver)).DB).WithClock(c)
	})
}
