package python_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/contract"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// rowsDue is when the scheduled copies of the messages fall due.
var rowsDue = time.Date(2031, 5, 6, 7, 8, 9, 654321000, time.UTC)

// rowMessages are the messages whose rows the test compares: the
// contract's valid vectors, and every kind of payload, headers that JSON
// escapes (HTML characters, tabs, U+2028), none, text beyond ASCII, an
// occurrence before 1970.
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

// ownMessages are rowMessages beyond the vectors.
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
			courier.WithHeader("x-note", "<&> \"q\" \\ \t \u2028 ü \x01\x7f"),
			courier.WithHeader("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
			courier.WithHeader("Courier-Correlation-Id", "checkout-7"), courier.WithHeader("a", "")),
		msg(4, "k", []byte("old"), courier.WithOccurredAt(time.Date(1969, 7, 20, 20, 17, 40, 999999000, time.UTC)),
			courier.WithContentType("text/plain; charset=utf-8")),
	}
}

// The rows courier_outbox gets from Python are the rows Go's inserter
// writes for the same messages, column for column (but the row id and
// created_at), in courier_outbox and courier_outbox_scheduled (where
// due_at is compared too), on each database.
func TestRowsEqualGos(t *testing.T) {
	py := testenv.Python(t)
	msgs := rowMessages(t)
	t.Run("sqlite", func(t *testing.T) {
		pyPath, goPath := sqliteDB(t), sqliteDB(t)
		pyDB, goDB := openSQLite(t, pyPath), openSQLite(t, goPath)
		writeWithPython(t, py, msgs, map[string]any{"dialect": "sqlite", "database": map[string]string{"path": pyPath}}, pyDB.ExecContext)
		writeWithGo(t, sqlite.NewDriver(goDB), msgs)
		compareRows(t, len(msgs), sqlRows(t, pyDB), sqlRows(t, goDB))
	})
	t.Run("mysql", func(t *testing.T) {
		pyDB, goDB := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver)), testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
		writeWithPython(t, py, msgs, map[string]any{"dialect": "mysql", "database": map[string]string{"url": mysqlURL(t, pyDB.DSN)}}, pyDB.DB.ExecContext)
		writeWithGo(t, mysql.NewDriver(goDB.DB), msgs)
		compareRows(t, len(msgs), sqlRows(t, pyDB.DB), sqlRows(t, goDB.DB))
	})
	t.Run("postgres", func(t *testing.T) {
		pyPG, goPG := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver)), testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
		create := func(ctx context.Context, q string, _ ...any) (any, error) { return pyPG.Pool.Exec(ctx, q) }
		writeWithPython(t, py, msgs, map[string]any{"dialect": "postgres",
			"database": map[string]string{"url": os.Getenv(testenv.EnvPostgres), "schema": pyPG.Schema}}, create)
		writeWithGo(t, postgres.NewDriver(goPG.Pool), msgs)
		compareRows(t, len(msgs), pgRows(t, pyPG.Pool), pgRows(t, goPG.Pool))
	})
}

func openSQLite(t *testing.T, path string) *sql.DB {
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open")
	t.Cleanup(func() { db.Close() })
	return db
}

// writeWithPython has tests/e2e_writer.py write msgs in one
// transaction and schedule them at rowsDue in another, on the plan's
// database, after create made the plan's business table.
func writeWithPython[R any](t *testing.T, py string, msgs []courier.Message, p map[string]any, create func(context.Context, string, ...any) (R, error)) {
	t.Helper()
	_, err := create(context.Background(), "CREATE TABLE polyglot_orders (id VARCHAR(64) PRIMARY KEY, note TEXT NOT NULL)")
	testenv.Must(t, err, "create polyglot_orders")
	var planned []map[string]any
	for _, m := range msgs {
		pm := map[string]any{"id": m.ID.String(), "topic": m.Topic, "key": m.Key, "type": m.Type, "version": m.Version,
			"content_type": m.ContentType, "payload_base64": base64.StdEncoding.EncodeToString(m.Payload),
			"occurred_at": m.OccurredAt.Format(time.RFC3339Nano)}
		if m.Headers != nil {
			pm["headers"] = m.Headers
		}
		planned = append(planned, pm)
	}
	p["transactions"] = []map[string]any{
		{"order": map[string]string{"id": "o1", "note": "write"}, "commit": true, "messages": planned},
		{"order": map[string]string{"id": "o2", "note": "schedule"}, "commit": true, "messages": planned,
			"due": map[string]string{"at": rowsDue.Format(time.RFC3339Nano)}},
	}
	in, err := json.Marshal(p)
	testenv.Must(t, err, "encode plan")
	cmd := exec.Command(py, filepath.Join("tests", "e2e_writer.py"))
	cmd.Env = append(os.Environ(), "PYTHONPATH=.", "PYTHONDONTWRITEBYTECODE=1")
	cmd.Stdin = bytes.NewReader(in)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("e2e_writer.py: %v\n%s", err, out)
	}
}

// writeWithGo writes msgs with Go's Writer on d in one transaction and
// schedules them at rowsDue in another.
func writeWithGo[TTx any](t *testing.T, d store.Driver[TTx], msgs []courier.Message) {
	t.Helper()
	ctx := context.Background()
	w := outbox.New(d.Inserter(), outbox.Config{})
	testenv.Must(t, d.InTx(ctx, func(tx TTx) error { return w.Write(ctx, tx, msgs...) }), "write with Go")
	testenv.Must(t, d.InTx(ctx, func(tx TTx) error { return w.Schedule(ctx, tx, outbox.At(rowsDue), msgs...) }), "schedule with Go")
}

// rowsQueries read the compared columns of each table, in id order.
var rowsQueries = map[string]string{
	"courier_outbox":           "SELECT message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at FROM courier_outbox ORDER BY id",
	"courier_outbox_scheduled": "SELECT message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, due_at FROM courier_outbox_scheduled ORDER BY id",
}

// sqlRows reads rowsQueries on db, each value as the driver returns it.
func sqlRows(t *testing.T, db *sql.DB) map[string][][]any {
	t.Helper()
	out := map[string][][]any{}
	for table, q := range rowsQueries {
		rows, err := db.Query(q)
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
}

// pgRows reads rowsQueries on PostgreSQL, each value as pgx decodes it.
func pgRows(t *testing.T, pool interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) map[string][][]any {
	t.Helper()
	out := map[string][][]any{}
	for table, q := range rowsQueries {
		rows, err := pool.Query(context.Background(), q)
		testenv.Must(t, err, "read "+table)
		for rows.Next() {
			vals, err := rows.Values()
			testenv.Must(t, err, "scan "+table)
			out[table] = append(out[table], vals)
		}
		testenv.Must(t, rows.Err(), "read "+table)
	}
	return out
}

// compareRows fails t for each value of py's rows that differs from go's.
func compareRows(t *testing.T, n int, py, gos map[string][][]any) {
	t.Helper()
	for table := range rowsQueries {
		if len(py[table]) != n || len(gos[table]) != n {
			t.Fatalf("%s: %d rows from Python, %d from Go, want %d", table, len(py[table]), len(gos[table]), n)
		}
		list, _, _ := strings.Cut(strings.TrimPrefix(rowsQueries[table], "SELECT "), " FROM")
		names := strings.Split(list, ", ")
		for i := range py[table] {
			for j := range py[table][i] {
				if p, g := py[table][i][j], gos[table][i][j]; !reflect.DeepEqual(p, g) {
					t.Errorf("%s row %d, %s: Python wrote %#v, Go %#v", table, i+1, names[j], p, g)
				}
			}
		}
	}
}
