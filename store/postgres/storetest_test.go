package postgres_test

import (
	"bytes"
	"context"
	"database/sql"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/storetest"
)

// execScript runs an exported migration as psql runs a file: in the simple
// protocol, several statements at once.
func execScript(pg *testenv.PG) func(ctx context.Context, script string) error {
	return func(ctx context.Context, script string) error {
		_, err := pg.Pool.Exec(ctx, script, pgx.QueryExecModeSimpleProtocol)
		return err
	}
}

// The conformance suite, on a fresh schema per test, through each driver.
func TestConformance(t *testing.T) {
	t.Run("pgx", func(t *testing.T) { storetest.Exercise(t, pgxHarness) })
	t.Run("database/sql", func(t *testing.T) {
		storetest.Exercise(t, func(t testing.TB, clock store.Clock) storetest.Harness[*sql.Tx] {
			pg := testenv.Postgres(t, nil)
			d := postgres.NewSQLDriver(pg.Pool).WithClock(clock)
			t.Cleanup(func() { d.DB().Close() })
			return storetest.Harness[*sql.Tx]{Driver: d, ExecScript: execScript(pg)}
		})
	})
}

// The relay store alone: claims and completes, no broker.
func BenchmarkRelayStore(b *testing.B) {
	storetest.BenchmarkRelayStore(b, pgxHarness)
}

// The inbox alone: the transaction that marks a message applied.
func BenchmarkInbox(b *testing.B) {
	storetest.BenchmarkInbox(b, pgxHarness)
}

// pgxHarness opens a fresh schema for the conformance suite, through pgx.
func pgxHarness(t testing.TB, clock store.Clock) storetest.Harness[pgx.Tx] {
	pg := testenv.Postgres(t, nil)
	return storetest.Harness[pgx.Tx]{Driver: postgres.NewDriver(pg.Pool).WithClock(clock), ExecScript: execScript(pg)}
}

// An inbox marker written through one driver makes the message a duplicate
// for the other.
func TestInboxMarkersAcrossDrivers(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	std := postgres.NewSQLDriver(pg.Pool)
	t.Cleanup(func() { std.DB().Close() })
	ctx := context.Background()
	viaPgx := func(id uuid.UUID) (fresh bool) {
		ib := postgres.NewDriver(pg.Pool).Inbox()
		testenv.Must(t, ib.InTx(ctx, func(tx pgx.Tx) (err error) { fresh, err = ib.Mark(ctx, tx, "billing", id); return err }), "mark through pgx")
		return fresh
	}
	viaSQL := func(id uuid.UUID) (fresh bool) {
		ib := std.Inbox()
		testenv.Must(t, ib.InTx(ctx, func(tx *sql.Tx) (err error) { fresh, err = ib.Mark(ctx, tx, "billing", id); return err }), "mark through database/sql")
		return fresh
	}
	a, b := uuid.New(), uuid.New()
	if !viaPgx(a) || viaSQL(a) {
		t.Fatal("a marker written through pgx is not seen through database/sql")
	}
	if !viaSQL(b) || viaPgx(b) {
		t.Fatal("a marker written through database/sql is not seen through pgx")
	}

	// Groups, on the server's clock, through each driver: the message
	// marked already is a duplicate, the new one is fresh.
	group := func(ids ...uuid.UUID) []uuid.UUID {
		slices.SortFunc(ids, func(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) })
		return ids
	}
	freshOf := func(ids []uuid.UUID, fresh []bool) map[uuid.UUID]bool {
		m := map[uuid.UUID]bool{}
		for i, id := range ids {
			m[id] = fresh[i]
		}
		return m
	}
	pgxGroups := postgres.NewDriver(pg.Pool).Inbox().(store.GroupInbox[pgx.Tx])
	sqlGroups := std.Inbox().(store.GroupInbox[*sql.Tx])
	c, d := uuid.New(), uuid.New()
	var fresh []bool
	ids := group(a, c)
	testenv.Must(t, pgxGroups.InTx(ctx, func(tx pgx.Tx) (err error) { fresh, err = pgxGroups.MarkGroup(ctx, tx, "billing", ids); return err }), "mark a group through pgx")
	if got := freshOf(ids, fresh); got[a] || !got[c] {
		t.Fatalf("a group through pgx of a marked and a new message: fresh %v, want only the new one", got)
	}
	ids = group(c, d)
	testenv.Must(t, sqlGroups.InTx(ctx, func(tx *sql.Tx) (err error) { fresh, err = sqlGroups.MarkGroup(ctx, tx, "billing", ids); return err }), "mark a group through database/sql")
	if got := freshOf(ids, fresh); got[c] || !got[d] {
		t.Fatalf("a group through database/sql of a marked and a new message: fresh %v, want only the new one", got)
	}
}
