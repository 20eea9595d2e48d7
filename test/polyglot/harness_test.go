package polyglot

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// A writer is a program in another language that carries out a plan (see
// the package documentation).
type writer struct {
	// name names the language in failures.
	name string
	// command returns the command that runs the program, without its
	// standard input or output, which the harness sets.
	command func(t *testing.T) *exec.Cmd
}

// plan is what a writer reads on its standard input.
type plan struct {
	Dialect      string            `json:"dialect"`
	Database     map[string]string `json:"database"`
	Transactions []planTx          `json:"transactions"`
}

// planTx is one transaction of a plan.
type planTx struct {
	Order    order          `json:"order"`
	Commit   bool           `json:"commit"`
	Due      map[string]any `json:"due,omitempty"`
	Messages []planMessage  `json:"messages"`
}

// order is the business row a transaction writes.
type order struct {
	ID   string `json:"id"`
	Note string `json:"note"`
}

// planMessage is a message of a plan: the fields left empty take the
// client's defaults.
type planMessage struct {
	ID            string            `json:"id,omitempty"`
	Topic         string            `json:"topic"`
	Key           string            `json:"key"`
	Type          string            `json:"type"`
	Version       int               `json:"version,omitempty"`
	ContentType   string            `json:"content_type,omitempty"`
	PayloadBase64 *string           `json:"payload_base64,omitempty"`
	PayloadText   *string           `json:"payload_text,omitempty"`
	PayloadJSON   any               `json:"payload_json,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	OccurredAt    string            `json:"occurred_at,omitempty"`
}

// written is one line of a writer's output.
type written struct {
	Tx        int         `json:"tx"`
	Committed bool        `json:"committed"`
	Message   wireMessage `json:"message"`
}

// wireMessage is a message as a writer reports it, every field explicit.
type wireMessage struct {
	ID            string            `json:"id"`
	Topic         string            `json:"topic"`
	Key           string            `json:"key"`
	Type          string            `json:"type"`
	Version       int               `json:"version"`
	ContentType   string            `json:"content_type"`
	PayloadBase64 string            `json:"payload_base64"`
	Headers       map[string]string `json:"headers"`
	OccurredAt    string            `json:"occurred_at"`
}

// message decodes m, failing t when a field does not parse.
func (m wireMessage) message(t *testing.T) courier.Message {
	t.Helper()
	id, err := uuid.Parse(m.ID)
	testenv.Must(t, err, "writer's message id "+m.ID)
	payload, err := base64.StdEncoding.DecodeString(m.PayloadBase64)
	testenv.Must(t, err, "writer's payload_base64 of "+m.ID)
	at, err := time.Parse(time.RFC3339Nano, m.OccurredAt)
	testenv.Must(t, err, "writer's occurred_at of "+m.ID)
	return courier.Message{ID: id, Topic: m.Topic, Key: m.Key, Type: m.Type, Version: m.Version,
		ContentType: m.ContentType, Payload: payload, Headers: m.Headers, OccurredAt: at.UTC()}
}

// target is a migrated database of the test's own, with its relay store,
// its orders and how a writer reaches it.
type target struct {
	dialect  string
	database map[string]string
	relay    store.RelayStore
	// notifier wakes the relay after a commit, where the database has
	// wake-ups (PostgreSQL's trigger); nil: the relay polls.
	notifier store.Notifier
	// orders reads polyglot_orders: note by id.
	orders func() map[string]string
}

// ordersTable is the business table a plan's transactions write.
const ordersTable = "CREATE TABLE polyglot_orders (id VARCHAR(64) PRIMARY KEY, note TEXT NOT NULL)"

// forEachDialect runs w's end-to-end test on each dialect, in parallel.
func forEachDialect(t *testing.T, w writer) {
	for _, dialect := range []struct {
		name string
		open func(t *testing.T) target
	}{
		{"sqlite", openSQLite},
		{"postgres", openPostgres},
		{"mysql", openMySQL},
	} {
		t.Run(dialect.name, func(t *testing.T) {
			t.Parallel()
			run(t, w, dialect.open(t))
		})
	}
}

func openSQLite(t *testing.T) target {
	path := filepath.Join(t.TempDir(), "outbox.db")
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open")
	t.Cleanup(func() { db.Close() })
	return sqlTarget(t, "sqlite", map[string]string{"path": path}, db, sqlite.NewDriver(db))
}

func openPostgres(t *testing.T) target {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	_, err := pg.Pool.Exec(ctx, ordersTable)
	testenv.Must(t, err, "create polyglot_orders")
	d := postgres.NewDriver(pg.Pool)
	n, err := d.Notifier(nil)
	testenv.Must(t, err, "notifier")
	return target{
		notifier: n,
		dialect:  "postgres",
		database: map[string]string{"url": testenv.Need(t, testenv.EnvPostgres), "schema": pg.Schema},
		relay:    relayStore(t, d),
		orders: func() map[string]string {
			rows, err := pg.Pool.Query(ctx, "SELECT id, note FROM polyglot_orders")
			testenv.Must(t, err, "read polyglot_orders")
			defer rows.Close()
			out := map[string]string{}
			for rows.Next() {
				var id, note string
				testenv.Must(t, rows.Scan(&id, &note), "scan polyglot_orders")
				out[id] = note
			}
			testenv.Must(t, rows.Err(), "read polyglot_orders")
			return out
		},
	}
}

func openMySQL(t *testing.T) target {
	my := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
	url := my.PlainURL()
	return sqlTarget(t, "mysql", map[string]string{"url": url}, my.DB, mysql.NewDriver(my.DB))
}

// sqlTarget is the target of a database/sql database, migrated unless d
// migrates it (SQLite's file is new).
func sqlTarget[TTx any](t *testing.T, dialect string, database map[string]string, db *sql.DB, d store.Driver[TTx]) target {
	ctx := context.Background()
	_, err := d.Migrate(ctx)
	testenv.Must(t, err, "migrate")
	_, err = db.ExecContext(ctx, ordersTable)
	testenv.Must(t, err, "create polyglot_orders")
	return target{
		dialect:  dialect,
		database: database,
		relay:    relayStore(t, d),
		orders: func() map[string]string {
			rows, err := db.QueryContext(ctx, "SELECT id, note FROM polyglot_orders")
			testenv.Must(t, err, "read polyglot_orders")
			defer rows.Close()
			out := map[string]string{}
			for rows.Next() {
				var id, note string
				testenv.Must(t, rows.Scan(&id, &note), "scan polyglot_orders")
				out[id] = note
			}
			testenv.Must(t, rows.Err(), "read polyglot_orders")
			return out
		},
	}
}

func relayStore[TTx any](t *testing.T, d store.Driver[TTx]) store.RelayStore {
	st, err := d.RelayStore(context.Background(), store.RelayConfig{})
	testenv.Must(t, err, "relay store")
	return st
}

// run carries out the standard plan with w on tg, relays it to NATS,
// consumes it, and checks what arrived against what w wrote.
func run(t *testing.T, w writer, tg target) {
	b := newBroker(t)
	b.startRelay(tg.relay, tg.notifier)
	applied := b.startConsumer(t)

	p := plan{Dialect: tg.dialect, Database: tg.database, Transactions: standardPlan()}
	lines := carryOut(t, w, p)

	want := committed(t, p, lines)
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		n := len(applied.list())
		return n >= len(want.messages), n
	}, "%d committed messages not all applied", len(want.messages))

	checkOrders(t, p, tg.orders())
	got := b.received()
	checkStream(t, want, got)
	checkApplied(t, want, applied.list())
	t.Logf("%s on %s: %d transactions, %d messages written, %d committed, all published and applied",
		w.name, tg.dialect, len(p.Transactions), len(lines), len(want.messages))
}

// carryOut runs w with p on its standard input and returns its output.
func carryOut(t *testing.T, w writer, p plan) []written {
	t.Helper()
	in, err := json.Marshal(p)
	testenv.Must(t, err, "encode plan")
	cmd := w.command(t)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s writer on %s: %v\nstderr:\n%s\nstdout:\n%s", w.name, p.Dialect, err, stderr.String(), stdout.String())
	}
	var lines []written
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var l written
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s writer printed %q, not a line of the plan's output: %v", w.name, sc.Text(), err)
		}
		lines = append(lines, l)
	}
	testenv.Must(t, sc.Err(), "read writer's output")
	n := 0
	for _, tx := range p.Transactions {
		n += len(tx.Messages)
	}
	if len(lines) != n {
		t.Fatalf("%s writer printed %d messages, the plan has %d\nstderr:\n%s", w.name, len(lines), n, stderr.String())
	}
	return lines
}
