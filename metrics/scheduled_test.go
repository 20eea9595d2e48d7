package metrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/memstore"
)

// FromStatus exports the scheduled messages that wait, those already due,
// and the time until the next, from the store's Status.
func TestScheduledGauges(t *testing.T) {
	clock := memstore.NewClock()
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clock.Set(t0)
	st := memstore.New(memstore.Config{Clock: clock.Now})
	w := outbox.New(st, outbox.Config{})
	ctx := context.Background()
	for _, at := range []time.Time{t0.Add(-time.Second), t0.Add(90 * time.Second), t0.Add(time.Hour)} {
		testenv.Must(t, st.InTx(ctx, func(tx *memstore.Tx) error {
			return w.Schedule(ctx, tx, outbox.At(at), courier.NewMessage("t", "k", "T", nil))
		}), "schedule")
	}
	col, err := metrics.New(metrics.Config{Scheduled: metrics.FromStatus(st.Operations())})
	testenv.Must(t, err, "new")
	want := `
# HELP courier_outbox_scheduled_due_messages Scheduled messages whose due time has passed but that no relay has released yet: above zero for long, no relay runs.
# TYPE courier_outbox_scheduled_due_messages gauge
courier_outbox_scheduled_due_messages 1
# HELP courier_outbox_scheduled_messages Scheduled messages waiting to fall due (outbox.Writer.Schedule).
# TYPE courier_outbox_scheduled_messages gauge
courier_outbox_scheduled_messages 3
# HELP courier_outbox_scheduled_next_due_seconds Time until the earliest waiting scheduled message falls due (negative: overdue); absent when none waits.
# TYPE courier_outbox_scheduled_next_due_seconds gauge
courier_outbox_scheduled_next_due_seconds -1
`
	testenv.Must(t, testutil.CollectAndCompare(col, strings.NewReader(want),
		"courier_outbox_scheduled_messages", "courier_outbox_scheduled_due_messages", "courier_outbox_scheduled_next_due_seconds"), "gauges")
}
