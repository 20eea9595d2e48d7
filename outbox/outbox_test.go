package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

type order struct {
	outbox.Events
	ID     string
	Status string
}

func (o *order) Place() error {
	o.Status = "placed"
	return o.RecordJSON("orders", o.ID, struct {
		ID string `json:"id"`
	}{o.ID}, courier.WithType("OrderPlaced"))
}

func count(t *testing.T, pg *testenv.PG) (n int) {
	t.Helper()
	testenv.Must(t, pg.Pool.QueryRow(context.Background(), "SELECT count(*) FROM courier_outbox").Scan(&n), "count")
	return n
}

// database is a migrated outbox the writer tests run on, with the
// transaction type TTx of its driver.
type database[TTx any] struct {
	writer   func(outbox.Config) *outbox.Writer[TTx]
	begin    func(t *testing.T) TTx
	commit   func(TTx) error
	rollback func(TTx) error
	// count returns the number of outbox rows.
	count func(t *testing.T) int
}

// onEachDatabase runs a writer test on SQLite (*sql.Tx) and on PostgreSQL
// (pgx.Tx; skipped when COURIER_TEST_POSTGRES_URL is unset). Pass the
// generic test body twice: Go instantiates it once per transaction type.
func onEachDatabase(t *testing.T, onSQL func(*testing.T, database[*sql.Tx]), onPgx func(*testing.T, database[pgx.Tx])) {
	ctx := context.Background()
	t.Run("sqlite", func(t *testing.T) {
		db, err := sqlite.Open(filepath.Join(t.TempDir(), "app.db"))
		testenv.Must(t, err, "open")
		t.Cleanup(func() { db.Close() })
		_, err = sqlite.Migrate(ctx, db)
		testenv.Must(t, err, "migrate")
		onSQL(t, database[*sql.Tx]{
			writer: func(cfg outbox.Config) *outbox.Writer[*sql.Tx] { return outbox.New(sqlite.DatabaseSQL(), cfg) },
			begin: func(t *testing.T) *sql.Tx {
				tx, err := db.BeginTx(ctx, nil)
				testenv.Must(t, err, "begin")
				return tx
			},
			commit:   func(tx *sql.Tx) error { return tx.Commit() },
			rollback: func(tx *sql.Tx) error { return tx.Rollback() },
			count: func(t *testing.T) (n int) {
				testenv.Must(t, db.QueryRow("SELECT count(*) FROM courier_outbox").Scan(&n), "count")
				return n
			},
		})
	})
	t.Run("postgres", func(t *testing.T) {
		pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
		onPgx(t, database[pgx.Tx]{
			writer: func(cfg outbox.Config) *outbox.Writer[pgx.Tx] { return outbox.New(postgres.Pgx(), cfg) },
			begin: func(t *testing.T) pgx.Tx {
				tx, err := pg.Pool.Begin(ctx)
				testenv.Must(t, err, "begin")
				return tx
			},
			commit:   func(tx pgx.Tx) error { return tx.Commit(ctx) },
			rollback: func(tx pgx.Tx) error { return tx.Rollback(ctx) },
			count:    func(t *testing.T) int { return count(t, pg) },
		})
	})
}

func TestInvalidMessageWritesNothing(t *testing.T) {
	onEachDatabase(t, testInvalidMessageWritesNothing, testInvalidMessageWritesNothing)
}

func testInvalidMessageWritesNothing[TTx any](t *testing.T, db database[TTx]) {
	ctx := context.Background()
	w := db.writer(outbox.Config{})
	tx := db.begin(t)
	good := courier.NewMessage("orders", "o-1", "OrderPlaced", nil)
	bad := courier.NewMessage("orders", "", "OrderPlaced", nil)
	err := w.Write(ctx, tx, good, bad)
	if !errors.Is(err, courier.ErrInvalidMessage) || err.Error() != `outbox: message 2 of 2: courier: message.Key is empty: set the ordering key, usually the aggregate id such as "order-42"` {
		t.Fatalf("Write = %v", err)
	}
	testenv.Must(t, db.commit(tx), "commit")
	if n := db.count(t); n != 0 {
		t.Fatalf("%d rows written despite an invalid message", n)
	}
}

func TestWriteEventsClearsOnlyOnSuccess(t *testing.T) {
	onEachDatabase(t, testWriteEventsClearsOnlyOnSuccess, testWriteEventsClearsOnlyOnSuccess)
}

func testWriteEventsClearsOnlyOnSuccess[TTx any](t *testing.T, db database[TTx]) {
	ctx := context.Background()
	w := db.writer(outbox.Config{Limits: courier.Limits{MaxPayloadBytes: 64}})
	o1, o2 := &order{ID: "o-1"}, &order{ID: "o-2"}
	testenv.Must(t, o1.Place(), "place")
	testenv.Must(t, o2.Place(), "place")

	tx := db.begin(t)
	testenv.Must(t, w.WriteEvents(ctx, tx, o1, o2), "write events")
	if len(o1.PendingEvents())+len(o2.PendingEvents()) != 0 {
		t.Fatal("events not cleared after a successful write")
	}
	testenv.Must(t, w.WriteEvents(ctx, tx, o1, o2), "write events again") // nothing left: a no-op
	testenv.Must(t, db.commit(tx), "commit")
	if n := db.count(t); n != 2 {
		t.Fatalf("%d rows, want 2 (each event once)", n)
	}

	o3 := &order{ID: "o-3"}
	o3.Record(courier.NewMessage("orders", "o-3", "Huge", make([]byte, 65)))
	tx = db.begin(t)
	defer func() { _ = db.rollback(tx) }()
	if err := w.WriteEvents(ctx, tx, o3); !errors.Is(err, courier.ErrInvalidMessage) {
		t.Fatalf("WriteEvents = %v, want the payload limit error", err)
	}
	if len(o3.PendingEvents()) != 1 {
		t.Fatal("events cleared although writing failed")
	}
}

func TestDatabaseSQLManyMessages(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	db, err := sql.Open("pgx", pg.URL)
	testenv.Must(t, err, "open")
	defer db.Close()
	w := outbox.New(postgres.DatabaseSQL(), outbox.Config{})
	msgs := make([]courier.Message, 2500) // more than one statement's worth
	for i := range msgs {
		msgs[i] = courier.NewMessage("t", fmt.Sprintf("k-%d", i%7), "T", []byte{byte(i)})
		if i%2 == 0 {
			msgs[i].SetHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	testenv.Must(t, err, "begin")
	testenv.Must(t, w.Write(ctx, tx, msgs...), "write")
	testenv.Must(t, tx.Commit(), "commit")
	if n := count(t, pg); n != 2500 {
		t.Fatalf("%d rows, want 2500", n)
	}
	var withHeaders int
	testenv.Must(t, pg.Pool.QueryRow(ctx, "SELECT count(*) FROM courier_outbox WHERE headers->>'traceparent' IS NOT NULL").Scan(&withHeaders), "count headers")
	if withHeaders != 1250 {
		t.Fatalf("%d rows with headers, want 1250", withHeaders)
	}
	var first string
	testenv.Must(t, pg.Pool.QueryRow(ctx, "SELECT message_id::text FROM courier_outbox ORDER BY id LIMIT 1").Scan(&first), "first")
	if first != msgs[0].ID.String() {
		t.Fatalf("first row is %s, want the first message %s: insertion order lost", first, msgs[0].ID)
	}
}
