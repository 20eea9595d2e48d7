package relay_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/postgres"
)

// BenchmarkDrain measures how fast one relay empties a pre-filled outbox into
// JetStream: b.N messages over 10,000 keys, reported as messages/s.
func BenchmarkDrain(b *testing.B) {
	for _, keys := range []int{10000, 1} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			h := newHarness(b, onPostgres, anyNATS)
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
		testenv.Must(h.t, h.writeTx(ctx, true, msgs...), "write")
		done += k
	}
}

// BenchmarkCommitToPublish offers a steady 1,000 messages/s, one message per
// transaction, to a running relay and reports the time from each commit
// returning to the message arriving at a JetStream subscriber: p50, p99 and
// p999 in milliseconds. b.N is the number of messages (at least 2,000).
func BenchmarkCommitToPublish(b *testing.B) {
	for _, rate := range []int{1000} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			h := newHarness(b, onPostgres, anyNATS)
			n := max(b.N, 2000)
			var mu sync.Mutex
			committed := make(map[string]time.Time, n)
			latencies := make([]time.Duration, 0, n)
			done := make(chan struct{})
			sub, err := h.nc.Subscribe(h.mapping.Subjects(), func(m *natsgo.Msg) {
				id := m.Header.Get(jetstream.MsgIDHeader)
				now := time.Now()
				mu.Lock()
				defer mu.Unlock()
				if at, ok := committed[id]; ok {
					latencies = append(latencies, now.Sub(at))
					delete(committed, id)
					if len(latencies) == n {
						close(done)
					}
				}
			})
			testenv.Must(b, err, "subscribe")
			defer sub.Unsubscribe()
			h.startRelay(h.publisher(), h.relayConfig())
			time.Sleep(300 * time.Millisecond) // let the relay go idle
			ctx := context.Background()
			w := outbox.New(postgres.Pgx(), outbox.Config{})
			// Eight writers take their turns from a ticker, so the offered
			// load stays at rate even when one commit takes longer.
			turns := make(chan int)
			var writers sync.WaitGroup
			for range 8 {
				writers.Go(func() {
					for i := range turns {
						msg := courier.NewMessage("events", fmt.Sprintf("key-%d", i%100), "Tick", []byte("x"))
						tx, err := h.pg.Pool.Begin(ctx)
						if err == nil {
							err = w.Write(ctx, tx, msg)
						}
						if err == nil {
							mu.Lock() // the subscriber may see it before Commit returns
							committed[msg.ID.String()] = time.Now()
							mu.Unlock()
							err = tx.Commit(ctx)
						}
						if err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						if _, ok := committed[msg.ID.String()]; ok {
							committed[msg.ID.String()] = time.Now()
						}
						mu.Unlock()
					}
				})
			}
			b.ResetTimer()
			tick := time.NewTicker(time.Second / time.Duration(rate))
			for i := range n {
				<-tick.C
				turns <- i
			}
			tick.Stop()
			close(turns)
			writers.Wait()
			select {
			case <-done:
			case <-time.After(time.Minute):
				b.Fatalf("only %d of %d messages arrived", len(latencies), n)
			}
			b.StopTimer()
			slices.Sort(latencies)
			q := func(p float64) float64 {
				return float64(latencies[min(len(latencies)-1, int(p*float64(len(latencies))))].Microseconds()) / 1000
			}
			b.ReportMetric(q(0.50), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
			b.ReportMetric(q(0.999), "p999-ms")
		})
	}
}

// BenchmarkWriters measures business transactions per second with 8
// concurrent writers, each transaction inserting one business row and one
// outbox row. References: a plain insert, and two plain inserts (the cost of
// one more statement and round trip). The outbox is measured written with
// outbox.Writer, pipelined with the business insert (postgres.QueueMessages),
// and with its wake-up trigger dropped, idle (no relay waiting: the usual
// case under load), armed (a relay waiting, so every writer notifies) and,
// for comparison, replaced by a plain NOTIFY in every transaction.
func BenchmarkWriters(b *testing.B) {
	for _, mode := range []string{"plain-insert", "two-plain-inserts", "trigger-idle", "outbox-pipelined", "no-trigger", "trigger-armed", "notify-always"} {
		b.Run(mode, func(b *testing.B) {
			h := newHarness(b, onPostgres, anyNATS)
			ctx := context.Background()
			ow := outbox.New(postgres.Pgx(), outbox.Config{})
			exec := func(sql string) {
				_, err := h.pg.Pool.Exec(ctx, sql)
				testenv.Must(b, err, sql)
			}
			exec("CREATE TABLE orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, customer text NOT NULL, total int NOT NULL, created_at timestamptz NOT NULL DEFAULT now())")
			switch mode {
			case "no-trigger":
				exec("DROP TRIGGER courier_outbox_wake ON courier_outbox")
			case "trigger-armed":
				n := h.notifier()
				nctx, cancel := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() { defer close(done); _ = n.Run(nctx) }()
				defer func() { cancel(); <-done }()
				testenv.Eventually(b, 5*time.Second, func() bool { ok, _ := n.Arm(ctx); return ok }, "could not arm")
			case "notify-always":
				exec("DROP TRIGGER courier_outbox_wake ON courier_outbox")
				exec("CREATE TRIGGER courier_outbox_wake AFTER INSERT ON courier_outbox FOR EACH STATEMENT EXECUTE FUNCTION courier_outbox_wake()")
			}
			var next atomic.Int64
			start := time.Now()
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						tx, err := h.pg.Pool.Begin(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						if mode == "outbox-pipelined" {
							// The business row and its message in one round trip.
							var batch pgx.Batch
							batch.Queue("INSERT INTO orders (customer, total) VALUES ($1, $2)", "c", int(i))
							err = postgres.QueueMessages(&batch, courier.Limits{}, courier.NewMessage("orders", fmt.Sprintf("o-%d-%d", w, i), "OrderPlaced", make([]byte, 200)))
							if err == nil {
								err = tx.SendBatch(ctx, &batch).Close()
							}
							if err == nil {
								err = tx.Commit(ctx)
							}
							if err != nil {
								b.Error(err)
								return
							}
							continue
						}
						_, err = tx.Exec(ctx, "INSERT INTO orders (customer, total) VALUES ($1, $2)", "c", int(i))
						if err == nil && mode == "two-plain-inserts" {
							_, err = tx.Exec(ctx, "INSERT INTO orders (customer, total) VALUES ($1, $2)", "c", int(i))
						} else if err == nil && mode != "plain-insert" {
							err = ow.Write(ctx, tx, courier.NewMessage("orders", fmt.Sprintf("o-%d-%d", w, i), "OrderPlaced", make([]byte, 200)))
						}
						if err == nil {
							err = tx.Commit(ctx)
						}
						if err != nil {
							b.Error(err)
							_ = tx.Rollback(ctx)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tx/s")
		})
	}
}
