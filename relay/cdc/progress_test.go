package cdc_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
)

// confirmedAt returns the slot's confirmed position.
func (e *env) confirmedAt() pglogrepl.LSN {
	e.t.Helper()
	var at pglogrepl.LSN
	testenv.Must(e.t, e.pg.Admin.QueryRow(context.Background(),
		"SELECT coalesce(confirmed_flush_lsn, '0/0')::text FROM pg_replication_slots WHERE slot_name = $1", e.slot).Scan(&at), "confirmed position")
	return at
}

// walAt returns the end of the log now.
func (e *env) walAt() pglogrepl.LSN {
	e.t.Helper()
	var at pglogrepl.LSN
	testenv.Must(e.t, e.pg.Admin.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&at), "log position")
	return at
}

// The relay confirms a transaction's position to PostgreSQL soon after
// the broker acknowledged its messages, not at the next status interval:
// a relay killed then publishes again only what it had in hand.
func TestConfirmsSoonAfterPublishing(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.StatusInterval = time.Hour
	r, _ := e.startMade(e.pub, cfg)
	for i := range 5 {
		e.write(msg(fmt.Sprint(i), fmt.Sprint(i)))
		end := e.walAt()
		e.eventually(func() bool { return e.confirmedAt() >= end },
			"transaction %d: the slot is confirmed at %s, not past its commit at %s; stats %+v", i, testenv.Lazy(func() any { return e.confirmedAt() }), end,
			testenv.Lazy(func() any { return r.Stats() }))
	}
}

// warnings counts the relay's records at Warn and above.
type warnings struct {
	slog.Handler
	n *atomic.Int64
}

func (w warnings) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.n.Add(1)
	}
	return w.Handler.Handle(ctx, r)
}

// A relay that died after it published transactions and deleted their rows,
// but before it confirmed them, leaves them in the slot: the next relay
// publishes them again (duplicates the broker drops) and moves on at once,
// without looking for their rows any longer: they are gone, and their
// transactions visible.
func TestRepublishedTransactionsMoveOn(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	_, stop := e.startMade(e.pub, cfg)
	stop()
	var want []courier.Message
	for i := range 50 {
		want = append(want, msg(fmt.Sprint(i%5), fmt.Sprint(i)))
		e.write(want[i])
	}
	end := e.walAt()
	_, err := e.pg.Pool.Exec(context.Background(), "DELETE FROM courier_outbox")
	testenv.Must(t, err, "delete the rows")

	var warned atomic.Int64
	cfg.Logger = slog.New(warnings{Handler: cfg.Logger.Handler(), n: &warned})
	r, _ := e.startMade(e.pub, cfg)
	e.eventually(func() bool { return e.confirmedAt() >= end }, "the slot is confirmed at %s, not past the republished transactions at %s; stats %+v",
		testenv.Lazy(func() any { return e.confirmedAt() }), end, testenv.Lazy(func() any { return r.Stats() }))
	checkOrder(t, want, e.pub.Messages())
	if n := warned.Load(); n != 0 {
		t.Fatalf("%d warnings while republishing transactions whose rows are gone", n)
	}
}
