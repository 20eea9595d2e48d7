package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/contract"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/postgres"
)

// courier_write passes the contract's vectors (testdata/contract/v1,
// messages.json): it writes each valid message as Go's inserter does, and
// refuses each invalid one, alone or in a batch, with the vector's error;
// but for those PostgreSQL cannot be given (text and jsonb hold neither NUL
// nor invalid UTF-8), skipped for the reason the vector gives.
func TestWriteFunctionPassesTheVectors(t *testing.T) {
	var v contract.Messages
	testenv.Must(t, contract.Read("messages.json", &v), "read the vectors")
	if v.Limits != contract.DefaultLimits {
		t.Fatalf("the vectors' limits are %+v, courier_write's defaults %+v", v.Limits, contract.DefaultLimits)
	}
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	msg := func(t *testing.T, m contract.Message) courier.Message {
		t.Helper()
		cm, err := m.Courier()
		testenv.Must(t, err, "the vector's message")
		return cm
	}
	for _, c := range v.Valid {
		t.Run("valid/"+c.Name, func(t *testing.T) { checkWrite(t, pg.Pool, courier.Limits{}, msg(t, c.Message)) })
	}
	for _, c := range v.Invalid {
		t.Run("invalid/"+c.Name, func(t *testing.T) {
			if slices.Contains(c.NotIn, "postgres") {
				t.Skipf("not for PostgreSQL: %s", c.Why)
			}
			m := msg(t, c.Message)
			if why := pgCannotHold(m); why != "" {
				t.Fatalf("the vector is for PostgreSQL, which cannot be given it: %s", why)
			}
			ctx := context.Background()
			tx, err := pg.Pool.Begin(ctx)
			testenv.Must(t, err, "begin")
			defer tx.Rollback(ctx) //nolint:errcheck // always rolled back
			checkRefused(t, tx, m, c.Error, "outbox: ")
		})
	}
	for _, c := range v.Batches {
		t.Run("batch/"+c.Name, func(t *testing.T) {
			ctx := context.Background()
			tx, err := pg.Pool.Begin(ctx)
			testenv.Must(t, err, "begin")
			defer tx.Rollback(ctx) //nolint:errcheck // always rolled back
			for i, cm := range c.Messages[:c.Index-1] {
				_, err := tx.Exec(ctx, writeSQL, writeArgs(msg(t, cm))...)
				testenv.Must(t, err, fmt.Sprintf("message %d of %d, before the invalid one", i+1, len(c.Messages)))
			}
			checkRefused(t, tx, msg(t, c.Messages[c.Index-1]), c.Error, fmt.Sprintf("outbox: message %d of %d: ", c.Index, len(c.Messages)))
		})
	}
}

// checkRefused calls courier_write, then courier_schedule, with m in tx
// and checks that each raises want: its text, field, problem and fix, and,
// after prefix (what a client puts before it), the Writer's text.
func checkRefused(t *testing.T, tx pgx.Tx, m courier.Message, want contract.Error, prefix string) {
	t.Helper()
	ctx := context.Background()
	_, err := tx.Exec(ctx, "SAVEPOINT refused")
	testenv.Must(t, err, "savepoint")
	for _, call := range []struct {
		name, sql string
		args      []any
	}{
		{"courier_write", writeSQL, writeArgs(m)},
		{"courier_schedule", scheduleSQL, append(writeArgs(m), time.Now())},
	} {
		_, err := tx.Exec(ctx, call.sql, call.args...)
		if err == nil {
			t.Fatalf("%s wrote a message the vector refuses: %s", call.name, want.Error)
		}
		got, text := sqlError(t, err)
		if text != want.Error {
			t.Fatalf("%s's error\n  %s\nthe vector's\n  %s", call.name, text, want.Error)
		}
		if *got != (courier.ValidationError{Field: want.Field, Problem: want.Problem, Fix: want.Fix}) {
			t.Fatalf("%s's field, problem and fix %+v, the vector's %+v", call.name, *got, want)
		}
		if prefix+text != want.Writer {
			t.Fatalf("a client's error %q, the vector's Writer text %q", prefix+text, want.Writer)
		}
		_, err = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT refused")
		testenv.Must(t, err, "rollback to savepoint")
	}
}
