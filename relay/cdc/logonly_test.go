package cdc_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/postgres"
)

// writeMixed commits msgs in one transaction, each message written by the
// table writer or the log-only one as logOnly says, in msgs' order.
func (e *env) writeMixed(lw *outbox.Writer[pgx.Tx], logOnly func(i int) bool, msgs ...courier.Message) {
	e.t.Helper()
	ctx := context.Background()
	testenv.Must(e.t, e.d.InTx(ctx, func(tx pgx.Tx) error {
		for i, m := range msgs {
			w := e.w
			if logOnly(i) {
				w = lw
			}
			if err := w.Write(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	}), "write")
}

// queueMixed commits msgs in one transaction, sent in one pgx.Batch with
// a business statement: the first three table-less in one statement
// (postgres.QueueLogMessages), then rows (postgres.QueueMessages) and
// table-less messages by turns, in msgs' order.
func (e *env) queueMixed(msgs []courier.Message) {
	e.t.Helper()
	ctx := context.Background()
	testenv.Must(e.t, e.d.InTx(ctx, func(tx pgx.Tx) error {
		var b pgx.Batch
		b.Queue("SELECT 1")
		if err := postgres.QueueLogMessages(&b, courier.Limits{}, msgs[:3]...); err != nil {
			return err
		}
		for j, m := range msgs[3:] {
			queue := postgres.QueueMessages
			if j%2 == 1 {
				queue = postgres.QueueLogMessages
			}
			if err := queue(&b, courier.Limits{}, m); err != nil {
				return err
			}
		}
		return tx.SendBatch(ctx, &b).Close()
	}), "write")
}

// Table-less messages (postgres.LogOnly, postgres.QueueLogMessages) are
// published like rows, and a key's messages keep commit order whichever
// writer wrote them, within and across transactions; nothing is left in
// the table, no dead letters.
func TestLogOnlyInCommitOrder(t *testing.T) {
	for _, pipelined := range []bool{false, true} {
		t.Run(fmt.Sprintf("pipelined=%v", pipelined), func(t *testing.T) {
			e := newEnv(t)
			e.pub.KeepOrder(pipelined)
			lw := outbox.New(postgres.LogOnly(), outbox.Config{})
			r, _ := e.startMade(e.pub, e.config())
			var want []courier.Message
			for i := 0; i < 1500; i += 10 {
				var tx []courier.Message
				for j := range 10 {
					tx = append(tx, msg(fmt.Sprintf("k%d", (i+j)%13), fmt.Sprint(i+j)))
				}
				want = append(want, tx...)
				switch i / 10 % 4 {
				case 0: // every other message without a row
					e.writeMixed(lw, func(j int) bool { return j%2 == 0 }, tx...)
				case 1: // all without a row, in one insert
					ctx := context.Background()
					testenv.Must(t, e.d.InTx(ctx, func(ptx pgx.Tx) error { return lw.Write(ctx, ptx, tx...) }), "write")
				case 2: // pipelined with the rows: three in one statement, then every other one
					e.queueMixed(tx)
				default: // all rows
					e.write(tx...)
				}
			}
			e.eventually(func() bool { return len(e.pub.Messages()) >= len(want) && e.count("courier_outbox") == 0 },
				"published %d of %d; stats %+v", len(e.pub.Messages()), len(want), r.Stats())
			checkOrder(t, want, e.pub.Messages())
			if dups := len(e.pub.Messages()) - len(want); dups != 0 {
				t.Fatalf("%d duplicates without any failure", dups)
			}
			byID := map[[16]byte]courier.Message{}
			for _, w := range want {
				byID[w.ID] = w
			}
			for _, m := range e.pub.Messages() {
				w := byID[m.ID]
				if m.Topic != w.Topic || m.Type != w.Type || m.Version != w.Version || m.ContentType != w.ContentType ||
					!m.OccurredAt.Equal(w.OccurredAt.Truncate(time.Microsecond)) || string(m.Payload) != string(w.Payload) {
					t.Fatalf("published %+v, want %+v", m, w)
				}
			}
			if n := e.count("courier_outbox_dead_letters"); n != 0 {
				t.Fatalf("%d dead letters", n)
			}
			e.eventually(func() bool { return r.Stats().Published == int64(len(want)) }, "stats %+v", r.Stats())
		})
	}
}

// A table-less message that keeps failing becomes a dead letter with an id
// from courier_outbox's sequence; replaying it (store Admin, as courier dlq
// replay does) puts it in the table, and the relay publishes it from there.
func TestLogOnlyDeadLetterReplay(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.MaxAttempts = 3
	cfg.Backoff = relay.Backoff{Initial: 20 * time.Millisecond, Max: 20 * time.Millisecond}
	lw := outbox.New(postgres.LogOnly(), outbox.Config{})
	r, _ := e.startMade(e.pub, cfg)
	poison := msg("p", "poison")
	poison.Headers = map[string]string{"traceparent": "00-abc"}
	e.pub.Fail(poison.ID, 3)
	after := msg("p", "after")
	other := msg("q", "other")
	ctx := context.Background()
	testenv.Must(t, e.d.InTx(ctx, func(tx pgx.Tx) error { return lw.Write(ctx, tx, poison, after, other) }), "write")
	e.eventually(func() bool { return e.count("courier_outbox_dead_letters") == 1 && len(e.pub.Messages()) == 2 },
		"dead letters %d, published %d; stats %+v", e.count("courier_outbox_dead_letters"), len(e.pub.Messages()), r.Stats())
	checkOrder(t, []courier.Message{after, other}, e.pub.Messages())

	var id, next int64
	var attempts, hist int
	var headers string
	testenv.Must(t, e.pg.Pool.QueryRow(ctx, `SELECT id, attempts, jsonb_array_length(history), headers::text FROM courier_outbox_dead_letters WHERE message_id = $1`,
		poison.ID).Scan(&id, &attempts, &hist, &headers), "dead letter")
	if attempts != 3 || hist != 3 || !strings.Contains(headers, "00-abc") {
		t.Fatalf("dead letter: %d attempts, %d failures in its history, headers %s; want 3, 3, the traceparent", attempts, hist, headers)
	}
	// The id came from the table's sequence: a row written now gets a
	// larger one.
	row := msg("r", "row")
	e.write(row)
	testenv.Must(t, e.pg.Pool.QueryRow(ctx, `SELECT max(id) FROM courier_outbox_dead_letters`).Scan(&next), "max id")
	e.eventually(func() bool { return e.count("courier_outbox") == 0 }, "the row was not published")
	var rowID int64
	testenv.Must(t, e.pg.Pool.QueryRow(ctx, `SELECT last_value FROM `+"courier_outbox_id_seq").Scan(&rowID), "sequence")
	if rowID <= id {
		t.Fatalf("the sequence is at %d, not past the dead letter's id %d", rowID, id)
	}

	testenv.Must(t, e.d.Admin().ReplayDeadLetter(ctx, id), "replay")
	e.eventually(func() bool { return e.count("courier_outbox") == 0 && e.count("courier_outbox_dead_letters") == 0 },
		"replay: %d rows, %d dead letters left", e.count("courier_outbox"), e.count("courier_outbox_dead_letters"))
	got := e.pub.Messages()
	last := got[len(got)-1]
	if last.ID != poison.ID || string(last.Payload) != "poison" || last.Headers["traceparent"] != "00-abc" {
		t.Fatalf("last published %+v, want the replayed message", last)
	}
	if n := e.pub.Attempts(poison.ID); n != 4 {
		t.Fatalf("the poison message was tried %d times, want 3 and the replay", n)
	}
}

// Relays that stop mid-drain (cancelled, their walsender terminated) lose
// no committed table-less message: the slot keeps what was not confirmed,
// including what is written while no relay runs, and the next relay
// publishes it, each key in commit order.
func TestLogOnlyRelayRestart(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.Backoff = relay.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	lw := outbox.New(postgres.LogOnly(), outbox.Config{})
	var want []courier.Message
	write := func(n int) {
		for range n / 10 {
			var tx []courier.Message
			for range 10 {
				tx = append(tx, msg(fmt.Sprintf("k%d", len(want)%11), fmt.Sprint(len(want))))
				want = append(want, tx[len(tx)-1])
			}
			e.writeMixed(lw, func(j int) bool { return (len(want)/10+j)%3 != 0 }, tx...)
		}
	}
	for round := range 4 {
		_, stop := e.startMade(e.pub, cfg)
		before := len(e.pub.Messages())
		e.pub.Hold()
		write(300)
		if round == 2 {
			var n int
			testenv.Must(t, e.pg.Admin.QueryRow(context.Background(),
				`SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, e.slot).Scan(&n), "terminate walsender")
		}
		<-e.pub.Held()
		e.pub.Release()
		// Stop mid-drain: once something more was published.
		e.eventually(func() bool { return len(e.pub.Messages()) > before }, "relay %d publishes nothing", round)
		stop()
		for len(e.pub.Held()) > 0 {
			<-e.pub.Held()
		}
		write(100) // while no relay runs: only the slot has the log-only ones
	}
	r, _ := e.startMade(e.pub, cfg)
	e.eventually(func() bool {
		seen := map[[16]byte]bool{}
		for _, m := range e.pub.Messages() {
			seen[m.ID] = true
		}
		return len(seen) == len(want) && e.count("courier_outbox") == 0
	}, "published %d (with duplicates) of %d; stats %+v", len(e.pub.Messages()), len(want), r.Stats())
	checkOrder(t, want, e.pub.Messages())
	t.Logf("%d deliveries for %d messages", len(e.pub.Messages()), len(want))
}

// A relay publishes the table-less messages of its own schema's outbox
// only: those written where the search_path finds another schema's
// courier_outbox carry that table's OID in their prefix.
func TestLogOnlyOwnSchema(t *testing.T) {
	e := newEnv(t)
	other := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	od := postgres.NewDriver(other.Pool)
	lw := outbox.New(postgres.LogOnly(), outbox.Config{})
	e.startMade(e.pub, e.config())
	ctx := context.Background()
	var want []courier.Message
	for i := range 20 {
		mine, theirs := msg("k", fmt.Sprint(i)), msg("k", fmt.Sprint("other ", i))
		want = append(want, mine)
		testenv.Must(t, e.d.InTx(ctx, func(tx pgx.Tx) error { return lw.Write(ctx, tx, mine) }), "write")
		testenv.Must(t, od.InTx(ctx, func(tx pgx.Tx) error { return lw.Write(ctx, tx, theirs) }), "write to the other schema")
	}
	e.eventually(func() bool { return len(e.pub.Messages()) >= len(want) }, "published %d of %d", len(e.pub.Messages()), len(want))
	// The other schema's last message was committed before this one.
	last := msg("k", "last")
	want = append(want, last)
	e.write(last)
	e.eventually(func() bool { return len(e.pub.Messages()) >= len(want) }, "published %d of %d", len(e.pub.Messages()), len(want))
	for _, m := range e.pub.Messages() {
		if strings.HasPrefix(string(m.Payload), "other") {
			t.Fatalf("published the other schema's %q", m.Payload)
		}
	}
	checkOrder(t, want, e.pub.Messages())
}

// With KeepPublished, published table-less messages are kept in
// courier_outbox_published next to the rows, each with an id of its own.
func TestLogOnlyKeepPublished(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.KeepPublished = true
	r, _ := e.startMade(e.pub, cfg)
	lw := outbox.New(postgres.LogOnly(), outbox.Config{})
	var want []courier.Message
	for i := range 6 {
		want = append(want, msg("k", fmt.Sprint(i)))
	}
	e.writeMixed(lw, func(i int) bool { return i%2 == 0 }, want...)
	e.eventually(func() bool { return e.count("courier_outbox_published") == len(want) },
		"kept %d of %d; stats %+v", e.count("courier_outbox_published"), len(want), r.Stats())
	checkOrder(t, want, e.pub.Messages())
	var ids, messages int
	testenv.Must(t, e.pg.Pool.QueryRow(context.Background(),
		`SELECT count(DISTINCT id), count(DISTINCT message_id) FROM courier_outbox_published`).Scan(&ids, &messages), "count")
	if ids != len(want) || messages != len(want) {
		t.Fatalf("courier_outbox_published: %d ids and %d message ids for %d messages", ids, messages, len(want))
	}
	if n := e.count("courier_outbox"); n != 0 {
		t.Fatalf("%d rows left in courier_outbox", n)
	}
}

// A table-less message's failures are recorded too
// (courier_outbox_log_failures): its attempts survive a relay's restart
// as a row's do, and its dead letter holds every failure.
func TestLogOnlyAttemptsSurviveRestart(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.MaxAttempts = 3
	cfg.Backoff = relay.Backoff{Initial: 100 * time.Millisecond, Max: 100 * time.Millisecond}
	lw := outbox.New(postgres.LogOnly(), outbox.Config{})
	_, stop := e.startMade(e.pub, cfg)
	failing, after := msg("k", "failing"), msg("k", "after")
	e.pub.Fail(failing.ID, -1)
	e.writeMixed(lw, func(int) bool { return true }, failing, after)
	e.eventually(func() bool { return e.stored("courier_outbox_log_failures", failing.ID) == 2 }, "two failures not recorded")
	stop() // after two counted failures of three
	cfg.Backoff = relay.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}
	e.startMade(e.pub, cfg)
	e.eventually(func() bool { return len(e.pub.Messages()) == 1 && e.count("courier_outbox_dead_letters") == 1 }, "not settled")
	if n := e.pub.Attempts(failing.ID); n != 3 {
		t.Fatalf("tried %d times across the restart, want MaxAttempts (3)", n)
	}
	if got := e.deadLetters(); len(got) != 1 || got[0].Attempts != 3 || got[0].History != 3 || !got[0].HasError {
		t.Fatalf("dead letters %+v: want the failing one after 3 attempts, with 3 failures", got)
	}
	if n := e.count("courier_outbox_log_failures"); n != 0 {
		t.Fatalf("%d failures left of a dead letter", n)
	}
}

// stored returns the attempts table holds of message id (-1: none).
func (e *env) stored(table string, id [16]byte) int {
	e.t.Helper()
	n := -1
	_ = e.pg.Pool.QueryRow(context.Background(), "SELECT attempts FROM "+table+" WHERE message_id = $1", id).Scan(&n)
	return n
}
