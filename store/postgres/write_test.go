package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/postgres"
)

// The SQL functions of migration 0017, as a client in another language
// calls them: every argument given, the headers as JSON text.
const (
	writeSQL    = "SELECT courier_write($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9)"
	scheduleSQL = "SELECT courier_schedule($10, $1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9)"
)

// writeArgs returns writeSQL's arguments for m.
func writeArgs(m courier.Message) []any {
	var headers any
	if m.Headers != nil {
		b, _ := json.Marshal(m.Headers) // a map of strings always encodes
		headers = string(b)
	}
	return []any{m.Topic, m.Key, m.Type, m.Payload, headers, m.ContentType, m.Version, m.ID.String(), m.OccurredAt}
}

// pgCannotHold says why m cannot reach the functions (text and jsonb hold
// neither NUL nor invalid UTF-8), "" when it can.
func pgCannotHold(m courier.Message) string {
	texts := []string{m.Topic, m.Key, m.Type, m.ContentType}
	for name, value := range m.Headers {
		texts = append(texts, name, value)
	}
	for _, s := range texts {
		switch {
		case strings.ContainsRune(s, 0):
			return "PostgreSQL's text and jsonb cannot hold NUL"
		case !utf8.ValidString(s):
			return "PostgreSQL's text and jsonb cannot hold invalid UTF-8"
		}
	}
	return ""
}

// sqlError returns err as the courier.ValidationError the functions'
// error carries (COLUMN the field, DETAIL the problem, HINT the fix), with
// its message, or fails t when err is not such an error.
func sqlError(t *testing.T, err error) (*courier.ValidationError, string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22023" {
		t.Fatalf("error %v: want SQLSTATE 22023", err)
	}
	return &courier.ValidationError{Field: pgErr.ColumnName, Problem: pgErr.Detail, Fix: pgErr.Hint}, pgErr.Message
}

// rowSQL reads a message's rows in the outbox, every column Go's inserter
// writes, in the order they were written.
const rowSQL = `SELECT message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at
FROM courier_outbox WHERE message_id = $1 ORDER BY id`

