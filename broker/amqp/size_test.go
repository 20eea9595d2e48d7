package amqp_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/internal/testenv"
)

func TestTooLargeIsRejected(t *testing.T) {
	// A node of the test's own: the limit applies to every publisher.
	srv := testenv.StartRabbitMQ(t)
	cfg, q := setupOn(t, srv.URL, amqp.Topology{Queue: "size"})
	const limit = 64 << 10
	srv.Ctl("eval", "application:set_env(rabbit, max_message_size, 65536).")
	// Channels read the limit when they open.
	pub := newPublisher(t, cfg)

	msgs := messages("orders", 4, 4)
	msgs[1].Payload = make([]byte, limit+1)
	errs := pub.Publish(context.Background(), msgs)
	if !errors.Is(errs[1], broker.ErrRejected) || !strings.Contains(errs[1].Error(), "max_message_size") {
		t.Fatalf("message over the limit: %v, want ErrRejected naming max_message_size", errs[1])
	}
	for _, i := range []int{0, 2, 3} {
		// Sent, or not, on the channel the large one closed: retried,
		// never counted.
		if errs[i] != nil && !errors.Is(errs[i], broker.ErrUnavailable) {
			t.Errorf("message %d next to the large one: %v", i, errs[i])
		}
	}

	// Known now: refused before sending, the rest goes through.
	again := []courier.Message{msgs[0], msgs[1], msgs[2], msgs[3]}
	errs = pub.Publish(context.Background(), again)
	if !errors.Is(errs[1], broker.ErrRejected) {
		t.Errorf("second time: %v", errs[1])
	}
	if err := errors.Join(errs[0], errs[2], errs[3]); err != nil {
		t.Errorf("the others, second time: %v", err)
	}
	if n := queueDepth(t, cfg, q); n < 3 {
		t.Errorf("queue holds %d messages", n)
	}
}

// A memory alarm blocks publishers: publishing fails as an outage, never
// counted, and resumes when the alarm clears.
func TestMemoryAlarmIsUnavailable(t *testing.T) {
	// A node of the test's own: the alarm blocks every publisher.
	srv := testenv.StartRabbitMQ(t)
	cfg, q := setupOn(t, srv.URL, amqp.Topology{Queue: "alarm"})
	pub, err := amqp.NewPublisher(amqp.PublisherConfig{Config: cfg, ConfirmTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	mustPublish(t, pub, messages("orders", 10, 2))

	old := strings.TrimSpace(srv.Ctl("eval", "vm_memory_monitor:get_vm_memory_high_watermark()."))
	srv.Ctl("set_vm_memory_high_watermark", "0.0000001")
	for i := range 3 {
		start := time.Now()
		errs := pub.Publish(context.Background(), messages("orders", 10, 2))
		for j, err := range errs {
			if !errors.Is(err, broker.ErrUnavailable) {
				t.Fatalf("publish %d during the alarm, message %d: %v", i, j, err)
			}
		}
		t.Logf("publish %d during the alarm failed in %s: %v", i, time.Since(start).Round(time.Millisecond), errs[0])
	}
	srv.Ctl("eval", "vm_memory_monitor:set_vm_memory_high_watermark("+old+").")
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := errors.Join(pub.Publish(context.Background(), messages("orders", 10, 2))...)
		if err == nil {
			break
		}
		if !errors.Is(err, broker.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("after the alarm: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := queueDepth(t, cfg, q); n < 20 {
		t.Errorf("queue holds %d messages", n)
	}
}
