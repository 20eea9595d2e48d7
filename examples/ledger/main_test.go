package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier/broker/nats/embedded"
	"github.com/courier-go/courier/internal/testenv"
)

func TestMain(m *testing.M) {
	code := testenv.M(m).Run()
	testenv.RemoveCourierBinary()
	os.Exit(code)
}

// The ledger as README.md runs it: a courier relay process with
// --key-subjects publishes the postings written into the outbox to three
// instances of the consumer sharing the accounts; one instance stops half
// way (its accounts move to the others). Every account ends with each of
// its postings applied once, in order: none failed (out of order) or was
// parked.
func TestRelayFeedsInstances(t *testing.T) {
	pg := testenv.Postgres(t, func(context.Context, *pgxpool.Pool) error { return nil })
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), NoSync: true}) // nats-server 2.10 or later
	testenv.Must(t, err, "start NATS")
	t.Cleanup(srv.Shutdown)
	ctx := t.Context()
	// The tables, before the relay looks for them.
	testenv.Must(t, run(ctx, config{db: pg.URL, write: 1, accounts: 1}, io.Discard), "migrate and write a first posting")

	relayLog := &testenv.Buffer{}
	relay := exec.Command(testenv.CourierBinary(t), "relay", "--log-format", "text", "--log-level", "warn",
		"--database-url", pg.URL, "--broker-url", srv.ClientURL(), "--key-subjects")
	relay.Stderr = relayLog
	testenv.Must(t, relay.Start(), "start courier relay")
	t.Cleanup(func() {
		_ = relay.Process.Signal(syscall.SIGTERM)
		_ = relay.Wait()
		if t.Failed() {
			t.Logf("courier relay's log:\n%s", relayLog.String())
		}
	})

	// The relay makes the stream; the instances read it.
	nc := testenv.Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	testenv.Eventually(t, 30*time.Second, func() bool { _, err := js.Stream(ctx, "COURIER"); return err == nil },
		"the relay made no stream; its log:\n%s", relayLog)

	var wg sync.WaitGroup
	stops := make([]context.CancelFunc, 3)
	for i := range stops {
		ictx, stop := context.WithCancel(ctx)
		stops[i] = stop
		wg.Go(func() {
			if err := run(ictx, config{db: pg.URL, nats: srv.ClientURL()}, io.Discard); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("instance %d: %v", i, err)
			}
		})
	}
	t.Cleanup(func() {
		for _, stop := range stops {
			stop()
		}
		wg.Wait()
	})

	const postings = 600
	const total = postings + 1 // and the first
	testenv.Must(t, run(ctx, config{db: pg.URL, write: postings, accounts: 20}, io.Discard), "write the postings")
	applied := func() int64 {
		var n int64
		if err := pg.Pool.QueryRow(ctx, "SELECT coalesce(sum(applied), 0) FROM ledger_balances").Scan(&n); err != nil {
			t.Errorf("count: %v", err)
		}
		return n
	}
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { n := applied(); return n >= total/2, n },
		"%d of %d postings applied", testenv.Lazy(func() any { return applied() }), total)
	stops[0]() // an instance stops: the others take its accounts
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { n := applied(); return n >= total, n },
		"%d of %d postings applied", testenv.Lazy(func() any { return applied() }), total)

	var behind, failures, parked int
	err = pg.Pool.QueryRow(ctx, `SELECT
	(SELECT count(*) FROM ledger_accounts a LEFT JOIN ledger_balances b USING (account) WHERE b.applied IS DISTINCT FROM a.written),
	(SELECT count(*) FROM courier_inbox_failures), (SELECT count(*) FROM courier_inbox_dead_letters)`).Scan(&behind, &failures, &parked)
	testenv.Must(t, err, "check the ledger")
	if behind != 0 || failures != 0 || parked != 0 {
		t.Fatalf("%d accounts not applied as written, %d postings failed (out of order), %d parked", behind, failures, parked)
	}
}
