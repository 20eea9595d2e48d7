package storetest

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
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
	refused(t, db, store.ErrSchemaOutdated) // an empty database
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
	refused(t, db, store.ErrSchemaNewer)
}

// A database that lacks a migration is refused until it is migrated.
func testSchemaOutdated[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	db.exec(t, "DELETE FROM courier_schema_migrations WHERE version = ?", store.Latest(db.Migrations()))
	refused(t, db, store.ErrSchemaOutdated)
}

// refused fails unless CheckSchema and RelayStore both refuse the database
// with want.
func refused[TTx any](t *testing.T, db *testDB[TTx], want error) {
	t.Helper()
	if err := db.CheckSchema(context.Background()); !errors.Is(err, want) {
		t.Fatalf("CheckSchema = %v, want %v", err, want)
	}
	if _, err := db.RelayStore(context.Background(), store.RelayConfig{}); !errors.Is(err, want) {
		t.Fatalf("RelayStore = %v, want %v", err, want)
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

// Admin shows relay-side dead letters as they died (when the driver's clock
// says), oldest first; a replay puts one back into the outbox under its
// original id, before the later messages of its key, with no attempts counted
// and its history kept; a discard deletes it; both report ErrNotFound for what
// is not there.
func testAdminDeadLetters[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	f := &deadFixture[TTx]{t: t, db: db, st: db.newStore(t, false), a: db.Admin()}
	f.kill()
	f.checkDeadLetters()
	f.replay()
	f.discard()
}

// deadFixture is testAdminDeadLetters' database: its relay store and
// Admin, the first message (which dies and is replayed), and the rows'
// seqs: first's, the second of first's key (released), and other's (dies
// and is discarded).
type deadFixture[TTx any] struct {
	t                          *testing.T
	db                         *testDB[TTx]
	st                         store.RelayStore
	a                          store.Admin
	first                      courier.Message
	written, died              time.Time
	firstSeq, secondSeq, other int64
}

// occurredAt is when the first message of testAdminDeadLetters occurred.
var occurredAt = time.Date(2024, 2, 29, 23, 59, 58, 123456789, time.UTC)

// kill writes three messages, two of one key, and has the first and the
// third die, an hour on the driver's clock from the database's.
func (f *deadFixture[TTx]) kill() {
	t := f.t
	f.first = courier.NewMessage("orders", "order-1", "OrderPlaced", []byte(`{"total":42}`),
		courier.WithVersion(2), courier.WithContentType(courier.ContentTypeJSON), courier.WithOccurredAt(occurredAt),
		courier.WithHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	second := courier.NewMessage("orders", "order-1", "OrderShipped", nil)
	other := courier.NewMessage("orders", "order-2", "OrderPlaced", nil)
	f.written = time.Now()
	f.db.write(t, f.first, second, other)

	// first and other die; second is released and waits. They die at the
	// driver's clock, an hour from the database's.
	f.db.clock.Advance(time.Hour)
	b := claim(t, f.st, "r", 10, time.Minute)
	if len(b.Records) != 3 {
		t.Fatalf("claimed %d rows, want 3", len(b.Records))
	}
	f.firstSeq, f.secondSeq, f.other = b.Records[0].Seq, b.Records[1].Seq, b.Records[2].Seq
	f.died = f.db.clock.Now()
	complete(t, f.st, "r", b, store.Outcome{Dead: []store.Failure{
		{Seq: f.firstSeq, Error: "message too large", Counted: true},
		{Seq: f.other, Error: "invalid subject", Counted: true},
	}})
}

// missing is an id no dead letter has.
func (f *deadFixture[TTx]) missing() int64 { return f.other + 1000 }

// checkDeadLetters lists the dead letters, oldest first, and reads them as
// they died.
func (f *deadFixture[TTx]) checkDeadLetters() {
	t, ctx, a, first := f.t, context.Background(), f.a, f.first
	list, err := a.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatalf("DeadLetters: %v", err)
	}
	if got := deadIDs(list); !slices.Equal(got, []int64{f.firstSeq, f.other}) {
		t.Fatalf("DeadLetters = %v, want %v (oldest first)", got, []int64{f.firstSeq, f.other})
	}
	if one, err := a.DeadLetters(ctx, 1); err != nil || !slices.Equal(deadIDs(one), []int64{f.firstSeq}) {
		t.Fatalf("DeadLetters(limit 1) = %v, %v; want %v", deadIDs(one), err, []int64{f.firstSeq})
	}
	d, err := a.DeadLetter(ctx, f.firstSeq)
	if err != nil {
		t.Fatalf("DeadLetter(%d): %v", f.firstSeq, err)
	}
	switch {
	case d.ID != f.firstSeq || d.MessageID != first.ID.String() || d.Topic != first.Topic || d.Key != first.Key ||
		d.Type != first.Type || d.Version != first.Version || d.ContentType != first.ContentType:
		t.Errorf("dead letter %+v does not describe message %s", d, first.ID)
	case !bytes.Equal(d.Payload, first.Payload) || !maps.Equal(d.Headers, first.Headers):
		t.Errorf("dead letter: payload %q headers %v, want %q %v", d.Payload, d.Headers, first.Payload, first.Headers)
	case !d.OccurredAt.Equal(occurredAt.Truncate(time.Microsecond)):
		t.Errorf("dead letter occurred at %s, want %s", d.OccurredAt, occurredAt.Truncate(time.Microsecond))
	case d.Attempts != 1 || d.LastError != "message too large" || len(d.History) != 1 || d.History[0].Error != "message too large" || !d.History[0].Counted:
		t.Errorf("dead letter: %d attempts, last error %q, history %+v; want 1, the failure, one entry marked counted", d.Attempts, d.LastError, d.History)
	}
	near(t, "created_at", d.CreatedAt, f.written, clockMargin)
	near(t, "dead_at", d.DeadAt, f.died, clockMargin)
	if len(d.History) == 1 {
		near(t, "history time", d.History[0].At, f.died, clockMargin)
	}
	if o, err := a.DeadLetter(ctx, f.other); err != nil || o.Payload == nil || len(o.Payload) != 0 || len(o.Headers) != 0 {
		t.Errorf("DeadLetter(%d) = %+v, %v; want an empty payload (never nil) and no headers", f.other, o, err)
	}
	if _, err := a.DeadLetter(ctx, f.missing()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeadLetter(missing) = %v, want ErrNotFound", err)
	}
	if s, err := a.Stats(ctx); err != nil || s.Pending != 1 || s.DeadLetters != 2 {
		t.Fatalf("Admin.Stats = %+v, %v; want 1 pending, 2 dead letters", s, err)
	}
}

// replay puts the first dead letter back under its id, ahead of its key's
// later message, with no attempts counted and its history kept.
func (f *deadFixture[TTx]) replay() {
	t, ctx, a := f.t, context.Background(), f.a
	if err := a.ReplayDeadLetter(ctx, f.firstSeq); err != nil {
		t.Fatalf("ReplayDeadLetter: %v", err)
	}
	if err := a.ReplayDeadLetter(ctx, f.firstSeq); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReplayDeadLetter twice = %v, want ErrNotFound", err)
	}
	if _, err := a.DeadLetter(ctx, f.firstSeq); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeadLetter(replayed) = %v, want ErrNotFound", err)
	}
	if s, err := a.Stats(ctx); err != nil || s.Pending != 2 || s.DeadLetters != 1 {
		t.Fatalf("Admin.Stats after the replay = %+v, %v; want 2 pending, 1 dead letter", s, err)
	}
	if fs, _ := f.db.failures(t, f.firstSeq); fs.Attempts != 0 || fs.LastError != "" || len(fs.History) != 1 {
		t.Fatalf("replayed row: %d attempts, last error %q, %d history entries; want 0, none, the 1 kept", fs.Attempts, fs.LastError, len(fs.History))
	}
	again := claim(t, f.st, "r", 10, time.Minute)
	if got := seqs(again.Records); !slices.Equal(got, []int64{f.firstSeq, f.secondSeq}) {
		t.Fatalf("claim after the replay = %v, want %v: the replayed message first, under its id", got, []int64{f.firstSeq, f.secondSeq})
	}
	sameMessage(t, again.Records[0].Message, f.first)
	if again.Records[0].Attempts != 0 {
		t.Errorf("replayed message claimed with %d attempts, want 0", again.Records[0].Attempts)
	}
	complete(t, f.st, "r", again, store.Outcome{Published: seqs(again.Records)})
}

// discard deletes the other dead letter, once.
func (f *deadFixture[TTx]) discard() {
	t, ctx, a := f.t, context.Background(), f.a
	if err := a.DiscardDeadLetter(ctx, f.other); err != nil {
		t.Fatalf("DiscardDeadLetter: %v", err)
	}
	if err := a.DiscardDeadLetter(ctx, f.other); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DiscardDeadLetter twice = %v, want ErrNotFound", err)
	}
	if err := a.ReplayDeadLetter(ctx, f.missing()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReplayDeadLetter(missing) = %v, want ErrNotFound", err)
	}
	if list, err := a.DeadLetters(ctx, 10); err != nil || len(list) != 0 {
		t.Fatalf("DeadLetters at the end = %v, %v; want none", deadIDs(list), err)
	}
	if s, err := a.Stats(ctx); err != nil || s.Pending != 0 || s.DeadLetters != 0 {
		t.Fatalf("Admin.Stats at the end = %+v, %v; want nothing left", s, err)
	}
}

func deadIDs(ds []store.DeadLetter) []int64 {
	out := []int64{}
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}
