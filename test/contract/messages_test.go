package contract

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/contract"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/sqlite"
)

// sqliteWriter returns a Writer on a migrated SQLite database of its own
// and the database: the vectors' Writer errors come from a real write.
func sqliteWriter(t *testing.T) (*outbox.Writer[*sql.Tx], *sql.DB) {
	t.Helper()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := sqlite.NewDriver(db).Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return outbox.New(sqlite.DatabaseSQL(), outbox.Config{}), db
}

// write writes msgs with w in a transaction it rolls back, and returns
// Write's error.
func write(t *testing.T, w *outbox.Writer[*sql.Tx], db *sql.DB, msgs ...courier.Message) error {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	return w.Write(context.Background(), tx, msgs...)
}

// courierOf converts vector messages, failing the test on a bad one.
func courierOf(t *testing.T, ms ...contract.Message) []courier.Message {
	t.Helper()
	out := make([]courier.Message, len(ms))
	for i, m := range ms {
		cm, err := m.Courier()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = cm
	}
	return out
}

// generateMessages builds messages.json from the cases and what Go's
// Validate and Writer say of them.
func generateMessages(t *testing.T) contract.Messages {
	invalid := invalidVectors()
	if err := names(validVectors, invalid); err != nil {
		t.Fatal(err)
	}
	w, db := sqliteWriter(t)
	out := contract.Messages{Contract: contract.Version, Limits: contract.DefaultLimits}
	// Ids are numbered from 1 for the valid, 1001 for the invalid and 2001
	// for the batches' messages, so that a new vector leaves the others'
	// ids as they are.
	n := 0
	next := func(edit func(*contract.Message)) contract.Message {
		n++
		return messageOf(n, edit)
	}
	for _, v := range validVectors {
		m := next(v.edit)
		cm := courierOf(t, m)[0]
		if err := cm.Validate(courier.Limits{}); err != nil {
			t.Fatalf("valid vector %q: %v", v.name, err)
		}
		if err := write(t, w, db, cm); err != nil {
			t.Fatalf("valid vector %q: %v", v.name, err)
		}
		out.Valid = append(out.Valid, contract.Valid{Name: v.name, Message: m})
	}
	n = 1000
	for _, v := range invalid {
		m := next(v.edit)
		cm := courierOf(t, m)[0]
		e, err := contract.ErrorOf(cm.Validate(courier.Limits{}), write(t, w, db, cm))
		if err != nil {
			t.Fatalf("invalid vector %q: %v", v.name, err)
		}
		out.Invalid = append(out.Invalid, contract.Invalid{Name: v.name, Message: m, Error: e, NotIn: v.notIn, Why: v.why})
	}
	n = 2000
	for _, b := range batches {
		var ms []contract.Message
		first := 0
		for i := 1; i <= b.n; i++ {
			edit := b.bad[i]
			if edit == nil {
				edit = func(*contract.Message) {}
			} else if first == 0 {
				first = i
			}
			ms = append(ms, next(edit))
		}
		cms := courierOf(t, ms...)
		e, err := contract.ErrorOf(cms[first-1].Validate(courier.Limits{}), write(t, w, db, cms...))
		if err != nil {
			t.Fatalf("batch %q: %v", b.name, err)
		}
		out.Batches = append(out.Batches, contract.Batch{Name: b.name, Messages: ms, Index: first, Error: e})
	}
	return out
}

// messages.json is what Go's Validate and Writer do with the cases.
func TestMessagesVectors(t *testing.T) {
	golden(t, "messages.json", generateMessages(t))
}

// Read back from messages.json, every vector gets from Validate and the
// Writer exactly the error it records, and every valid one is written.
func TestMessagesFromFile(t *testing.T) {
	var v contract.Messages
	if err := contract.Read("messages.json", &v); err != nil {
		t.Fatal(err)
	}
	if v.Contract != contract.Version || v.Limits != contract.DefaultLimits {
		t.Fatalf("contract %d limits %+v, want %d and %+v", v.Contract, v.Limits, contract.Version, contract.DefaultLimits)
	}
	if len(v.Valid) == 0 || len(v.Invalid) == 0 || len(v.Batches) == 0 {
		t.Fatalf("%d valid, %d invalid, %d batches: the file lost vectors", len(v.Valid), len(v.Invalid), len(v.Batches))
	}
	w, db := sqliteWriter(t)
	for _, c := range v.Valid {
		if err := write(t, w, db, courierOf(t, c.Message)...); err != nil {
			t.Errorf("valid %q: %v", c.Name, err)
		}
	}
	check := func(name string, want contract.Error, msgs []courier.Message, index int) {
		err := write(t, w, db, msgs...)
		var ve *courier.ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, courier.ErrInvalidMessage) {
			t.Errorf("%q: Write = %v, want a courier.ValidationError", name, err)
			return
		}
		got := contract.Error{Field: ve.Field, Problem: ve.Problem, Fix: ve.Fix, Error: ve.Error(), Writer: err.Error()}
		if got != want {
			t.Errorf("%q:\n got %+v\nwant %+v", name, got, want)
		}
		if verr := msgs[index].Validate(courier.Limits{}); verr == nil || verr.Error() != want.Error {
			t.Errorf("%q: Validate = %v, want %s", name, verr, want.Error)
		}
	}
	for _, c := range v.Invalid {
		check(c.Name, c.Error, courierOf(t, c.Message), 0)
	}
	for _, c := range v.Batches {
		check(c.Name, c.Error, courierOf(t, c.Messages...), c.Index-1)
	}
}

// whiteSpace is every character Validate names white space, and no other:
// the list docs/contract.md gives.
func TestWhiteSpaceIsTheListed(t *testing.T) {
	var got []rune
	for r := rune(0); r <= 0x10ffff; r++ {
		m := base(1)
		m.Topic = contract.Plain("a" + string(r))
		cm := courierOf(t, m)[0]
		if err := cm.Validate(courier.Limits{}); err != nil && strings.Contains(err.Error(), "white space") {
			got = append(got, r)
		}
	}
	if !slices.Equal(got, whiteSpace) {
		t.Fatalf("Validate names white space %U, the vectors list %U", got, whiteSpace)
	}
}
