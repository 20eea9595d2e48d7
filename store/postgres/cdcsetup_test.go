package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/postgres"
)

// setupEnv is a migrated schema, a pool on it whose connections carry an
// application name of their own (to find them in pg_stat_activity), and a
// publication name, dropped when the test ends.
type setupEnv struct {
	pg   *testenv.PG
	pool *pgxpool.Pool
	app  string
	pub  string
}

func newSetupEnv(t *testing.T) *setupEnv {
	t.Helper()
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	e := &setupEnv{pg: pg, app: testenv.Name("setup_"), pub: strings.ToLower(testenv.Name("pub_"))}
	cfg, err := pgxpool.ParseConfig(pg.URL)
	testenv.Must(t, err, "parse url")
	cfg.ConnConfig.RuntimeParams["application_name"] = e.app
	cfg.MaxConns = 32
	e.pool, err = pgxpool.NewWithConfig(context.Background(), cfg)
	testenv.Must(t, err, "pool")
	t.Cleanup(e.pool.Close)
	t.Cleanup(func() { _, _ = pg.Admin.Exec(context.Background(), "DROP PUBLICATION IF EXISTS "+e.pub) })
	return e
}

// tables returns the tables the publication holds, in order.
func (e *setupEnv) tables(t *testing.T) string {
	t.Helper()
	var tables string
	testenv.Must(t, e.pg.Admin.QueryRow(context.Background(),
		`SELECT coalesce(string_agg(tablename, ',' ORDER BY tablename), '') FROM pg_publication_tables WHERE pubname = $1`, e.pub).Scan(&tables), "publication's tables")
	return tables
}

// setupsRacing runs n Setups of the publication at once while a
// transaction of another session, which holds it uncommitted (made by
// change), commits only once every Setup waits for a lock: the Setups
// found no publication (or one without courier_outbox_scheduled) and made
// it as that session did. It returns their errors.
func (e *setupEnv) setupsRacing(t *testing.T, n int, change string) []error {
	t.Helper()
	ctx := context.Background()
	tx, err := e.pg.Pool.Begin(ctx)
	testenv.Must(t, err, "begin")
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, change)
	testenv.Must(t, err, change)

	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = postgres.NewDriver(e.pool).CDC().Setup(ctx, e.pub) })
	}
	waiting := func() (int, error) {
		var w int
		err := e.pg.Admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, e.app).Scan(&w)
		return w, err
	}
	testenv.WhileProgressing(t, 10*time.Second, func() (bool, any) {
		w, err := waiting()
		testenv.Must(t, err, "pg_stat_activity")
		return w == n, w
	}, "the %d Setups do not all wait for a lock", n)
	testenv.Must(t, tx.Commit(ctx), "commit the other session's change")
	wg.Wait()
	return errs
}

const wantTables = "courier_outbox,courier_outbox_scheduled"

// Setups that race another session creating the same publication (another
// relay of an older version, or an operator) all succeed: each one
// attempted CREATE PUBLICATION, which failed with a unique violation once
// that session committed, and found the publication made.
func TestSetupRacesCreatePublication(t *testing.T) {
	e := newSetupEnv(t)
	errs := e.setupsRacing(t, 4, "CREATE PUBLICATION "+e.pub+" FOR TABLE courier_outbox, courier_outbox_scheduled WITH (publish = 'insert')")
	for i, err := range errs {
		if err != nil {
			t.Errorf("Setup %d racing CREATE PUBLICATION: %v", i, err)
		}
	}
	if got := e.tables(t); got != wantTables {
		t.Errorf("publication %s holds %q, want %s", e.pub, got, wantTables)
	}
}

// Setups that race another session adding courier_outbox_scheduled to a
// publication of courier_outbox alone (made before scheduled messages) all
// succeed.
func TestSetupRacesAddTable(t *testing.T) {
	e := newSetupEnv(t)
	_, err := e.pg.Admin.Exec(context.Background(), "CREATE PUBLICATION "+e.pub+" FOR TABLE "+e.pg.Schema+".courier_outbox WITH (publish = 'insert')")
	testenv.Must(t, err, "a publication of courier_outbox alone")
	errs := e.setupsRacing(t, 4, "ALTER PUBLICATION "+e.pub+" ADD TABLE courier_outbox_scheduled")
	for i, err := range errs {
		if err != nil {
			t.Errorf("Setup %d racing ALTER PUBLICATION … ADD TABLE: %v", i, err)
		}
	}
	if got := e.tables(t); got != wantTables {
		t.Errorf("publication %s holds %q, want %s", e.pub, got, wantTables)
	}
}

// Many Setups at once on fresh publications, as relays started together
// on a new schema do: every one succeeds, each publication made once with
// both tables.
func TestSetupConcurrent(t *testing.T) {
	e := newSetupEnv(t)
	ctx := context.Background()
	base := e.pub
	for round := range 10 {
		e.pub = fmt.Sprintf("%s_%d", base, round)
		pub := e.pub
		t.Cleanup(func() { _, _ = e.pg.Admin.Exec(context.Background(), "DROP PUBLICATION IF EXISTS "+pub) })
		const n = 8
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				errs[i] = postgres.NewDriver(e.pool).CDC().Setup(ctx, pub)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: Setup %d of %d at once: %v", round, i, n, err)
			}
		}
		if got := e.tables(t); got != wantTables {
			t.Fatalf("round %d: publication %s holds %q, want %s", round, pub, got, wantTables)
		}
	}
}

// Setup's errors name their cause: a schema without Courier's tables says
// to run courier migrate; a user who may not create the publication is told
// what it needs, and not to migrate.
func TestSetupErrorsNameTheCause(t *testing.T) {
	ctx := context.Background()
	bare := testenv.Postgres(t, nil)
	pub := strings.ToLower(testenv.Name("pub_"))
	err := postgres.NewDriver(bare.Pool).CDC().Setup(ctx, pub)
	if err == nil || !strings.Contains(err.Error(), "run courier migrate") || strings.Contains(err.Error(), "own the tables") {
		t.Errorf("Setup on a schema without Courier's tables: %v; want the hint to run courier migrate, alone", err)
	}

	e := newSetupEnv(t)
	role := testenv.Name("relay_")
	for _, q := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA " + e.pg.Schema + " TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + e.pg.Schema + " TO " + role,
	} {
		_, err := e.pg.Admin.Exec(ctx, q)
		testenv.Must(t, err, q)
	}
	t.Cleanup(func() {
		_, _ = e.pg.Admin.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = e.pg.Admin.Exec(context.Background(), "DROP ROLE "+role)
	})
	cfg, err := pgxpool.ParseConfig(e.pg.URL)
	testenv.Must(t, err, "parse url")
	cfg.ConnConfig.User = role
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	testenv.Must(t, err, "connect as the relay's role")
	defer pool.Close()
	err = postgres.NewDriver(pool).CDC().Setup(ctx, e.pub)
	if err == nil || !strings.Contains(err.Error(), "must own") || strings.Contains(err.Error(), "courier migrate") {
		t.Errorf("Setup by a user who does not own the tables: %v; want the privileges it needs, and no hint to migrate", err)
	}
}
