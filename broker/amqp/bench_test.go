package amqp_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/internal/testenv"
)

// BenchmarkPublish measures publishing 1,000 messages to a durable quorum
// queue (the test broker, COURIER_TEST_AMQP_URL): in one Publish call, as
// the relays send 1,000 keys, and one message per call, as they send one
// key's messages (each once the previous one's confirm came, since the
// publisher does not keep a key's order when its messages are pipelined).
// The second is RabbitMQ's confirm round trip: the queue's write to its
// log, fsynced, then the confirm.
//
//	go test ./broker/amqp -run '^$' -bench Publish -benchtime 20x
func BenchmarkPublish(b *testing.B) {
	for _, perCall := range []int{1000, 1} {
		b.Run(fmt.Sprintf("per-call=%d", perCall), func(b *testing.B) {
			cfg, _ := setup(b, amqp.Topology{Queue: "bench"})
			pub, err := amqp.NewPublisher(amqp.PublisherConfig{Config: cfg})
			testenv.Must(b, err, "publisher")
			b.Cleanup(func() { _ = pub.Close() })
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				msgs := make([]courier.Message, 1000)
				for i := range msgs {
					msgs[i] = courier.NewMessage("events", fmt.Sprintf("key-%d", i), "Numbered", make([]byte, 200))
				}
				b.StartTimer()
				for start := 0; start < len(msgs); start += perCall {
					for i, err := range pub.Publish(context.Background(), msgs[start:start+perCall]) {
						if err != nil {
							b.Fatalf("message %d: %v", start+i, err)
						}
					}
				}
			}
			b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "msg/s")
			b.ReportMetric(b.Elapsed().Seconds()*1e6/float64(b.N*1000), "µs/msg")
		})
	}
}
