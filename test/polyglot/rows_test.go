package polyglot

import (
	"context"
	"database/sql"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/contract"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// The rows each language's writer stores are the rows Go's inserters
// store for the same messages, column for column (but the row id and
// created_at), in courier_outbox and courier_outbox_scheduled (due_at
// too), on each database: the writer writes rowMessages in one
// transaction and schedules them at rowsDue in another, Go's Writer does
// the same in a database of its own, and the two are read back alike.
func TestRowsEqualGos(t *testing.T) {
	msgs := rowMessages(t)
	for _, w := range []writer{python, node} {
		t.Run(w.name, func(t *testing.T) {
			for _, db := range []struct {
				name string
				open func(t *testing.T) rowsDatabase
			}{
				{"sqlite", sqliteRows},
				{"mysql", mysqlRows},
				{"postgres", postgresRows},
			} {
				t.Run(db.name, func(t *testing.T) {
					theirs, gos := db.open(t), db.open(t)
					carryOut(t, w, plan{Dialect: db.name, Database: theirs.database, Transactions: rowsPlan(msgs)})
					gos.writeWithGo(t, msgs)
					compareRows(t, w.name, len(msgs), theirs.rows(t), gos.rows(t))
				})
			}
		})
	}
}

// rowsDue is when the scheduled copies of rowMessages fall due.
var rowsDue = time.Date(2031, 5, 6, 7, 8, 9, 654321000, time.UTC)

// rowMessages are the messages whose rows the test compares: the
// contract's valid vectors and ownMessages.
func rowMessages(t *testing.T) []courier.Message {
	var vectors contract.Messages
	testenv.Must(t, contract.Read("messages.json", &vectors), "read the contract's vectors")
	msgs := ownMessages()
	for _, v := range vectors.Valid {
		m, err := v.Message.Courier()
		testenv.Must(t, err, "vector "+v.Name)
		msgs = append(msgs, m)
	}
	return msgs
}

// ownMessages are messages beyond the vectors: every kind of payload,
// headers that JSON escapes (HTML characters, tabs, U+2028, control
// characters), none, text beyond ASCII, an occurrence before 1970.
func ownMessages() []courier.Message {
	at := time.Date(2026, 3, 1, 9, 30, 0, 123456000, time.UTC)
	msg := func(n int, key string, payload []byte, opts ...courier.Option) courier.Message {
		opts = append([]courier.Option{courier.WithID(uuid.MustParse(fmt.Sprintf("0195f3a2-7c00-7000-9000-%012d", n))),
			courier.WithOccurredAt(at)}, opts...)
		return courier.NewMessage("orders", key, "OrderPlaced", payload, opts...)
	}
	return []courier.Message{
		msg(1, "order-42", []byte(`{"order_id":"order-42","total":1999}`), courier.WithContentType(courier.ContentTypeJSON)),
		msg(2, "order-42", nil),
		msg(3, "заказ-ß ✓", []byte{0, 1, 0xfe, 0xff}, courier.WithVersion(7),
			courier.WithHeader("x-note", "<&> \"q\" \\ \t \u2028 ü \x01\x7f 😀"),
			courier.WithHeader("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
			courier.WithHeader("Courier-Correlation-Id", "checkout-7"), courier.WithHeader("a", "")),
		msg(4, "k", []byte("old"), courier.WithOccurredAt(time.Date(1969, 7, 20, 20, 17, 40, 999999000, time.UTC)),
			courier.WithContentType("text/plain; charset=utf-8")),
	}
}

// rowsPlan writes msgs in one transaction and schedules them at rowsDue
// in another.
func rowsPlan(msgs []courier.Message) []planTx {
	var planned []planMessage
	for _, m := range msgs {
		payload := base64.StdEncoding.EncodeToString(m.Payload)
		planned = append(planned, planMessage{ID: m.ID.String(), Topic: m.Topic, Key: m.Key, Type: m.Type, Version: m.Version,
			ContentType: m.ContentType, PayloadBase64: &payload, Headers: m.Headers, OccurredAt: m.OccurredAt.Format(time.RFC3339Nano)})
	}
	return []planTx{
		{Order: order{ID: "o1", Note: "write"}, Commit: true, Messages: planned},
		{Order: order{ID: "o2", Note: "schedule"}, Commit: true, Messages: planned,
			Due: map[string]any{"at": rowsDue.Format(time.RFC3339Nano)}},
	}
}

// rowsDatabase is a migrated database with polyglot_orders, as a plan
// names it, which Go writes to and reads back.
type rowsDatabase struct {
	database    map[string]string
	writeWithGo func(t *testing.T, msgs []courier.Message)
	rows        func(t *testing.T) map[string][][]any
}

// writeWith returns the function that writes msgs with Go's Writer on d in
// one transaction and schedules them at rowsDue in another.
func writeWith[TTx any](d store.Driver[TTx]) func(t *testing.T, msgs []courier.Message) {
	return func(t *testing.T, msgs []courier.Message) {
		ctx := context.Background()
		w := outbox.New(d.Inserter(), outbox.Config{})
		testenv.Must(t, d.InTx(ctx, func(tx TTx) error { return w.Write(ctx, tx, msgs...) }), "write with Go")
		testenv.Must(t, d.InTx(ctx, func(tx TTx) error { return w.Schedule(ctx, tx, outbox.At(rowsDue), msgs...) }), "schedule with Go")
	}
}

func sqliteRows(t *testing.T) rowsDatabase {
	path := filepath.Join(t.TempDir(), "outbox.db")
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open")
	t.Cleanup(func() { db.Close() })
	return sqlRowsDatabase(t, map[string]string{"path": path}, db, sqlite.NewDriver(db))
}

func mysqlRows(t *testing.T) rowsDatabase {
	my := testenv.MySQL(t, nil)
	url := my.PlainURL()
	return sqlRowsDatabase(t, map[string]string{"url": url}, my.DB, mysql.NewDriver(my.DB))
}

// sqlRowsDatabase migrates db with d and reads rowsQueries with
// database/sql, each value as the driver returns it.
func sqlRowsDatabase[TTx any](t *testing.T, database map[string]string, db *sql.DB, d store.Driver[TTx]) rowsDatabase {
	ctx := context.Background()
	_, err := d.Migrate(ctx)
	testenv.Must(t, err, "migrate")
	_, err = db.ExecContext(ctx, ordersTable)
	testenv.Must(t, err, "create polyglot_orders")
	return rowsDatabase{database: database, writeWithGo: writeWith(d), rows: func(t *testing.T) map[string][][]any {
		out := map[string][][]any{}
		for table, q := range rowsQueries {
			rows, err := db.QueryContext(ctx, q)
			testenv.Must(t, err, "read "+table)
			cols, _ := rows.Columns()
			for rows.Next() {
				vals := make([]any, len(cols))
				ptrs := make([]any, len(cols))
				for i := range vals {
					ptrs[i] = &vals[i]
				}
				testenv.Must(t, rows.Scan(ptrs...), "scan "+table)
				out[table] = append(out[table], vals)
			}
			testenv.Must(t, rows.Err(), "read "+table)
			rows.Close()
		}
		return out
	}}
}

// postgresRows reads rowsQueries with pgx, each value as pgx decodes it.
func postgresRows(t *testing.T) rowsDatabase {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	_, err := pg.Pool.Exec(ctx, ordersTable)
	testenv.Must(t, err, "create polyglot_orders")
	database := map[string]string{"url": testenv.Need(t, testenv.EnvPostgres), "schema": pg.Schema}
	return rowsDatabase{database: database, writeWithGo: writeWith(postgres.NewDriver(pg.Pool)), rows: func(t *testing.T) map[string][][]any {
		out := map[string][][]any{}
		for table, q := range rowsQueries {
			rows, err := pg.Pool.Query(ctx, q)
			testenv.Must(t, err, "read "+table)
			for rows.Next() {
				vals, err := rows.Values()
				testenv.Must(t, err, "scan "+table)
				out[table] = append(out[table], vals)
			}
			testenv.Must(t, rows.Err(), "read "+table)
		}
		return out
	}}
}

// rowsQueries read the compared columns of each table, in id order.
var rowsQueries = map[string]string{
	"courier_outbox":           "SELECT message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at FROM courier_outbox ORDER BY id",
	"courier_outbox_scheduled": "SELECT message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, due_at FROM courier_outbox_scheduled ORDER BY id",
}

// compareRows fails t for each value of the writer's rows that differs
// from Go's.
func compareRows(t *testing.T, lang string, want int, theirs, gos map[string][][]any) {
	t.Helper()
	for table := range rowsQueries {
		if len(theirs[table]) != want || len(gos[table]) != want {
			t.Fatalf("%s: %d rows from %s, %d from Go, want %d", table, len(theirs[table]), lang, len(gos[table]), want)
		}
		list, _, _ := strings.Cut(strings.TrimPrefix(rowsQueries[table], "SELECT "), " FROM")
		names := strings.Split(list, ", ")
		for i := range theirs[table] {
			for j := range theirs[table][i] {
				if p, g := theirs[table][i][j], gos[table][i][j]; !reflect.DeepEqual(p, g) {
					t.Errorf("%s row %d, %s: %s wrote %#v, Go %#v", table, i+1, names[j], lang, p, g)
				}
			}
		}
	}
}
