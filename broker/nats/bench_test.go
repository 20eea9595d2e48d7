package nats_test

import (
	"context"
	"fmt"
	"os"
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

// BenchmarkRelayDrain measures how fast one relay empties a pre-filled
// PostgreSQL outbox (COURIER_TEST_POSTGRES_URL) into a current nats-server
// (a process with COURIER_TEST_NATS_SERVER, else embedded): b.N messages
// (at least 1,000) over 10,000 keys or on one key, with atomic batches
// (the relay pipelines a key's run) and without (one message per key per
// round trip), reported as messages/s. Run it with a fixed count, e.g.
// -bench RelayDrain -benchtime 20000x.
func BenchmarkRelayDrain(b *testing.B) {
	for _, keys := range []int{10000, 1} {
		for _, batches := range []bool{true, false} {
			b.Run(fmt.Sprintf("keys=%d/batches=%v", keys, batches), func(b *testing.B) {
				benchDrain(b, keys, !batches)
			})
		}
	}
}

func benchDrain(b *testing.B, keys int, noBatches bool) {
	ctx := context.Background()
	pg := testenv.Postgres(b, testenv.Migrate(postgres.NewDriver))
	url := ""
	if os.Getenv(testenv.EnvNATSServer) != "" {
		url = testenv.StartNATSServer(b, testenv.NATSServerConfig{}).URL
	} else {
		url = testenv.EmbeddedNATS(b).ClientURL()
	}
	nc, err := couriernats.Connect(url)
	testenv.Must(b, err, "connect")
	b.Cleanup(nc.Close)
	stream := testenv.Name("BD")
	mapping := couriernats.Config{SubjectPrefix: stream + "."}
	testenv.Must(b, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: stream}), "ensure stream")

	n := max(b.N, 1000)
	w := outbox.New(postgres.Pgx(), outbox.Config{})
	for done := 0; done < n; {
		k := min(1000, n-done)
		msgs := make([]courier.Message, k)
		for i := range msgs {
			msgs[i] = courier.NewMessage("events", fmt.Sprintf("key-%d", (done+i)%keys), "Numbered", make([]byte, 200))
		}
		tx, err := pg.Pool.Begin(ctx)
		testenv.Must(b, err, "begin")
		testenv.Must(b, w.Write(ctx, tx, msgs...), "write")
		testenv.Must(b, tx.Commit(ctx), "commit")
		done += k
	}
	st, err := postgres.NewStore(ctx, pg.Pool, postgres.StoreConfig{})
	testenv.Must(b, err, "store")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping, NoAtomicBatches: noBatches})
	testenv.Must(b, err, "publisher")
	if pub.KeepsKeyOrder() == noBatches {
		b.Fatalf("KeepsKeyOrder %v with NoAtomicBatches %v on nats-server %s", !noBatches, noBatches, nc.ConnectedServerVersion())
	}
	r, err := relay.New(st, pub, relay.Config{PollInterval: 50 * time.Millisecond})
	testenv.Must(b, err, "relay")
	b.ResetTimer()
	start := time.Now()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	testenv.Eventually(b, 10*time.Minute, func() bool { return r.Metrics().Published >= int64(n) }, "not drained")
	elapsed := time.Since(start)
	b.StopTimer()
	stop()
	testenv.Must(b, <-done, "relay")
	b.ReportMetric(float64(n)/elapsed.Seconds(), "msg/s")
	b.ReportMetric(float64(r.Metrics().Batches), "claims")
}

// BenchmarkPublishRun measures one Publish call of 1,000 messages of 200
// bytes, once KeepsKeyOrder has promised a key's order, into a file stream
// on a current nats-server (a process with COURIER_TEST_NATS_SERVER, else
// embedded), over 1 to 1,000 keys (runs of 1,000 to 1 messages of a key),
// every key's run sent as atomic batches, every one in rounds, or as the
// default BatchTime splits them; and, with atomic batches not allowed on
// the stream, in rounds.
func BenchmarkPublishRun(b *testing.B) {
	modes := []struct {
		name      string
		batchTime time.Duration // 0: every run as batches
		atomic    bool
	}{
		{"batches", 0, true},
		{"rounds", time.Hour, true},
		{"default", couriernats.DefaultBatchTime, true},
		{"no-atomic", couriernats.DefaultBatchTime, false},
	}
	for _, keys := range []int{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000} {
		for _, mode := range modes {
			b.Run(fmt.Sprintf("keys=%d/%s", keys, mode.name), func(b *testing.B) {
				benchPublishRun(b, keys, mode.batchTime, mode.atomic)
			})
		}
	}
}

func benchPublishRun(b *testing.B, keys int, batchTime time.Duration, atomic bool) {
	url := ""
	if os.Getenv(testenv.EnvNATSServer) != "" {
		url = testenv.StartNATSServer(b, testenv.NATSServerConfig{}).URL
	} else {
		url = testenv.EmbeddedNATS(b).ClientURL()
	}
	nc := testenv.Connect(b, url)
	stream := testenv.Name("PR")
	mapping := couriernats.Config{SubjectPrefix: stream + "."}
	testenv.Must(b, couriernats.EnsureStream(context.Background(), nc, mapping, couriernats.StreamConfig{Name: stream}), "ensure stream")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping, BatchTime: batchTime})
	testenv.Must(b, err, "publisher")
	if batchTime == 0 {
		couriernats.BatchEveryRun(pub)
	}
	if !pub.KeepsKeyOrder() {
		b.Fatal("KeepsKeyOrder: false")
	}
	if !atomic {
		js, err := jetstream.New(nc)
		testenv.Must(b, err, "jetstream")
		s, err := js.Stream(context.Background(), stream)
		testenv.Must(b, err, "stream")
		cfg := s.CachedInfo().Config
		cfg.AllowAtomicPublish = false
		_, err = js.UpdateStream(context.Background(), cfg)
		testenv.Must(b, err, "update stream")
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		msgs := make([]courier.Message, 1000)
		for i := range msgs {
			msgs[i] = courier.NewMessage("events", fmt.Sprintf("key-%d", i%keys), "Numbered", make([]byte, 200))
		}
		b.StartTimer()
		for i, err := range pub.Publish(context.Background(), msgs) {
			if err != nil {
				b.Fatalf("message %d: %v", i, err)
			}
		}
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "msg/s")
}
