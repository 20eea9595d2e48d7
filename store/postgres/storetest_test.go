package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/storetest"
)

// harness gives the conformance suite a fresh schema per test, written to
// through both inserters (pgx.Tx and *sql.Tx).
func harness() storetest.Harness {
	return storetest.Harness{Open: func(t testing.TB) *storetest.DB {
		pg := testenv.Postgres(t, nil)
		db := stdlib.OpenDBFromPool(pg.Pool)
		t.Cleanup(func() { db.Close() })
		pgxWriter := storetest.Writer{
			Name: "pgx",
			Write: func(ctx context.Context, cfg outbox.Config, msgs []courier.Message, commit bool) error {
				tx, err := pg.Pool.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
				if err := outbox.New(postgres.Pgx(), cfg).Write(ctx, tx, msgs...); err != nil {
					return err
				}
				if !commit {
					return tx.Rollback(ctx)
				}
				return tx.Commit(ctx)
			},
			InTx: func(ctx context.Context, cfg outbox.Config, fn func(tx storetest.Tx) error) error {
				tx, err := pg.Pool.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
				if err := fn(pgxTx{tx: tx, w: outbox.New(postgres.Pgx(), cfg)}); err != nil {
					return err
				}
				return tx.Commit(ctx)
			},
		}
		return &storetest.DB{
			SQL:     db,
			Rebind:  storetest.DollarPlaceholders,
			Writers: []storetest.Writer{pgxWriter, storetest.SQLWriter(db, postgres.DatabaseSQL())},
			NewStore: func(ctx context.Context, keep bool) (store.RelayStore, error) {
				return postgres.NewStore(ctx, pg.Pool, postgres.StoreConfig{KeepPublished: keep})
			},
			Migrate:       func(ctx context.Context) ([]int, error) { return postgres.Migrate(ctx, pg.Pool) },
			SchemaVersion: func(ctx context.Context) (int, error) { return postgres.SchemaVersion(ctx, pg.Pool) },
			CheckSchema:   func(ctx context.Context) error { return postgres.CheckSchema(ctx, pg.Pool) },
			Migrations:    postgres.Migrations,
			ExportSQL:     postgres.ExportSQL,
			Inboxes: []storetest.Inbox{
				storetest.InboxOf("pgx", postgres.PgxInbox(pg.Pool)),
				storetest.InboxOf("database/sql", postgres.SQLInbox(db)),
			},
			ConsumerStore: postgres.ConsumerStore(pg.Pool),
			Admin:         postgres.Admin(pg.Pool),
			Idempotency: []storetest.Idempotency{
				storetest.IdempotencyOf("pgx", postgres.PgxIdempotency(pg.Pool)),
				storetest.IdempotencyOf("database/sql", postgres.SQLIdempotency(db)),
			},
			ExecScript: func(ctx context.Context, script string) error {
				_, err := pg.Pool.Exec(ctx, script, pgx.QueryExecModeSimpleProtocol)
				return err
			},
		}
	}}
}

// pgxTx is the storetest.Tx of the pgx writer.
type pgxTx struct {
	tx pgx.Tx
	w  *outbox.Writer[pgx.Tx]
}

func (p pgxTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := p.tx.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (p pgxTx) QueryRow(ctx context.Context, dest []any, query string, args ...any) error {
	return p.tx.QueryRow(ctx, query, args...).Scan(dest...)
}

func (p pgxTx) Write(ctx context.Context, msgs ...courier.Message) error {
	return p.w.Write(ctx, p.tx, msgs...)
}

func TestConformance(t *testing.T) {
	storetest.Run(t, harness())
}
