package dburl_test

import (
	"context"
	"testing"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/dburl"
)

// A schema CreateSchema made carries its mark, and DropMarkedSchema drops
// it; a schema made otherwise, or with another mark, is left as it is.
func TestMarkedSchemas(t *testing.T) {
	ctx := context.Background()
	pg := testenv.Postgres(t, nil)
	const mark = `made by the test's "program" – it's its own`
	mine, err := dburl.WithSchema(pg.URL, testenv.Name("t_mine_"))
	testenv.Must(t, err, "with schema")
	theirs, err := dburl.WithSchema(pg.URL, testenv.Name("t_theirs_"))
	testenv.Must(t, err, "with schema")
	for _, raw := range []string{mine, theirs} {
		t.Cleanup(func() { _ = dburl.DropSchema(context.Background(), raw) })
	}
	theirName, err := dburl.Schema(theirs)
	testenv.Must(t, err, "schema")
	_, err = pg.Admin.Exec(ctx, "CREATE SCHEMA "+theirName)
	testenv.Must(t, err, "their schema")

	if created, err := dburl.CreateSchema(ctx, mine, mark); err != nil || !created {
		t.Fatalf("CreateSchema = %v, %v; want it created", created, err)
	}
	if created, err := dburl.CreateSchema(ctx, theirs, mark); err != nil || created {
		t.Fatalf("CreateSchema of an existing schema = %v, %v; want it left", created, err)
	}
	for _, c := range []struct {
		raw, mark      string
		exists, marked bool
	}{{mine, mark, true, true}, {mine, "another mark", true, false}, {theirs, mark, true, false}} {
		if exists, marked, err := dburl.SchemaMarked(ctx, c.raw, c.mark); err != nil || exists != c.exists || marked != c.marked {
			t.Errorf("SchemaMarked(%s, %q) = %v, %v, %v; want %v, %v", c.raw, c.mark, exists, marked, err, c.exists, c.marked)
		}
	}
	for _, c := range []struct {
		raw, mark string
		dropped   bool
	}{{theirs, mark, false}, {mine, "another mark", false}, {mine, mark, true}, {mine, mark, false}} {
		if dropped, err := dburl.DropMarkedSchema(ctx, c.raw, c.mark); err != nil || dropped != c.dropped {
			t.Errorf("DropMarkedSchema(%s, %q) = %v, %v; want %v", c.raw, c.mark, dropped, err, c.dropped)
		}
	}
	if exists, _, err := dburl.SchemaMarked(ctx, theirs, mark); err != nil || !exists {
		t.Fatalf("their schema after the drops: exists %v, %v", exists, err)
	}
	// Other dialects name no schema: nothing to do.
	if s, err := dburl.Schema("sqlite:x.db"); s != "" || err != nil {
		t.Errorf("Schema(sqlite:x.db) = %q, %v; want none", s, err)
	}
	if created, err := dburl.CreateSchema(ctx, "sqlite:x.db", mark); created || err != nil {
		t.Errorf("CreateSchema on SQLite = %v, %v; want nothing done", created, err)
	}
}
