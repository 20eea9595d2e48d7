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
	"github.com/courier-go/courier/store/memstore"
)

// testDB is one test's database: the driver under test and what the
// suite adds to it, the relay store's part included.
type testDB[TTx any] struct {
	store.Driver[TTx]
	*relayDB[TTx]
	execScript func(ctx context.Context, script string) error
}

// relayDB is one test's outbox and the suite's clock.
type relayDB[TTx any] struct {
	RelayHarness[TTx]
	clock *memstore.Clock
}

// open returns a fresh database with a clock of its own, migrated when
// migrate is true.
func open[TTx any](t *testing.T, h opener[TTx], migrate bool) *testDB[TTx] {
	t.Helper()
	clock := memstore.NewClock()
	db := openDB(t, h, clock.Now, migrate)
	db.clock = clock
	return db
}

// openDB returns a fresh database whose stores read clock, migrated when
// migrate is true. Its relayDB has no clock: open or runRelayTests gives it
// the one behind clock.
func openDB[TTx any](t testing.TB, h opener[TTx], clock store.Clock, migrate bool) *testDB[TTx] {
	t.Helper()
	hs := h(t, clock)
	if hs.Driver == nil || hs.ExecScript == nil {
		t.Fatal("storetest: the Harness lacks its Driver or its ExecScript")
	}
	d := hs.Driver
	db := &testDB[TTx]{Driver: d, execScript: hs.ExecScript, relayDB: &relayDB[TTx]{RelayHarness: RelayHarness[TTx]{
		Inserter:     d.Inserter(),
		InTx:         d.InTx,
		RelayStore:   d.RelayStore,
		SerialWrites: d.SerialWrites(),
		Operations:   d.Operations,
		Inspect:      sqlInspector[TTx]{d},
	}}}
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
	if err := db.Driver.InTx(ctx, func(tx TTx) error { return db.QueryRow(ctx, tx, q, dest, args...) }); err != nil {
		t.Fatalf("query %q: %v", q, err)
	}
}

// exec runs a statement with ? placeholders in a transaction of its own.
func (db *testDB[TTx]) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	ctx := context.Background()
	if err := db.Driver.InTx(ctx, func(tx TTx) error { _, err := db.Exec(ctx, tx, q, args...); return err }); err != nil {
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

// sqlInspector is the Inspector of a Driver's relay stores: what they keep,
// read with SQL and the Driver's Admin.
type sqlInspector[TTx any] struct{ d store.Driver[TTx] }

// Failures implements [Inspector].
func (i sqlInspector[TTx]) Failures(ctx context.Context, seq int64) (Failures, error) {
	var (
		f       Failures
		lastErr *string
		raw     []byte
	)
	err := i.d.InTx(ctx, func(tx TTx) error {
		return i.d.QueryRow(ctx, tx, "SELECT attempts, last_error, history FROM courier_outbox WHERE id = ?",
			[]any{&f.Attempts, &lastErr, &raw}, seq)
	})
	if err != nil {
		return Failures{}, err
	}
	if lastErr != nil {
		f.LastError = *lastErr
	}
	if raw != nil {
		if err := json.Unmarshal(raw, &f.History); err != nil {
			return Failures{}, fmt.Errorf("history %s is not a JSON array of entries with RFC 3339 times: %w", raw, err)
		}
	}
	return f, nil
}

// DeadLetters implements [Inspector] with the Driver's Admin.
func (i sqlInspector[TTx]) DeadLetters(ctx context.Context) ([]store.DeadLetter, error) {
	return i.d.Admin().DeadLetters(ctx, 100000)
}

// Published implements [Inspector].
func (i sqlInspector[TTx]) Published(ctx context.Context, seq int64) (p Published, ok bool, err error) {
	err = i.d.InTx(ctx, func(tx TTx) error {
		var n int
		if err := i.d.QueryRow(ctx, tx, "SELECT count(*) FROM courier_outbox_published WHERE id = ?", []any{&n}, seq); err != nil || n == 0 {
			return err
		}
		var dated int
		ok = true
		err := i.d.QueryRow(ctx, tx, "SELECT message_id, attempts, payload, CASE WHEN published_at IS NULL THEN 0 ELSE 1 END "+
			"FROM courier_outbox_published WHERE id = ?", []any{&p.MessageID, &p.Attempts, &p.Payload, &dated}, seq)
		p.Dated = dated == 1
		return err
	})
	return p, ok, err
}

func (db *relayDB[TTx]) newStore(t *testing.T, keepPublished bool) store.RelayStore {
	t.Helper()
	st, err := db.RelayStore(context.Background(), store.RelayConfig{KeepPublished: keepPublished})
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	return st
}

// insert validates msgs, as the outbox writer does before it inserts, and
// inserts them in tx.
func (db *relayDB[TTx]) insert(ctx context.Context, tx TTx, msgs ...courier.Message) error {
	for i := range msgs {
		if err := msgs[i].Validate(courier.Limits{}); err != nil {
			return fmt.Errorf("message %d of %d: %w", i+1, len(msgs), err)
		}
	}
	return db.Inserter.Insert(ctx, tx, msgs)
}

// failures returns the failure record of the pending row seq, and false
// when the harness has no Inspector.
func (db *relayDB[TTx]) failures(t *testing.T, seq int64) (Failures, bool) {
	t.Helper()
	if db.Inspect == nil {
		return Failures{}, false
	}
	f, err := db.Inspect.Failures(context.Background(), seq)
	must(t, err, "failures of row %d", seq)
	return f, true
}

// deadLetters returns the dead letters, and false when the harness has no
// Inspector.
func (db *relayDB[TTx]) deadLetters(t *testing.T) ([]store.DeadLetter, bool) {
	t.Helper()
	if db.Inspect == nil {
		return nil, false
	}
	ds, err := db.Inspect.DeadLetters(context.Background())
	must(t, err, "dead letters")
	return ds, true
}

// published returns the kept copy of the published row seq (ok false when
// there is none), and inspected false when the harness has no Inspector.
func (db *relayDB[TTx]) published(t *testing.T, seq int64) (p Published, ok, inspected bool) {
	t.Helper()
	if db.Inspect == nil {
		return Published{}, false, false
	}
	p, ok, err := db.Inspect.Published(context.Background(), seq)
	must(t, err, "published row %d", seq)
	return p, ok, true
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
func (db *relayDB[TTx]) writeTx(ctx context.Context, msgs []courier.Message, commit bool) error {
	return inTx(db.InTx, commit, func(tx TTx) error { return db.insert(ctx, tx, msgs...) })
}

// write commits msgs.
func (db *relayDB[TTx]) write(t *testing.T, msgs ...courier.Message) {
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
