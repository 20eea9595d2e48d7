package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// testDB is one test's database: the driver under test and what the
// suite adds to it.
type testDB[TTx any] struct {
	store.Driver[TTx]
	execScript func(ctx context.Context, script string) error
}

// open returns a fresh database, migrated when migrate is true.
func open[TTx any](t *testing.T, h opener[TTx], migrate bool) *testDB[TTx] {
	t.Helper()
	hs := h(t)
	if hs.Driver == nil || hs.ExecScript == nil {
		t.Fatal("storetest: the Harness lacks its Driver or its ExecScript")
	}
	db := &testDB[TTx]{Driver: hs.Driver, execScript: hs.ExecScript}
	if migrate {
		if _, err := db.Migrate(context.Background()); err != nil {
			t.Fatalf("migrate: %v", err)
		}
	}
	return db
}

// queryRow runs a query with ? placeholders in a transaction of its own and
// scans its one row.
func (db *testDB[TTx]) queryRow(t *testing.T, dest []any, q string, args ...any) {
	t.Helper()
	ctx := context.Background()
	if err := db.InTx(ctx, func(tx TTx) error { return db.QueryRow(ctx, tx, q, dest, args...) }); err != nil {
		t.Fatalf("query %q: %v", q, err)
	}
}

// exec runs a statement with ? placeholders in a transaction of its own.
func (db *testDB[TTx]) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	ctx := context.Background()
	if err := db.InTx(ctx, func(tx TTx) error { _, err := db.Exec(ctx, tx, q, args...); return err }); err != nil {
		t.Fatalf("exec %q: %v", q, err)
	}
}

// count returns the number of rows of table.
func (db *testDB[TTx]) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	db.queryRow(t, []any{&n}, "SELECT count(*) FROM "+table)
	return n
}

func (db *testDB[TTx]) newStore(t *testing.T, keepPublished bool) store.RelayStore {
	t.Helper()
	st, err := db.RelayStore(context.Background(), store.RelayConfig{KeepPublished: keepPublished})
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	return st
}

// insert validates msgs, as the outbox writer does before it inserts, and
// inserts them in tx.
func (db *testDB[TTx]) insert(ctx context.Context, tx TTx, msgs ...courier.Message) error {
	for i := range msgs {
		if err := msgs[i].Validate(courier.Limits{}); err != nil {
			return fmt.Errorf("message %d of %d: %w", i+1, len(msgs), err)
		}
	}
	return db.Inserter().Insert(ctx, tx, msgs)
}

// errRollback makes a transaction of the suite roll back.
var errRollback = errors.New("storetest: roll back")

// inTx runs fn in a transaction begun with begin (a store's InTx) and
// commits it, or rolls it back when commit is false: a rollback asked for
// is no error.
func inTx[TTx any](begin func(context.Context, func(TTx) error) error, commit bool, fn func(tx TTx) error) error {
	err := begin(context.Background(), func(tx TTx) error {
		if err := fn(tx); err != nil || commit {
			return err
		}
		return errRollback
	})
	if !commit && errors.Is(err, errRollback) {
		return nil
	}
	return err
}

// reportInTx runs op in a transaction as [inTx] does and returns what op
// reported, failing the test (with what) on an error.
func reportInTx[TTx any](t *testing.T, begin func(context.Context, func(TTx) error) error, commit bool,
	op func(tx TTx) (bool, error), what string, args ...any) bool {
	t.Helper()
	var reported bool
	err := inTx(begin, commit, func(tx TTx) (err error) {
		reported, err = op(tx)
		return err
	})
	must(t, err, what, args...)
	return reported
}

// writeTx inserts msgs in a transaction of its own and commits it, or rolls
// it back when commit is false.
func (db *testDB[TTx]) writeTx(ctx context.Context, msgs []courier.Message, commit bool) error {
	return inTx(db.InTx, commit, func(tx TTx) error { return db.insert(ctx, tx, msgs...) })
}

// write commits msgs.
func (db *testDB[TTx]) write(t *testing.T, msgs ...courier.Message) {
	t.Helper()
	if err := db.writeTx(context.Background(), msgs, true); err != nil {
		t.Fatalf("write %d messages: %v", len(msgs), err)
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
func (db *testDB[TTx]) failedRow(t *testing.T, seq int64) (attempts int, lastError string, history []entry) {
	t.Helper()
	var raw []byte
	var lastErr *string
	db.queryRow(t, []any{&attempts, &lastErr, &raw}, "SELECT attempts, last_error, history FROM courier_outbox WHERE id = ?", seq)
	if lastErr != nil {
		lastError = *lastErr
	}
	return attempts, lastError, decodeHistory(t, raw)
}

// must fails the test on a non-nil error, saying what failed.
func must(t *testing.T, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}

// near fails unless got is within margin of want. The margin covers a
// database server's clock, which is not the test's.
func near(t *testing.T, what string, got, want time.Time, margin time.Duration) {
	t.Helper()
	if d := got.Sub(want); d < -margin || d > margin {
		t.Errorf("%s is %s, want %s ± %s", what, got, want, margin)
	}
}

// clockMargin is how far the database's clock may be from the test's.
const clockMargin = 10 * time.Second

// panics reports whether fn panicked.
func panics(fn func()) (panicked bool) {
	defer func() { panicked = recover() != nil }()
	fn()
	return false
}