// rows returns the rows of id that q selects.
func rows(t *testing.T, tx pgx.Tx, q string, id uuid.UUID) [][]any {
	t.Helper()
	r, err := tx.Query(context.Background(), q, id)
	testenv.Must(t, err, "read rows")
	got, err := pgx.CollectRows(r, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
	testenv.Must(t, err, "read rows")
	return got
}

// checkWrite writes m with courier_write and with Go's outbox.Writer in
// one transaction, rolled back, under limits (set as courier.max_*_bytes
// for the function): both refuse it with the same error, or both write
// the same row.
func checkWrite(t *testing.T, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, limits courier.Limits, m courier.Message) {
	t.Helper()
	if why := pgCannotHold(m); why != "" {
		t.Skip(why)
	}
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	testenv.Must(t, err, "begin")
	defer tx.Rollback(ctx) //nolint:errcheck // always rolled back
	_, err = tx.Exec(ctx, "SELECT set_config('courier.max_payload_bytes', $1, true), set_config('courier.max_header_bytes', $2, true)",
		fmt.Sprint(limits.MaxPayloadBytes), fmt.Sprint(limits.MaxHeaderBytes))
	testenv.Must(t, err, "set the limits")

	want := m.Validate(limits)
	_, err = tx.Exec(ctx, "SAVEPOINT w")
	testenv.Must(t, err, "savepoint")
	var id uuid.UUID
	err = tx.QueryRow(ctx, writeSQL, writeArgs(m)...).Scan(&id)
	if want != nil {
		if err == nil {
			t.Fatalf("courier_write wrote a message Go refuses (%v)", want)
		}
		got, text := sqlError(t, err)
		if text != want.Error() {
			t.Fatalf("courier_write's error\n  %s\nwant Go's\n  %s", text, want)
		}
		var ve *courier.ValidationError
		if !errors.As(want, &ve) || *got != *ve {
			t.Fatalf("courier_write's error has field, problem and fix %+v, want %+v", *got, want)
		}
		_, err = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT w")
		testenv.Must(t, err, "rollback to savepoint")
		return
	}
	testenv.Must(t, err, "courier_write")
	if id != m.ID {
		t.Fatalf("courier_write returned %s, want the message's id %s", id, m.ID)
	}
	testenv.Must(t, outbox.New(postgres.Pgx(), outbox.Config{Limits: limits}).Write(ctx, tx, m), "Go's write")
	got := rows(t, tx, rowSQL, m.ID)
	if len(got) != 2 {
		t.Fatalf("%d rows of the message, want 2 (the function's and Go's)", len(got))
	}
	if !reflect.DeepEqual(got[0], got[1]) {
		t.Fatalf("courier_write's row differs from Go's:\n  %v\n  %v", got[0], got[1])
	}
}

// validMessage is a message every check passes, with headers.
func validMessage() courier.Message {
	return courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"total":42}`),
		courier.WithContentType(courier.ContentTypeJSON), courier.WithVersion(3),
		courier.WithOccurredAt(time.Date(2031, 5, 6, 7, 8, 9, 123456000, time.UTC)),
		courier.WithHeader("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
		courier.WithCorrelationID("c-1"), courier.WithHeader("x-tenant", "ünïcode ✓"))
}

// courier_write refuses what Go's Validate refuses, with Go's text, field,
// problem and fix, and writes what it accepts as Go's inserter does.
func TestWriteFunctionChecksAsGo(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	with := func(f func(m *courier.Message)) courier.Message {
		m := validMessage()
		f(&m)
		return m
	}
	header := func(name, value string) courier.Message {
		return with(func(m *courier.Message) { m.SetHeader(name, value) })
	}
	cases := map[string]courier.Message{
		"valid":                    validMessage(),
		"no headers":               with(func(m *courier.Message) { m.Headers = nil }),
		"empty headers":            with(func(m *courier.Message) { m.Headers = map[string]string{} }),
		"empty payload":            with(func(m *courier.Message) { m.Payload = nil }),
		"nil id":                   with(func(m *courier.Message) { m.ID = uuid.Nil }),
		"empty topic":              with(func(m *courier.Message) { m.Topic = "" }),
		"topic at 255 bytes":       with(func(m *courier.Message) { m.Topic = strings.Repeat("é", 127) + "x" }),
		"topic over 255 bytes":     with(func(m *courier.Message) { m.Topic = strings.Repeat("é", 128) }),
		"topic with a space":       with(func(m *courier.Message) { m.Topic = "or ders" }),
		"topic with NBSP":          with(func(m *courier.Message) { m.Topic = "or\u00a0ders" }),
		"topic with ideographic":   with(func(m *courier.Message) { m.Topic = "or\u3000ders" }),
		"topic with a control":     with(func(m *courier.Message) { m.Topic = "or\x01ders" }),
		"topic with DEL":           with(func(m *courier.Message) { m.Topic = "or\x7fders" }),
		"empty key":                with(func(m *courier.Message) { m.Key = "" }),
		"key with spaces":          with(func(m *courier.Message) { m.Key = "order 42\u00a0\u2003" }),
		"key with a tab":           with(func(m *courier.Message) { m.Key = "order\t42" }),
		"key with NEL":             with(func(m *courier.Message) { m.Key = "order\u008542" }),
		"key with C1":              with(func(m *courier.Message) { m.Key = "order\u009f42" }),
		"key at 1024 bytes":        with(func(m *courier.Message) { m.Key = strings.Repeat("k", 1024) }),
		"key over 1024 bytes":      with(func(m *courier.Message) { m.Key = strings.Repeat("k", 1025) }),
		"type with a line feed":    with(func(m *courier.Message) { m.Type = "Order\nPlaced" }),
		"type with em space":       with(func(m *courier.Message) { m.Type = "Order\u2003Placed" }),
		"version 0":                with(func(m *courier.Message) { m.Version = 0 }),
		"version -7":               with(func(m *courier.Message) { m.Version = -7 }),
		"empty content type":       with(func(m *courier.Message) { m.ContentType = "" }),
		"content type with spaces": with(func(m *courier.Message) { m.ContentType = "text/plain; charset=utf-8" }),
		"payload at the limit":     with(func(m *courier.Message) { m.Payload = make([]byte, courier.DefaultMaxPayloadBytes) }),
		"payload over the limit":   with(func(m *courier.Message) { m.Payload = make([]byte, courier.DefaultMaxPayloadBytes+1) }),
		"occurred at zero":         with(func(m *courier.Message) { m.OccurredAt = time.Time{} }),
		"header name with a space": header("x bad", "v"),
		"header name quoted":       header("x\"\\é\x7f", "v"),
		"empty header name":        header("", "v"),
		"reserved prefix":          header("COURIER-x", "v"),
		"nats prefix":              header("Nats-Rollup", "all"),
		"correlation id":           header("Courier-Causation-Id", "c"),
		"correlation id lowercase": header("courier-correlation-id", "c"),
		"TE":                       header("TE", "trailers"),
		"cookie2":                  header("Cookie2", "x"),
		"near a reserved name":     header("x-real-ips", "x"),
		"http name":                header("Authorization", "Bearer x"),
		"http prefix":              header("X-Forwarded-For", "1.2.3.4"),
		"if prefix":                header("If-Match", "x"),
		"value with CR":            header("x-v", "a\rb"),
		"value with a tab":         header("x-v", "a\tb"),
		"first invalid by name": with(func(m *courier.Message) {
			m.Headers = map[string]string{"b c": "v", "a": "x\ny", "Z": "ok", "Host": "h"}
		}),
		"headers at the limit": with(func(m *courier.Message) {
			m.Headers = map[string]string{"a": strings.Repeat("v", courier.DefaultMaxHeaderBytes-1)}
		}),
		"headers over the limit": with(func(m *courier.Message) {
			m.Headers = map[string]string{"a": strings.Repeat("v", courier.DefaultMaxHeaderBytes/2), "b": strings.Repeat("v", courier.DefaultMaxHeaderBytes/2)}
		}),
		"topic error first": with(func(m *courier.Message) { m.Topic, m.Version, m.Headers = "", 0, map[string]string{"a b": ""} }),
	}
	for name, m := range cases {
		t.Run(name, func(t *testing.T) { checkWrite(t, pg.Pool, courier.Limits{}, m) })
	}
	// The limits the settings give, as Go's Limits.
	for _, limits := range []courier.Limits{{MaxPayloadBytes: 12}, {MaxPayloadBytes: 11}, {MaxHeaderBytes: 100}, {MaxHeaderBytes: 99}} {
		t.Run(fmt.Sprintf("limits %+v", limits), func(t *testing.T) {
			checkWrite(t, pg.Pool, limits, with(func(m *courier.Message) {
				m.Headers = map[string]string{"a": strings.Repeat("v", 99)}
			}))
		})
	}
}
