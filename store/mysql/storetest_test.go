package mysql_test

import (
	"context"
	"database/sql"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/storetest"
)

// The conformance suite, on a fresh database per test.
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

// harness opens a fresh database for the conformance suite.
func harness(t testing.TB, clock store.Clock) storetest.Harness[*sql.Tx] {
	my := testenv.MySQL(t, nil)
	return storetest.Harness[*sql.Tx]{Driver: mysql.NewDriver(my.DB).WithClock(clock), ExecScript: func(ctx context.Context, script string) error {
		// As the mysql client runs a script: on a connection that
		// accepts several statements at once.
		cfg, err := gomysql.ParseDSN(my.DSN)
		if err != nil {
			return err
		}
		cfg.MultiStatements = true
		multi, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return err
		}
		defer multi.Close()
		_, err = multi.ExecContext(ctx, script)
		return err
	}}
}
