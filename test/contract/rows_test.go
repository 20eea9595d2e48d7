package contract

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/contract"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// dueAt is the time rows.json schedules every valid message for.
const dueAt = "2030-01-02T03:04:05.678901Z"

// validMessages reads the valid vectors of messages.json, or generates
// them with -update, which may write messages.json after the test that
// calls it has run.
func validMessages(t *testing.T) ([]string, []courier.Message) {
	t.Helper()
	var v contract.Messages
	if *update {
		v = generateMessages(t)
	} else if err := contract.Read("messages.json", &v); err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(v.Valid))
	msgs := make([]contract.Message, len(v.Valid))
	for i, c := range v.Valid {
		names[i], msgs[i] = c.Name, c.Message
	}
	return names, courierOf(t, msgs...)
}

// rowQuery is a dialect's SELECT of a row's message columns from a table
// (%[1]s), %[2]s its extra columns, the id its only parameter; times come
// as text in contract.TimeLayout or as integers.
type rowQuery struct {
	sql     string
	timeOf  func(col string) string
	intTime bool
}

var (
	pgRows = rowQuery{
		sql:    "SELECT message_id::text, topic, ordering_key, type, version, content_type, payload, headers::text, %[2]s FROM %[1]s WHERE message_id = $1",
		timeOf: func(c string) string { return `to_char(` + c + ` AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')` },
	}
	mysqlRows = rowQuery{
		sql:    "SELECT message_id, topic, ordering_key, type, version, content_type, payload, headers, %[2]s FROM %[1]s WHERE message_id = ?",
		timeOf: func(c string) string { return "DATE_FORMAT(" + c + ", '%Y-%m-%dT%H:%i:%s.%fZ')" },
	}
	sqliteRows = rowQuery{
		sql:     "SELECT message_id, topic, ordering_key, type, version, content_type, payload, headers, %[2]s FROM %[1]s WHERE message_id = ?",
		timeOf:  func(c string) string { return c },
		intTime: true,
	}
)

// read reads the row of id from table (courier_outbox or
// courier_outbox_scheduled) with queryRow.
func (q rowQuery) read(queryRow func(sql string, args ...any) interface{ Scan(...any) error }, table, id string) (contract.Row, error) {
	times := q.timeOf("occurred_at")
	scheduled := table == "courier_outbox_scheduled"
	if scheduled {
		times += ", " + q.timeOf("due_at")
	}
	var (
		r       contract.Row
		payload []byte
		headers sql.NullString
		at, due any
	)
	if q.intTime {
		at, due = new(int64), new(int64)
	} else {
		at, due = new(string), new(string)
	}
	dests := []any{&r.MessageID, &r.Topic, &r.OrderingKey, &r.Type, &r.Version, &r.ContentType, &payload, &headers, at}
	if scheduled {
		dests = append(dests, due)
	}
	if err := queryRow(fmt.Sprintf(q.sql, table, times), id).Scan(dests...); err != nil {
		return r, fmt.Errorf("read %s row of %s: %w", table, id, err)
	}
	r.Payload = contract.DigestOf(payload)
	if headers.Valid {
		r.Headers = &headers.String
	}
	r.OccurredAt, _ = json.Marshal(at)
	if scheduled {
		r.DueAt, _ = json.Marshal(due)
	}
	return r, nil
}

// variant is one way a dialect writes: an inserter, and messages one per
// Write or all in one.
type variant struct {
	name string
	// rows writes msgs with Write, or with Schedule when scheduled, in a
	// transaction it reads them back in and rolls back.
	rows func(t *testing.T, msgs []courier.Message, scheduled bool) []contract.Row
}

// writeAll writes msgs with w in tx, one per call unless together.
func writeAll[TTx any](ctx context.Context, w *outbox.Writer[TTx], tx TTx, msgs []courier.Message, scheduled, together bool) error {
	due, err := time.Parse(time.RFC3339Nano, dueAt)
	if err != nil {
		return err
	}
	do := func(ms ...courier.Message) error {
		if scheduled {
			return w.Schedule(ctx, tx, outbox.At(due), ms...)
		}
		return w.Write(ctx, tx, ms...)
	}
	if together {
		return do(msgs...)
	}
	for _, m := range msgs {
		if err := do(m); err != nil {
			return err
		}
	}
	return nil
}

// table is the table of a written or scheduled message.
func table(scheduled bool) string {
	if scheduled {
		return "courier_outbox_scheduled"
	}
	return "courier_outbox"
}

