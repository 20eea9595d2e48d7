package cdc_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/postgres"
)

// The CDC relay publishes scheduled messages at or after their due times,
// whichever inserter wrote them (a table-less writer's wait as rows too),
// after what their keys wrote before, and adds the scheduled table to a
// publication made before scheduled messages existed.
func TestScheduled(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	_, err := e.pg.Pool.Exec(ctx, "CREATE PUBLICATION "+e.slot+" FOR TABLE courier_outbox WITH (publish = 'insert')")
	if err != nil {
		t.Fatalf("an old publication: %v", err)
	}
	pub := &timed{Publisher: e.pub, tries: map[[16]byte][]time.Time{}}
	e.startMade(pub, e.config())
	var tables int
	if err := e.pg.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_publication_tables WHERE pubname = $1", e.slot).Scan(&tables); err != nil || tables != 2 {
		t.Fatalf("the publication has %d tables (%v), want courier_outbox and courier_outbox_scheduled", tables, err)
	}
	first := msg("k", "first")
	e.write(first)
	lw := outbox.New(postgres.LogOnly(), outbox.Config{})
	start := time.Now()
	due := map[[16]byte]time.Time{}
	var want []courier.Message
	for i := range 20 {
		at := start.Add(500*time.Millisecond + time.Duration(i*50+rand.IntN(20))*time.Millisecond)
		m := msg("k", fmt.Sprint(i))
		w := e.w
		if i%2 == 1 {
			w = lw
		}
		if err := e.d.InTx(ctx, func(tx pgx.Tx) error { return w.Schedule(ctx, tx, outbox.At(at), m) }); err != nil {
			t.Fatalf("schedule %d: %v", i, err)
		}
		due[m.ID], want = at, append(want, m)
	}
	e.eventually(func() bool { return len(e.pub.Messages()) >= 21 }, "published %d of 21", len(e.pub.Messages()))
	for _, m := range want {
		if tries := pub.triesOf(m.ID); len(tries) == 0 || tries[0].Before(due[m.ID]) {
			t.Fatalf("message %s due at %s was sent at %v: early", m.Payload, due[m.ID].Format(time.StampMilli), tries)
		}
	}
	checkOrder(t, append([]courier.Message{first}, want...), e.pub.Messages())
	e.eventually(func() bool { return e.count("courier_outbox") == 0 }, "rows left in the outbox")
}
