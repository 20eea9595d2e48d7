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

// harness gives the conformance suite a fresh database per test.
func harness() storetest.Harness {
	return storetest.Harness{Open: func(t testing.TB) *storetest.DB {
		my := testenv.MySQL(t, nil)
		db := my.DB
		return &storetest.DB{
			SQL:     db,
			Writers: []storetest.Writer{storetest.SQLWriter(db, mysql.DatabaseSQL())},
			NewStore: func(ctx context.Context, keep bool) (store.RelayStore, error) {
				return mysql.NewStore(ctx, db, mysql.StoreConfig{KeepPublished: keep})
			},
			Migrate:       func(ctx context.Context) ([]int, error) { return mysql.Migrate(ctx, db) },
			SchemaVersion: func(ctx context.Context) (int, error) { return mysql.SchemaVersion(ctx, db) },
			CheckSchema:   func(ctx context.Context) error { return mysql.CheckSchema(ctx, db) },
			Migrations:    mysql.Migrations,
			ExportSQL:     mysql.ExportSQL,
			Inboxes:       []storetest.Inbox{storetest.InboxOf("database/sql", mysql.SQLInbox(db))},
			ConsumerStore: mysql.ConsumerStore(db),
			Admin:         mysql.Admin(db),
			Idempotency:   []storetest.Idempotency{storetest.IdempotencyOf("database/sql", mysql.SQLIdempotency(db))},
			// As the mysql client runs a script: on a connection that
			// accepts several statements at once.
			ExecScript: func(ctx context.Context, script string) error {
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
			},
		}
	}}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, harness())
}
