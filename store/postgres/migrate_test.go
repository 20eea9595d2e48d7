package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

func TestMigrateFreshThenAgain(t *testing.T) {
	pg := testenv.Postgres(t, false)
	ctx := context.Background()
	if err := postgres.CheckSchema(ctx, pg.Pool); !errors.Is(err, store.ErrSchemaOutdated) {
		t.Fatalf("CheckSchema on an empty schema = %v, want ErrSchemaOutdated", err)
	}
	if _, err := postgres.NewStore(ctx, pg.Pool, postgres.StoreConfig{}); !errors.Is(err, store.ErrSchemaOutdated) {
		t.Fatalf("NewStore on an empty schema = %v, want ErrSchemaOutdated", err)
	}
	applied, err := postgres.Migrate(ctx, pg.Pool)
	testenv.Must(t, err, "migrate")
	latest := store.Latest(postgres.Migrations())
	if len(applied) != latest {
		t.Fatalf("applied %v on a fresh schema, want all %d migrations", applied, latest)
	}
	for _, table := range []string{"courier_outbox", "courier_outbox_dead_letters", "courier_schema_migrations"} {
		var exists bool
		testenv.Must(t, pg.Pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists), "regclass")
		if !exists {
			t.Fatalf("table %s missing after migrate", table)
		}
	}
	testenv.Must(t, postgres.CheckSchema(ctx, pg.Pool), "check schema")
	again, err := postgres.Migrate(ctx, pg.Pool)
	testenv.Must(t, err, "migrate again")
	if len(again) != 0 {
		t.Fatalf("second migrate applied %v, want nothing", again)
	}
}

func TestMigrateConcurrently(t *testing.T) {
	pg := testenv.Postgres(t, false)
	var wg sync.WaitGroup
	total := make(chan int, 5)
	for range 5 {
		wg.Go(func() {
			applied, err := postgres.Migrate(context.Background(), pg.Pool)
			if err != nil {
				t.Errorf("concurrent migrate: %v", err)
			}
			total <- len(applied)
		})
	}
	wg.Wait()
	close(total)
	sum := 0
	for n := range total {
		sum += n
	}
	if want := store.Latest(postgres.Migrations()); sum != want {
		t.Fatalf("concurrent migrations applied %d steps in all, want %d (each once)", sum, want)
	}
}

func TestSchemaNewerThanBinary(t *testing.T) {
	pg := testenv.Postgres(t, true)
	ctx := context.Background()
	_, err := pg.Pool.Exec(ctx, "INSERT INTO courier_schema_migrations (version, name) VALUES (999, 'from the future')")
	testenv.Must(t, err, "insert future version")
	if _, err := postgres.Migrate(ctx, pg.Pool); !errors.Is(err, store.ErrSchemaNewer) {
		t.Fatalf("Migrate = %v, want ErrSchemaNewer", err)
	}
	if err := postgres.CheckSchema(ctx, pg.Pool); !errors.Is(err, store.ErrSchemaNewer) {
		t.Fatalf("CheckSchema = %v, want ErrSchemaNewer", err)
	}
	if _, err := postgres.NewStore(ctx, pg.Pool, postgres.StoreConfig{}); !errors.Is(err, store.ErrSchemaNewer) {
		t.Fatalf("NewStore = %v, want ErrSchemaNewer", err)
	}
}

// The exported scripts, run by some other tool, leave a schema Courier
// accepts; running them twice is harmless only up to the version record, so
// tools must run each once, as they do.
func TestExportedSQLBuildsTheSchema(t *testing.T) {
	pg := testenv.Postgres(t, false)
	ctx := context.Background()
	for _, m := range postgres.ExportSQL() {
		_, err := pg.Pool.Exec(ctx, m.SQL)
		testenv.Must(t, err, "run exported migration "+m.Name)
	}
	testenv.Must(t, postgres.CheckSchema(ctx, pg.Pool), "check schema after exported SQL")
	applied, err := postgres.Migrate(ctx, pg.Pool)
	testenv.Must(t, err, "migrate after export")
	if len(applied) != 0 {
		t.Fatalf("Migrate after the exported SQL applied %v again", applied)
	}
}

func TestMigrationFilesAreNumbered(t *testing.T) {
	ms := postgres.Migrations()
	if len(ms) == 0 {
		t.Fatal("no migrations embedded")
	}
	for i, m := range ms {
		if m.Version != i+1 || m.Name == "" || m.SQL == "" {
			t.Fatalf("migration %d: %+v", i, m)
		}
	}
}
