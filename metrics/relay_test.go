package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/memstore"
)

// The relay's observer counts each outcome and each kind of publish error:
// a message the broker rejects for good is dead-lettered at once, one that
// fails once is retried, one caught in an outage is retried uncounted.
func TestRelayOutcomes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := memstore.New(memstore.Config{})
	pub := memory.NewPublisher()
	col, err := metrics.New(metrics.Config{})
	testenv.Must(t, err, "new")
	r, err := relay.New(st, pub, relay.Config{
		Observer: col.Relay(), Notifier: st.NewNotifier(), PollInterval: 10 * time.Millisecond,
		Backoff: relay.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond},
	})
	testenv.Must(t, err, "relay")

	ok := courier.NewMessage("orders", "a", "OrderPlaced", nil)
	rejected := courier.NewMessage("orders", "b", "OrderPlaced", nil)
	flaky := courier.NewMessage("orders", "c", "OrderPlaced", nil)
	pub.Reject(rejected.ID, "too large")
	pub.Fail(flaky.ID, 1)
	w := outbox.New(st, outbox.Config{})
	testenv.Must(t, st.InTx(ctx, func(tx *memstore.Tx) error { return w.Write(ctx, tx, ok, rejected, flaky) }), "write")

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	for m := r.Metrics(); (m.Published < 2 || m.DeadLettered < 1) && ctx.Err() == nil; m = r.Metrics() {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	testenv.Must(t, <-done, "run")

	want := `
# HELP courier_relay_dead_lettered_messages_total Messages parked as dead letters after their last attempt, or at once when the broker rejected them for good.
# TYPE courier_relay_dead_lettered_messages_total counter
courier_relay_dead_lettered_messages_total 1
# HELP courier_relay_publish_errors_total Messages the broker did not acknowledge, by kind: unavailable (the broker's fault, not counted against the message), rejected (refused for good) or refused (counted, retried).
# TYPE courier_relay_publish_errors_total counter
courier_relay_publish_errors_total{kind="refused"} 1
courier_relay_publish_errors_total{kind="rejected"} 1
# HELP courier_relay_published_messages_total Messages the broker acknowledged and the relay marked published.
# TYPE courier_relay_published_messages_total counter
courier_relay_published_messages_total 2
# HELP courier_relay_retried_messages_total Failed publishes scheduled for another attempt.
# TYPE courier_relay_retried_messages_total counter
courier_relay_retried_messages_total 1
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want),
		"courier_relay_dead_lettered_messages_total", "courier_relay_publish_errors_total",
		"courier_relay_published_messages_total", "courier_relay_retried_messages_total"); err != nil {
		t.Error(err)
	}
	if n := value(t, col, "courier_relay_claimed_messages_total"); n < 4 {
		t.Errorf("claimed %v messages, want at least 4 (three, then the retry)", n)
	}
}

// value returns the value of the unlabelled counter name that c collects.
func value(t *testing.T, c prometheus.Collector, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	testenv.Must(t, err, "gather")
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}

// failingComplete is a relay store whose outcomes cannot be recorded, as
// when the database goes away between a claim and its completion.
type failingComplete struct{ *memstore.Store }

func (failingComplete) Complete(context.Context, string, int64, store.Outcome) error {
	return errors.New("connection reset by peer")
}

// A batch whose outcome cannot be recorded before its lease ends counts as
// a lease lost: its messages will be published again.
func TestRelayLeaseLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := memstore.New(memstore.Config{})
	col, err := metrics.New(metrics.Config{})
	testenv.Must(t, err, "new")
	r, err := relay.New(failingComplete{st}, memory.NewPublisher(), relay.Config{
		Observer: col.Relay(), LeaseDuration: time.Second, PublishTimeout: 100 * time.Millisecond, PollInterval: 10 * time.Millisecond,
	})
	testenv.Must(t, err, "relay")
	w := outbox.New(st, outbox.Config{})
	testenv.Must(t, st.InTx(ctx, func(tx *memstore.Tx) error {
		return w.Write(ctx, tx, courier.NewMessage("orders", "a", "OrderPlaced", nil))
	}), "write")
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	testenv.Eventually(t, 20*time.Second, func() bool { return value(t, col, "courier_relay_lease_losses_total") >= 1 },
		"no lease loss counted while completions fail")
	stop()
	testenv.Must(t, <-done, "run")
	if got := value(t, col, "courier_relay_published_messages_total"); got != 0 {
		t.Errorf("published %v, want 0: nothing was recorded", got)
	}
}
