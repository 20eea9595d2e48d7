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
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/memstore"
)

// The held keys' gauges come from the store's Stats, through StoreStats
// and through FromStatus: a key held by a dead letter with two messages
// behind it, held for 90 seconds; none once it is discarded.
func TestHeldKeysGauges(t *testing.T) {
	for _, via := range []string{"StoreStats", "FromStatus"} {
		t.Run(via, func(t *testing.T) {
			clock := memstore.NewClock()
			clock.Set(time.Unix(1000, 0))
			st := memstore.New(memstore.Config{Clock: clock.Now})
			ctx := context.Background()
			testenv.Must(t, st.InTx(ctx, func(tx *memstore.Tx) error {
				return st.Insert(ctx, tx, []courier.Message{
					courier.NewMessage("orders", "k", "T", nil), courier.NewMessage("orders", "k", "T", nil),
					courier.NewMessage("orders", "k", "T", nil), courier.NewMessage("orders", "other", "T", nil),
				})
			}), "insert")
			b, err := st.Claim(ctx, "r", 1, time.Minute)
			testenv.Must(t, err, "claim")
			testenv.Must(t, st.Complete(ctx, "r", b.Lease, store.Outcome{Dead: []store.Failure{{Seq: b.Records[0].Seq, Error: "refused", Counted: true, Hold: true}}}), "complete")
			_, err = st.Claim(ctx, "r", 10, time.Minute) // moves the key's rows behind its dead letter
			testenv.Must(t, err, "claim")
			clock.Advance(90 * time.Second)

			src := metrics.StoreStats(st)
			if via == "FromStatus" {
				src = metrics.FromStatus(st.Operations())
			}
			col, err := metrics.New(metrics.Config{Outbox: src, MinInterval: time.Nanosecond})
			testenv.Must(t, err, "new")
			names := []string{"courier_outbox_held_keys", "courier_outbox_held_messages", "courier_outbox_oldest_hold_age_seconds"}
			want := `
# HELP courier_outbox_held_keys Keys held by a dead letter (relay HoldKeys): their messages wait until it is replayed or discarded.
# TYPE courier_outbox_held_keys gauge
courier_outbox_held_keys 1
# HELP courier_outbox_held_messages Messages waiting behind a dead letter that holds their key.
# TYPE courier_outbox_held_messages gauge
courier_outbox_held_messages 2
# HELP courier_outbox_oldest_hold_age_seconds How long the oldest dead letter that holds its key has held it; 0 when none does.
# TYPE courier_outbox_oldest_hold_age_seconds gauge
courier_outbox_oldest_hold_age_seconds 90
`
			if err := testutil.CollectAndCompare(col, strings.NewReader(want), names...); err != nil {
				t.Error(err)
			}
			testenv.Must(t, st.DiscardDeadLetter(ctx, b.Records[0].Seq), "discard")
			want = strings.NewReplacer("held_keys 1", "held_keys 0", "held_messages 2", "held_messages 0", "seconds 90", "seconds 0").Replace(want)
			testenv.Eventually(t, 5*time.Second, func() bool {
				return testutil.CollectAndCompare(col, strings.NewReader(want), names...) == nil
			}, "the gauges after the discard: %v", testenv.Lazy(func() any { return testutil.CollectAndCompare(col, strings.NewReader(want), names...) }))
		})
	}
}
