package storetest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/store"
)

// A fresh database needs every migration; Migrate applies them once, and
// running it again is a no-op.
func testMigrations[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, false)
	ctx := context.Background()
	ms := db.Migrations()
	if len(ms) == 0 {
		t.Fatal("no migrations embedded")
	}
	for i, m := range ms {
		if m.Version != i+1 || m.Name == "" || strings.TrimSpace(m.SQL) == "" {
			t.Fatalf("migration %d: version %d, name %q, %d bytes of SQL", i, m.Version, m.Name, len(m.SQL))
		}
	}
	latest := store.Latest(ms)
	if v, err := db.SchemaVersion(ctx); err != nil || v != 0 {
		t.Fatalf("SchemaVersion of an empty database = %d, %v; want 0, nil", v, err)
	}
	if err := db.CheckSchema(ctx); !errors.Is(err, store.ErrSchemaOutdated) {
		t.Fatalf("CheckSchema of an empty database = %v, want ErrSchemaOutdated", err)
	}
	if _, err := db.RelayStore(ctx, store.RelayConfig{}); !errors.Is(err, store.ErrSchemaOutdated) {
		t.Fatalf("RelayStore on an empty database = %v, want ErrSchemaOutdated", err)
	}
	applied, err := db.Migrate(ctx)
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	want := make([]int, latest)
	for i := range want {
		want[i] = i + 1
	}
	if !slices.Equal(applied, want) {
		t.Fatalf("Migrate applied %v on a fresh database, want %v", applied, want)
	}
	if v, err := db.SchemaVersion(ctx); err != nil || v != latest {
		t.Fatalf("SchemaVersion after Migrate = %d, %v; want %d", v, err, latest)
	}
	if err := db.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after Migrate: %v", err)
	}
	for _, table := range []string{"courier_outbox", "courier_outbox_leases", "courier_outbox_published", "courier_outbox_dead_letters",
		"courier_inbox", "courier_inbox_dead_letters", "courier_inbox_failures", "courier_idempotency_keys", "courier_schema_migrations"} {
		db.count(t, table) // fails the test when the table is missing
	}
	again, err := db.Migrate(ctx)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Migrate applied %v (%v), want nothing", again, err)
	}
	if _, err := db.RelayStore(ctx, store.RelayConfig{}); err != nil {
		t.Fatalf("RelayStore after Migrate: %v", err)
	}
}

// Concurrent Migrate calls wait for one another: each step is applied once.
func testMigrateConcurrently[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, false)
	var wg sync.WaitGroup
	total := make(chan int, 5)
	for range 5 {
		wg.Go(func() {
			applied, err := db.Migrate(context.Background())
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
	if want := store.Latest(db.Migrations()); sum != want {
		t.Fatalf("concurrent migrations applied %d steps in all, want %d (each once)", sum, want)
	}
	if err := db.CheckSchema(context.Background()); err != nil {
		t.Fatalf("CheckSchema after concurrent migrations: %v", err)
	}
}

// A database migrated by a newer Courier is refused everywhere.
func testSchemaNewer[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	ctx := context.Background()
	db.exec(t, "INSERT INTO courier_schema_migrations (version, name) VALUES (999, 'from the future')")
	if v, err := db.SchemaVersion(ctx); err != nil || v != 999 {
		t.Fatalf("SchemaVersion = %d, %v; want 999", v, err)
	}
	if _, err := db.Migrate(ctx); !errors.Is(err, store.ErrSchemaNewer) {
		t.Fatalf("Migrate = %v, want ErrSchemaNewer", err)
	}
	if err := db.CheckSchema(ctx); !errors.Is(err, store.ErrSchemaNewer) {
		t.Fatalf("CheckSchema = %v, want ErrSchemaNewer", err)
	}
	if _, err := db.RelayStore(ctx, store.RelayConfig{}); !errors.Is(err, store.ErrSchemaNewer) {
		t.Fatalf("RelayStore = %v, want ErrSchemaNewer", err)
	}
}

// A database that lacks a migration is refused until it is migrated.
func testSchemaOutdated[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	ctx := context.Background()
	latest := store.Latest(db.Migrations())
	db.exec(t, "DELETE FROM courier_schema_migrations WHERE version = ?", latest)
	if err := db.CheckSchema(ctx); !errors.Is(err, store.ErrSchemaOutdated) {
		t.Fatalf("CheckSchema = %v, want ErrSchemaOutdated", err)
	}
	if _, err := db.RelayStore(ctx, store.RelayConfig{}); !errors.Is(err, store.ErrSchemaOutdated) {
		t.Fatalf("RelayStore = %v, want ErrSchemaOutdated", err)
	}
}

// The exported scripts, run by another tool, build a schema the dialect
// accepts and works on, and that Migrate leaves alone.
func testExportedSQL[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, false)
	ctx := context.Background()
	exported, ms := db.ExportSQL(), db.Migrations()
	if len(exported) != len(ms) {
		t.Fatalf("%d exported scripts for %d migrations", len(exported), len(ms))
	}
	for i, m := range exported {
		if m.Version != ms[i].Version || m.Name != ms[i].Name || !strings.Contains(m.SQL, "courier_schema_migrations") {
			t.Fatalf("exported script %d: version %d, name %q; want %d, %q, recording itself in courier_schema_migrations",
				i, m.Version, m.Name, ms[i].Version, ms[i].Name)
		}
		if err := db.execScript(ctx, m.SQL); err != nil {
			t.Fatalf("run exported migration %04d_%s: %v", m.Version, m.Name, err)
		}
	}
	if err := db.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after the exported SQL: %v", err)
	}
	if applied, err := db.Migrate(ctx); err != nil || len(applied) != 0 {
		t.Fatalf("Migrate after the exported SQL applied %v (%v), want nothing", applied, err)
	}
	st := db.newStore(t, true)
	db.write(t, numbered(3, 2, "k")...)
	b := claim(t, st, "r", 10, time.Minute)
	complete(t, st, "r", b, store.Outcome{
		Published: seqs(b.Records[1:2]),
		Retry:     []store.Failure{{Seq: b.Records[0].Seq, Error: "x", Delay: time.Hour, Counted: true}},
		Dead:      []store.Failure{{Seq: b.Records[2].Seq, Error: "y", Counted: true}},
	})
	if s := stats(t, st); s.Pending != 1 || s.InBackoff != 1 || s.DeadLetters != 1 || db.count(t, "courier_outbox_published") != 1 {
		t.Fatalf("on the exported schema: %+v, %d archived", s, db.count(t, "courier_outbox_published"))
	}
	if !mark(t, db.Inbox(), "exported", uuid.New(), true) {
		t.Fatal("on the exported schema: a fresh inbox marker was reported as a duplicate")
	}
	c := keyClaim("exported", "k", []byte("fp"), time.Minute, time.Hour)
	if _, mine, err := db.Idempotency().Claim(ctx, c); err != nil || !mine {
		t.Fatalf("on the exported schema: claim of a fresh idempotency key = %v, %v; want it owned", mine, err)
	}
}
