package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/postgres"
)

// BenchmarkClusterDrain measures how fast one relay empties an outbox of
// b.N messages (at least 10,000) over 10,000 keys on PostgreSQL into a
// JetStream stream: on the current nats-server alone (R1), on a three-node
// cluster of it (R3 stream), each with the default lazy flush and with
// sync_interval: always, and on the machine's NATS server
// (COURIER_TEST_NATS_URL; Debian's 2.9 here). Messages/s in msg/s.
//
//	go test -run '^$' -bench ClusterDrain -benchtime 20000x ./test/chaos
func BenchmarkClusterDrain(b *testing.B) {
	targets := []struct {
		name        string
		nodes       int
		sync        bool
		replicas    int
		machineNATS bool
	}{
		{"machine-nats/R1", 0, false, 1, true},
		{"current/R1/sync=default", 1, false, 1, false},
		{"current/R1/sync=always", 1, true, 1, false},
		{"current/R3/sync=default", 3, false, 3, false},
		{"current/R3/sync=always", 3, true, 3, false},
	}
	for _, tg := range targets {
		b.Run(tg.name, func(b *testing.B) {
			ctx := context.Background()
			var url string
			switch {
			case tg.machineNATS:
				url = testenv.NATS(b)
			case tg.nodes == 1:
				url = testenv.StartNATSServer(b, testenv.NATSServerConfig{SyncAlways: tg.sync}).URL
			default:
				url = testenv.NATSCluster(b, tg.nodes, testenv.NATSClusterOptions{SyncAlways: tg.sync}).URL()
			}
			pg := testenv.Postgres(b, testenv.Migrate(postgres.NewDriver))
			nc, err := couriernats.Connect(url)
			testenv.Must(b, err, "connect")
			b.Cleanup(nc.Close)
			stream := testenv.Name("DRAIN")
			mapping := couriernats.Config{SubjectPrefix: stream + "."}
			testenv.Must(b, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: stream, Replicas: tg.replicas}), "ensure stream")
			b.Cleanup(func() {
				if js, err := jetstream.New(nc); err == nil {
					_ = js.DeleteStream(context.Background(), stream)
				}
			})

			n := max(b.N, 10000)
			w := outbox.New(postgres.Pgx(), outbox.Config{})
			for done := 0; done < n; {
				k := min(1000, n-done)
				msgs := make([]courier.Message, k)
				for i := range msgs {
					msgs[i] = courier.NewMessage("events", fmt.Sprintf("key-%d", (done+i)%10000), "Numbered", make([]byte, 200))
				}
				tx, err := pg.Pool.Begin(ctx)
				testenv.Must(b, err, "begin")
				testenv.Must(b, w.Write(ctx, tx, msgs...), "write")
				testenv.Must(b, tx.Commit(ctx), "commit")
				done += k
			}
			st, err := postgres.NewStore(ctx, pg.Pool, postgres.StoreConfig{})
			testenv.Must(b, err, "store")
			pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
			testenv.Must(b, err, "publisher")
			r, err := relay.New(st, pub, relay.Config{LeaseDuration: 30 * time.Second, PublishTimeout: 5 * time.Second, PollInterval: 200 * time.Millisecond})
			testenv.Must(b, err, "relay")

			b.ResetTimer()
			start := time.Now()
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- r.Run(rctx) }()
			testenv.Eventually(b, 10*time.Minute, func() bool { return r.Metrics().Published >= int64(n) }, "not drained")
			elapsed := time.Since(start)
			b.StopTimer()
			cancel()
			testenv.Must(b, <-done, "relay")
			b.ReportMetric(float64(n)/elapsed.Seconds(), "msg/s")
		})
	}
}
