package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
)

// open returns a fresh database, migrated when migrate is true.
func open(t *testing.T, h Harness, migrate bool) *DB {
	t.Helper()
	db := h.Open(t)
	if db == nil {
		t.Fatal("storetest: Harness.Open returned nil")
	}
	if len(db.Writers) == 0 {
		t.Fatal("storetest: DB.Writers is empty: give at least the database/sql inserter (storetest.SQLWriter)")
	}
	if len(db.Inboxes) == 0 || len(db.Idempotency) == 0 {
		t.Fatal("storetest: DB.Inboxes or DB.Idempotency is empty: give at least the database/sql implementations " +
			"(storetest.InboxOf(\"database/sql\", dialect.SQLInbox(db)), storetest.IdempotencyOf(…))")
	}
	for name, missing := range map[string]bool{
		"SQL": db.SQL == nil, "NewStore": db.NewStore == nil, "Migrate": db.Migrate == nil,
		"SchemaVersion": db.SchemaVersion == nil, "CheckSchema": db.CheckSchema == nil,
		"Migrations": db.Migrations == nil, "ExportSQL": db.ExportSQL == nil, "ExecScript": db.ExecScript == nil,
		"ConsumerStore": db.ConsumerStore == nil, "Admin": db.Admin == nil,
	} {
		if missing {
			t.Fatalf("storetest: DB.%s is nil: set it to the dialect's function (see storetest.DB)", name)
		}
	}
	if migrate {
		if _, err := db.Migrate(context.Background()); err != nil {
			t.Fatalf("migrate: %v", err)
		}
	}
	return db
}

func (db *DB) rebind(q string) string {
	if db.Rebind == nil {
		return q
	}
	return db.Rebind(q)
}

// queryRow runs a portable query with ? placeholders and scans its one row.
func (db *DB) queryRow(t *testing.T, dest []any, q string, args ...any) {
	t.Helper()
	if err := db.SQL.QueryRowContext(context.Background(), db.rebind(q), args...).Scan(dest...); err != nil {
		t.Fatalf("query %q: %v", q, err)
	}
}

// exec runs a portable statement with ? placeholders.
func (db *DB) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := db.SQL.ExecContext(context.Background(), db.rebind(q), args...); err != nil {
		t.Fatalf("exec %q: %v", q, err)
	}
}

// count returns the number of rows of table.
func (db *DB) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	db.queryRow(t, []any{&n}, "SELECT count(*) FROM "+table)
	return n
}

func (db *DB) newStore(t *testing.T, keepPublished bool) store.RelayStore {
	t.Helper()
	st, err := db.NewStore(context.Background(), keepPublished)
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	return st
}

// write commits msgs with the first writer.
func (db *DB) write(t *testing.T, msgs ...courier.Message) {
	t.Helper()
	if err := db.Writers[0].Write(context.Background(), outbox.Config{}, msgs, true); err != nil {
		t.Fatalf("write %d messages with %s: %v", len(msgs), db.Writers[0].Name, err)
	}
}

// numbered returns n messages whose keys cycle through keys distinct keys
// named prefix0, prefix1, …, each with its number as payload.
func numbered(n, keys int, prefix string) []courier.Message {
	msgs := make([]courier.Message, n)
	for i := range msgs {
		msgs[i] = courier.NewMessage("events", fmt.Sprintf("%s%d", prefix, i%keys), "Numbered",
			fmt.Appendf(nil, `{"n":%d}`, i), courier.WithContentType(courier.ContentTypeJSON))
	}
	return msgs
}

func claim(t *testing.T, st store.RelayStore, owner string, limit int, lease time.Duration) store.Batch {
	t.Helper()
	b, err := st.Claim(context.Background(), owner, limit, lease)
	if err != nil {
		t.Fatalf("claim by %s: %v", owner, err)
	}
	for i := 1; i < len(b.Records); i++ {
		if b.Records[i].Seq <= b.Records[i-1].Seq {
			t.Fatalf("claim by %s: records not in Seq order: %d after %d", owner, b.Records[i].Seq, b.Records[i-1].Seq)
		}
	}
	return b
}

func complete(t *testing.T, st store.RelayStore, owner string, b store.Batch, o store.Outcome) {
	t.Helper()
	if err := st.Complete(context.Background(), owner, b.Lease, o); err != nil {
		t.Fatalf("complete lease %d of %s: %v", b.Lease, owner, err)
	}
}

func stats(t *testing.T, st store.RelayStore) store.Stats {
	t.Helper()
	s, err := st.Stats(context.Background())
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	return s
}

func seqs(recs []store.Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Seq
	}
	return out
}

func keysOf(recs []store.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Message.Key
	}
	return out
}

// sameMessage fails unless got is want as a store keeps it (times to the
// microsecond, UTC).
func sameMessage(t *testing.T, got, want courier.Message) {
	t.Helper()
	switch {
	case got.ID != want.ID:
		t.Errorf("message id %s, want %s", got.ID, want.ID)
	case got.Topic != want.Topic || got.Key != want.Key || got.Type != want.Type || got.Version != want.Version ||
		got.ContentType != want.ContentType:
		t.Errorf("message %s: topic/key/type/version/content type %q/%q/%q/%d/%q, want %q/%q/%q/%d/%q", want.ID,
			got.Topic, got.Key, got.Type, got.Version, got.ContentType,
			want.Topic, want.Key, want.Type, want.Version, want.ContentType)
	case !bytes.Equal(got.Payload, want.Payload):
		t.Errorf("message %s: payload of %d bytes differs from the %d written", want.ID, len(got.Payload), len(want.Payload))
	case !maps.Equal(got.Headers, want.Headers):
		t.Errorf("message %s: headers %v, want %v", want.ID, got.Headers, want.Headers)
	case !got.OccurredAt.Equal(want.OccurredAt.Truncate(time.Microsecond)) || got.OccurredAt.Location() != time.UTC:
		t.Errorf("message %s: occurred at %s, want %s in UTC", want.ID, got.OccurredAt, want.OccurredAt.Truncate(time.Microsecond))
	}
}

// entry is one element of a row's failure history.
type entry struct {
	At      string `json:"at"`
	Error   string `json:"error"`
	Counted bool   `json:"counted"`
}

func decodeHistory(t *testing.T, raw []byte) []entry {
	t.Helper()
	if raw == nil {
		return nil
	}
	var h []entry
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatalf("history %s is not a JSON array of entries: %v", raw, err)
	}
	for _, e := range h {
		if _, err := time.Parse(time.RFC3339Nano, e.At); err != nil {
			t.Errorf("history entry time %q is not RFC 3339: %v", e.At, err)
		}
	}
	return h
}

// failedRow reads a pending row's failure columns.
func (db *DB) failedRow(t *testing.T, seq int64) (attempts int, lastError string, history []entry) {
	t.Helper()
	var raw []byte
	var lastErr *string
	db.queryRow(t, []any{&attempts, &lastErr, &raw}, "SELECT attempts, last_error, history FROM courier_outbox WHERE id = ?", seq)
	if lastErr != nil {
		lastError = *lastErr
	}
	return attempts, lastError, decodeHistory(t, raw)
}
