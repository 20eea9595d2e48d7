package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/postgres"
)

// The outbox's trigger notifies only while a relay is armed: a commit then
// wakes it within milliseconds; with no relay waiting, writers send nothing.
func TestNotifierWakesOnlyWhenArmed(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	n, err := postgres.NewNotifier(pg.URL, nil)
	testenv.Must(t, err, "notifier")
	nctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(nctx) }()
	defer func() { stop(); <-done }()

	w := outbox.New(postgres.Pgx(), outbox.Config{})
	write := func() {
		tx, err := pg.Pool.Begin(ctx)
		testenv.Must(t, err, "begin")
		defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
		testenv.Must(t, w.Write(ctx, tx, courier.NewMessage("orders", "o-1", "OrderPlaced", nil)), "write")
		testenv.Must(t, tx.Commit(ctx), "commit")
	}
	drain := func() {
		for {
			select {
			case <-n.Wake():
			default:
				return
			}
		}
	}

	// Not armed: commits notify nobody.
	time.Sleep(200 * time.Millisecond) // the listener is up
	drain()
	write()
	select {
	case <-n.Wake():
		t.Fatal("woken by a commit while no relay was armed")
	case <-time.After(300 * time.Millisecond):
	}

	// Armed: the next commit wakes it.
	testenv.Eventually(t, 5*time.Second, func() bool { ok, err := n.Arm(ctx); return ok && err == nil }, "could not arm")
	drain()
	start := time.Now()
	write()
	select {
	case <-n.Wake():
		t.Logf("woken %s after the commit began", time.Since(start).Round(time.Microsecond))
	case <-time.After(5 * time.Second):
		t.Fatal("an armed notifier was not woken by a commit")
	}
	testenv.Must(t, n.Disarm(ctx), "disarm")
}