// sqlVariants are the variants of an inserter of database/sql
// transactions on db, read with q.
func sqlVariants(prefix string, db *sql.DB, ins store.Inserter[*sql.Tx], q rowQuery) []variant {
	var vs []variant
	for _, together := range []bool{false, true} {
		vs = append(vs, variant{name: fmt.Sprintf("%s, together %t", prefix, together), rows: func(t *testing.T, msgs []courier.Message, scheduled bool) []contract.Row {
			ctx := context.Background()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if err := writeAll(ctx, outbox.New(ins, outbox.Config{}), tx, msgs, scheduled, together); err != nil {
				t.Fatal(err)
			}
			rows := make([]contract.Row, len(msgs))
			for i, m := range msgs {
				rows[i], err = q.read(func(s string, args ...any) interface{ Scan(...any) error } {
					return tx.QueryRowContext(ctx, s, args...)
				}, table(scheduled), m.ID.String())
				if err != nil {
					t.Fatal(err)
				}
			}
			return rows
		}})
	}
	return vs
}

// dialects returns each dialect's variants, by the name rows.json gives
// the dialect; a dialect whose server the environment lacks is skipped.
func dialects(t *testing.T) map[string]func(t *testing.T) []variant {
	return map[string]func(t *testing.T) []variant{
		"sqlite": func(t *testing.T) []variant {
			db, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			if _, err := sqlite.NewDriver(db).Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			return sqlVariants("sqlite.DatabaseSQL", db, sqlite.DatabaseSQL(), sqliteRows)
		},
		"mariadb": func(t *testing.T) []variant {
			my := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
			return sqlVariants("mysql.DatabaseSQL", my.DB, mysql.DatabaseSQL(), mysqlRows)
		},
		"postgres": func(t *testing.T) []variant {
			pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
			db := stdlib.OpenDBFromPool(pg.Pool)
			t.Cleanup(func() { db.Close() })
			vs := sqlVariants("postgres.DatabaseSQL", db, postgres.DatabaseSQL(), pgRows)
			for _, together := range []bool{false, true} {
				vs = append(vs, variant{name: fmt.Sprintf("postgres.Pgx, together %t", together), rows: func(t *testing.T, msgs []courier.Message, scheduled bool) []contract.Row {
					ctx := context.Background()
					tx, err := pg.Pool.Begin(ctx)
					if err != nil {
						t.Fatal(err)
					}
					defer tx.Rollback(ctx)
					if err := writeAll(ctx, outbox.New(postgres.Pgx(), outbox.Config{}), tx, msgs, scheduled, together); err != nil {
						t.Fatal(err)
					}
					rows := make([]contract.Row, len(msgs))
					for i, m := range msgs {
						rows[i], err = pgRows.read(func(s string, args ...any) interface{ Scan(...any) error } {
							return tx.QueryRow(ctx, s, args...)
						}, table(scheduled), m.ID.String())
						if err != nil {
							t.Fatal(err)
						}
					}
					return rows
				}})
			}
			return vs
		},
	}
}

// rows.json is what each dialect's inserters store for the valid messages
// of messages.json, written and scheduled, one per Write or all in one:
// every inserter of a dialect stores the same.
func TestRowsVectors(t *testing.T) {
	names, msgs := validMessages(t)
	got := contract.Rows{Contract: contract.Version, DueAt: dueAt, Dialects: map[string]contract.DialectRows{}}
	for name, open := range dialects(t) {
		t.Run(name, func(t *testing.T) {
			var dr contract.DialectRows
			for i, v := range open(t) {
				for _, scheduled := range []bool{false, true} {
					rows := v.rows(t, msgs, scheduled)
					named := make([]contract.NamedRow, len(rows))
					for j, r := range rows {
						named[j] = contract.NamedRow{Name: names[j], Row: r}
					}
					dest := &dr.Outbox
					if scheduled {
						dest = &dr.Scheduled
					}
					if i == 0 {
						*dest = named
						continue
					}
					a, _ := contract.Encode(named)
					b, _ := contract.Encode(*dest)
					sameJSON(t, fmt.Sprintf("%s (scheduled %t) against the first variant's rows", v.name, scheduled), a, b)
				}
			}
			got.Dialects[name] = dr
		})
	}
	if *update {
		if len(got.Dialects) != len(dialects(t)) {
			t.Fatalf("only %d of %d dialects ran: -update needs every database (source the test environment)", len(got.Dialects), len(dialects(t)))
		}
		golden(t, "rows.json", got)
		return
	}
	var want contract.Rows
	if err := contract.Read("rows.json", &want); err != nil {
		t.Fatal(err)
	}
	if want.Contract != contract.Version || want.DueAt != dueAt {
		t.Fatalf("rows.json: contract %d due_at %s, want %d and %s", want.Contract, want.DueAt, contract.Version, dueAt)
	}
	for name, dr := range got.Dialects {
		a, _ := contract.Encode(dr)
		b, _ := contract.Encode(want.Dialects[name])
		sameJSON(t, "rows.json's "+name, a, b)
	}
}
