package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
)

// BenchmarkDrain measures how fast one relay empties a pre-filled outbox into
// JetStream: b.N messages over 10,000 keys, reported as messages/s.
func BenchmarkDrain(b *testing.B) {
	for _, keys := range []int{10000, 1} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			h := newHarness(b, testenv.NATS(b))
			n := max(b.N, 1000)
			h.fill(n, keys)
			b.ResetTimer()
			start := time.Now()
			r, stop := h.startRelay(h.publisher(), h.relayConfig())
			testenv.Eventually(b, 10*time.Minute, func() bool { return r.Metrics().Published >= int64(n) }, "not drained")
			elapsed := time.Since(start)
			b.StopTimer()
			stop()
			b.ReportMetric(float64(n)/elapsed.Seconds(), "msg/s")
			b.ReportMetric(float64(r.Metrics().Batches), "batches")
		})
	}
}

// fill writes n messages in transactions of 1000 with the outbox writer.
func (h *harness) fill(n, keys int) {
	ctx := context.Background()
	for done := 0; done < n; {
		k := min(1000, n-done)
		msgs := make([]courier.Message, k)
		for i := range msgs {
			msgs[i] = courier.NewMessage("events", fmt.Sprintf("key-%d", (done+i)%keys), "Numbered", make([]byte, 200))
		}
		tx, err := h.pg.Pool.Begin(ctx)
		testenv.Must(h.t, err, "begin")
		testenv.Must(h.t, h.writer.Write(ctx, tx, msgs...), "write")
		testenv.Must(h.t, tx.Commit(ctx), "commit")
		done += k
	}
}
