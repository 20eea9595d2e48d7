package cdc_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/postgres"
)

// payloadsOf returns the payloads of msgs of key, in order.
func payloadsOf(msgs []courier.Message, key string) []string {
	var out []string
	for _, m := range msgs {
		if m.Key == key {
			out = append(out, string(m.Payload))
		}
	}
	return out
}

// heldPayloads returns the payloads held in courier_outbox_held, by id.
func (e *env) heldPayloads() []string {
	e.t.Helper()
	rows, err := e.pg.Pool.Query(context.Background(), `SELECT convert_from(payload, 'UTF8') FROM courier_outbox_held ORDER BY id`)
	testenv.Must(e.t, err, "held")
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	testenv.Must(e.t, err, "held")
	return got
}

// With HoldKeys, a dead letter holds its key: the key's later messages,
// rows and table-less ones, of its transaction and of later ones, move
// behind it to courier_outbox_held instead of being published, and other
// keys flow. A relay started again reads the held keys and holds them
// still. A dead letter of a topic not in HoldKeys lets its key move on.
func TestHeldKey(t *testing.T) {
	for _, pipelined := range []bool{false, true} {
		t.Run(fmt.Sprintf("pipelined=%v", pipelined), func(t *testing.T) {
			testHeldKey(t, pipelined)
		})
	}
}

func testHeldKey(t *testing.T, pipelined bool) {
	e := newEnv(t)
	e.pub.KeepOrder(pipelined)
	cfg := e.config()
	cfg.MaxAttempts = 1
	cfg.HoldKeys = []string{"events"}
	lw := outbox.New(postgres.LogOnly(), outbox.Config{})
	ctx := context.Background()
	r, stop := e.startMade(e.pub, cfg)

	poison := msg("p", "poison")
	e.pub.Fail(poison.ID, 1) // a dead letter; published once replayed
	loose := courier.NewMessage("audit", "q", "T", []byte("loose"))
	e.pub.Fail(loose.ID, 1)
	afterQ := courier.NewMessage("audit", "q", "T", []byte("afterQ"))
	var others []courier.Message
	for i := range 20 {
		others = append(others, msg(fmt.Sprintf("o%d", i%4), fmt.Sprint(i)))
	}
	e.write(msg("p", "before"), poison, msg("p", "after1"), loose, afterQ)
	e.write(others[:10]...)
	e.write(msg("p", "after2"))
	testenv.Must(t, e.d.InTx(ctx, func(tx pgx.Tx) error { return lw.Write(ctx, tx, msg("p", "after3")) }), "write table-less")
	e.write(others[10:]...)
	e.eventually(func() bool {
		return e.count("courier_outbox") == 0 && len(e.heldPayloads()) == 3 && len(e.pub.Messages()) == 1+20+1
	}, "rows %d, held %q, published %d; stats %+v", e.count("courier_outbox"), testenv.Lazy(func() any { return e.heldPayloads() }),
		len(e.pub.Messages()), r.Stats())
	if got := payloadsOf(e.pub.Messages(), "p"); !slices.Equal(got, []string{"before"}) {
		t.Fatalf("the held key published %q, want before alone", got)
	}
	if got := payloadsOf(e.pub.Messages(), "q"); !slices.Equal(got, []string{"afterQ"}) {
		t.Fatalf("the key of a topic not held published %q, want afterQ", got)
	}
	if got := e.heldPayloads(); !slices.Equal(got, []string{"after1", "after2", "after3"}) {
		t.Fatalf("held %q, want after1, after2, after3 in order", got)
	}
	var cause, behind int64
	var holds bool
	testenv.Must(t, e.pg.Pool.QueryRow(ctx, `SELECT id, holds FROM courier_outbox_dead_letters WHERE message_id = $1`, poison.ID).Scan(&cause, &holds), "dead letter")
	if !holds {
		t.Fatal("the poison's dead letter does not hold its key")
	}
	testenv.Must(t, e.pg.Pool.QueryRow(ctx, `SELECT count(*) FROM courier_outbox_held WHERE behind <> $1`, cause).Scan(&behind), "behind")
	if behind != 0 {
		t.Fatalf("%d held messages behind another dead letter than %d", behind, cause)
	}
	testenv.Must(t, e.pg.Pool.QueryRow(ctx, `SELECT count(*) FROM courier_outbox_dead_letters WHERE message_id = $1 AND NOT holds`, loose.ID).Scan(&behind), "loose")
	if behind != 1 {
		t.Fatal("the dead letter of a topic not in HoldKeys is missing, or holds its key")
	}

	// Started again, a relay holds the key still.
	stop()
	r, _ = e.startMade(e.pub, cfg)
	e.write(msg("p", "after4"), msg("o0", "later"))
	e.eventually(func() bool { return e.count("courier_outbox") == 0 && len(e.heldPayloads()) == 4 },
		"after a restart: rows %d %q, held %q; stats %+v", e.count("courier_outbox"), testenv.Lazy(func() any { return e.rowPayloads() }), testenv.Lazy(func() any { return e.heldPayloads() }), r.Stats())
	if got := payloadsOf(e.pub.Messages(), "p"); !slices.Equal(got, []string{"before"}) {
		t.Fatalf("the held key published %q after a restart, want before alone", got)
	}

	// Replayed, the dead letter goes first, then the messages held behind
	// it, in order; the relay finds the key released.
	testenv.Must(t, e.d.Admin().ReplayDeadLetter(ctx, cause), "replay")
	want := []string{"before", "poison", "after1", "after2", "after3", "after4"}
	e.eventually(func() bool {
		return len(payloadsOf(e.pub.Messages(), "p")) >= len(want) && e.count("courier_outbox") == 0
	},
		"after the replay, the key published %q, want %q; stats %+v", testenv.Lazy(func() any { return payloadsOf(e.pub.Messages(), "p") }), want, r.Stats())
	if got := payloadsOf(e.pub.Messages(), "p"); !slices.Equal(got, want) {
		t.Fatalf("after the replay, the key published %q, want %q", got, want)
	}
	if n := e.count("courier_outbox_held") + e.count("courier_outbox_dead_letters WHERE holds"); n != 0 {
		t.Fatalf("%d held messages or holding dead letters left", n)
	}
	e.write(msg("p", "after5"))
	e.eventually(func() bool { return len(payloadsOf(e.pub.Messages(), "p")) == len(want)+1 }, "the released key's next message was not published")
}

