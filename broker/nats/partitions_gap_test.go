package nats_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/broker/nats/embedded"
	"github.com/courier-go/courier/internal/testenv"
)

// stallDialer dials connections whose reads it can hold back: while
// stalled, what the server sends waits in the socket, as it does for a
// process the kernel stopped, while the client's timers go on.
type stallDialer struct {
	mu      sync.Mutex
	thawed  chan struct{} // closed unless stalled
	network net.Dialer
}

func newStallDialer() *stallDialer {
	d := &stallDialer{thawed: make(chan struct{})}
	close(d.thawed)
	return d
}

func (d *stallDialer) Dial(network, address string) (net.Conn, error) {
	c, err := d.network.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &stallConn{Conn: c, d: d}, nil
}

// stall holds every read back until thaw.
func (d *stallDialer) stall() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.thawed = make(chan struct{})
}

func (d *stallDialer) thaw() {
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.thawed:
	default:
		close(d.thawed)
	}
}

type stallConn struct {
	net.Conn
	d *stallDialer
}

// Read holds what it read back while the dialer is stalled, including
// what a read begun before the stall returns.
func (c *stallConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.d.mu.Lock()
	thawed := c.d.thawed
	c.d.mu.Unlock()
	<-thawed
	return n, err
}

// A partition's pull that receives nothing for two of its heartbeats
// (a process paused, a host that stalled) pulls again while the first pull
// is still open on the server, which then sends more than the client's
// buffer (Prefetch) holds: nats.go drops the rest as a slow consumer, and
// the server counts them delivered, to be redelivered only after AckWait.
// The subscriber must notice the gap and hand on nothing after it before
// the dropped messages: a key's messages come in order, every one of them,
// without waiting for AckWait.
//
// The stall is made at that point: the subscriber holds the partition and
// waits on its pull when the reads of its connection stop; the messages
// are published meanwhile, and the reads go on once the server has
// answered the second pull too.
func TestPartitionPullStalledKeepsOrder(t *testing.T) {
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), NoSync: true})
	testenv.Must(t, err, "start")
	t.Cleanup(srv.Shutdown)
	nc := testenv.Connect(t, srv.ClientURL())
	ctx := context.Background()
	mapping := couriernats.Config{KeySubjects: true}
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{}), "stream")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
	testenv.Must(t, err, "publisher")

	stalls := newStallDialer()
	dropped := make(chan struct{}, 1)
	snc, err := couriernats.Connect(srv.ClientURL(), natsgo.SetCustomDialer(stalls),
		natsgo.ErrorHandler(func(_ *natsgo.Conn, _ *natsgo.Subscription, err error) {
			if errors.Is(err, natsgo.ErrSlowConsumer) {
				select {
				case dropped <- struct{}{}:
				default:
				}
			}
		}))
	testenv.Must(t, err, "connect the subscriber")
	t.Cleanup(snc.Close)
	t.Cleanup(stalls.thaw)
	const prefetch, total = 10, 40
	sub, err := couriernats.NewSubscriber(ctx, snc, couriernats.SubscriberConfig{Config: mapping, Consumer: "billing",
		Topics: []string{"orders"}, Partitions: 1, Prefetch: prefetch, MemberHeartbeat: 100 * time.Millisecond, MemberTimeout: 1250 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	testenv.Must(t, err, "subscriber")
	t.Cleanup(func() { _ = sub.Close() })
	testenv.Eventually(t, 10*time.Second, func() bool { return len(sub.Partitions()) == 1 }, "the subscriber took no partition: %v", sub.Partitions)
	consumer := fmt.Sprintf("p0-%s", sub.Member())
	partitionStream := couriernats.PartitionStream(couriernats.DefaultStream, "billing")
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	delivered := func() uint64 {
		c, err := js.Consumer(ctx, partitionStream, consumer)
		if err != nil {
			return 0
		}
		return c.CachedInfo().Delivered.Consumer
	}
	// The partition's pull is open (its consumer has one waiting).
	testenv.Eventually(t, 10*time.Second, func() bool {
		c, err := js.Consumer(ctx, partitionStream, consumer)
		return err == nil && c.CachedInfo().NumWaiting > 0
	}, "the partition's consumer %s has no pull waiting", consumer)

	stalls.stall()
	var msgs []courier.Message
	for i := 1; i <= total; i++ {
		msgs = append(msgs, courier.NewMessage("orders", "k", "T", []byte(strconv.Itoa(i))))
	}
	for i, err := range pub.Publish(ctx, msgs) {
		testenv.Must(t, err, fmt.Sprintf("publish %d", i+1))
	}
	// The first pull is answered into the stalled socket; two pull
	// heartbeats later the client pulls again, and that is answered too.
	testenv.Eventually(t, 30*time.Second, func() bool { return delivered() >= 2*prefetch },
		"the server delivered %d; want a second pull's worth, %d (the client did not pull again after missing the pull's heartbeats)",
		testenv.Lazy(func() any { return delivered() }), 2*prefetch)
	stalls.thaw()
	select {
	case <-dropped:
	case <-time.After(30 * time.Second):
		t.Fatal("the client dropped no delivery after the stall: the test did not reproduce what it is for")
	}

	seen := map[string]bool{}
	var order []string
	next := 1
	for next <= total {
		nctx, cancel := context.WithTimeout(ctx, 10*time.Second) // far below AckWait (30s)
		d, err := sub.Next(nctx)
		cancel()
		if err != nil {
			t.Fatalf("after %v: message %d did not come (it would only after AckWait, 30s): %v", order, next, err)
		}
		m, err := sub.Decode(d.Raw())
		testenv.Must(t, err, "decode")
		got := string(m.Payload)
		order = append(order, got)
		testenv.Must(t, d.Ack(ctx), "ack")
		if seen[got] {
			continue // came again after the gap: the inbox skips it
		}
		seen[got] = true
		if got != strconv.Itoa(next) {
			t.Fatalf("received %v: message %s came before %d", order, got, next)
		}
		next++
	}
}