// rowPayloads returns the payloads of the rows in courier_outbox, by id.
func (e *env) rowPayloads() []string {
	e.t.Helper()
	rows, err := e.pg.Pool.Query(context.Background(), `SELECT convert_from(payload, 'UTF8') FROM courier_outbox ORDER BY id`)
	testenv.Must(e.t, err, "rows")
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	testenv.Must(e.t, err, "rows")
	return got
}

// A relay that starts after a key's release reads first, from the log, the
// rows of the key committed before the release, then the rows the release
// put back with new ids. The first copies' rows are gone: it drops them
// instead of publishing them ahead of the released messages.
func TestReleasedWhileStopped(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.MaxAttempts = 1
	cfg.HoldKeys = []string{"events"}
	ctx := context.Background()
	r, stop := e.startMade(e.pub, cfg)
	poison := msg("p", "poison")
	e.pub.Fail(poison.ID, 1) // a dead letter; published once replayed
	e.write(msg("p", "before"), poison, msg("p", "after1"))
	e.eventually(func() bool { return e.count("courier_outbox") == 0 && len(e.heldPayloads()) == 1 },
		"rows %d, held %q; stats %+v", e.count("courier_outbox"), testenv.Lazy(func() any { return e.heldPayloads() }), r.Stats())
	// Stopped once it has confirmed all that: it reads none of it again.
	var done string
	testenv.Must(t, e.pg.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&done), "log position")
	e.eventually(func() bool {
		var confirmed bool
		err := e.pg.Pool.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2`, done, e.slot).Scan(&confirmed)
		return err == nil && confirmed
	}, "the relay did not confirm the log up to %s", done)
	stop()

	e.write(msg("p", "after2"), msg("o", "other")) // read by no relay yet
	var cause int64
	testenv.Must(t, e.pg.Pool.QueryRow(ctx, `SELECT id FROM courier_outbox_dead_letters WHERE message_id = $1`, poison.ID).Scan(&cause), "dead letter")
	testenv.Must(t, e.d.Admin().ReplayDeadLetter(ctx, cause), "replay")
	r, _ = e.startMade(e.pub, cfg)
	want := []string{"before", "poison", "after1", "after2"}
	e.eventually(func() bool {
		return len(payloadsOf(e.pub.Messages(), "p")) >= len(want) && len(payloadsOf(e.pub.Messages(), "o")) == 1 && e.count("courier_outbox") == 0
	}, "after the replay, the key published %q, want %q; rows %d; stats %+v", testenv.Lazy(func() any { return payloadsOf(e.pub.Messages(), "p") }), want,
		testenv.Lazy(func() any { return e.count("courier_outbox") }), r.Stats())
	if got := payloadsOf(e.pub.Messages(), "p"); !slices.Equal(got, want) {
		t.Fatalf("after a release while no relay ran, the key published %q, want %q", got, want)
	}
}
