package kafka_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/kafka"
	"github.com/courier-go/courier/internal/testenv"
)

// failProduce makes c answer the next produce requests with code for every
// partition, times of them (for ever when times < 0). It returns the count
// of requests answered so.
func failProduce(c *kfake.Cluster, code int16, times int) *atomic.Int32 {
	var n atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		// Kept until dropped: kfake remembers KeepControl.
		c.KeepControl()
		if got := n.Add(1); times >= 0 && int(got) >= times {
			c.DropControl()
		}
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return &n
}

// setup starts a cluster with topic "orders" (partitions of it) and returns
// the cluster and its Config.
func setup(t *testing.T, partitions int, configs map[string]string) (*kfake.Cluster, kafka.Config) {
	t.Helper()
	c := cluster(t)
	cfg := kafka.Config{Brokers: c.ListenAddrs()}
	testenv.Must(t, kafka.EnsureTopic(context.Background(), admin(t, c), cfg, "orders", kafka.TopicConfig{Partitions: partitions, Configs: configs}), "create topic")
	return c, cfg
}

func msgs(keys ...string) []courier.Message {
	out := make([]courier.Message, len(keys))
	for i, k := range keys {
		out[i] = courier.NewMessage("orders", k, "T", []byte(fmt.Sprint(i)))
	}
	return out
}

// drain receives and acknowledges until want distinct messages came, and
// returns them in order of delivery.
func drain(t *testing.T, s broker.Subscriber, want int) []courier.Message {
	t.Helper()
	seen := map[[16]byte]bool{}
	var got []courier.Message
	for len(seen) < want {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		d, err := s.Next(ctx)
		cancel()
		testenv.Must(t, err, fmt.Sprintf("next (%d of %d received)", len(seen), want))
		m, err := s.Decode(d.Raw())
		testenv.Must(t, err, "decode")
		testenv.Must(t, d.Ack(context.Background()), "ack")
		seen[m.ID] = true
		got = append(got, m)
	}
	return got
}

// Kafka's retriable answers are retried inside the client: a few
// NOT_LEADER_FOR_PARTITION answers cost the messages nothing; answers that
// never end fail them as an outage, within AckTimeout.
func TestNotLeader(t *testing.T) {
	ctx := context.Background()
	t.Run("retried", func(t *testing.T) {
		c, cfg := setup(t, 2, nil)
		// Real brokers name the new leader in the answer; the injected
		// one does not, so the client asks the metadata again, at most
		// every MetadataMinAge.
		pub := publisher(t, kafka.PublisherConfig{Config: cfg, Options: []kgo.Opt{kgo.MetadataMinAge(50 * time.Millisecond)}})
		n := failProduce(c, kerr.NotLeaderForPartition.Code, 3)
		ms := msgs("a", "b", "a")
		for i, err := range pub.Publish(ctx, ms) {
			if err != nil {
				t.Fatalf("message %d: %v; want it retried inside the client", i, err)
			}
		}
		if n.Load() < 3 {
			t.Fatalf("%d produce requests refused, want 3", n.Load())
		}
		s := subscriber(t, kafka.SubscriberConfig{Config: cfg, Group: "g", Topics: []string{"orders"}})
		if got := drain(t, s, 3); len(got) != 3 {
			t.Fatalf("received %d deliveries for 3 messages: retries made duplicates", len(got))
		}
	})
	t.Run("for ever", func(t *testing.T) {
		c, cfg := setup(t, 2, nil)
		pub := publisher(t, kafka.PublisherConfig{Config: cfg, AckTimeout: 2 * time.Second})
		failProduce(c, kerr.NotLeaderForPartition.Code, -1)
		start := time.Now()
		for i, err := range pub.Publish(ctx, msgs("a", "b")) {
			if !errors.Is(err, broker.ErrUnavailable) || errors.Is(err, broker.ErrRejected) {
				t.Errorf("message %d: %v; want ErrUnavailable", i, err)
			}
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("Publish took %s with AckTimeout 2s", took)
		}
	})
}

// MESSAGE_TOO_LARGE is for good: the message becomes a dead letter at once.
// A batch Kafka refuses as too large fails every record in it; Publish
// sends each of them again alone, so only the message too large by itself
// is rejected and the others keep their order.
func TestMessageTooLarge(t *testing.T) {
	ctx := context.Background()
	t.Run("injected", func(t *testing.T) {
		c, cfg := setup(t, 2, nil)
		pub := publisher(t, kafka.PublisherConfig{Config: cfg})
		failProduce(c, kerr.MessageTooLarge.Code, -1)
		err := pub.Publish(ctx, msgs("a"))[0]
		if !errors.Is(err, broker.ErrRejected) || errors.Is(err, broker.ErrUnavailable) || !strings.Contains(err.Error(), "max.message.bytes") {
			t.Fatalf("publish refused as too large: %v; want ErrRejected naming max.message.bytes", err)
		}
	})
	t.Run("topic limit", func(t *testing.T) {
		_, cfg := setup(t, 1, map[string]string{"max.message.bytes": "4096"})
		pub := publisher(t, kafka.PublisherConfig{Config: cfg})
		ms := msgs("k", "k", "k", "k")
		ms[2].Payload = make([]byte, 8192)
		_, _ = rand.Read(ms[2].Payload) // incompressible: Kafka checks the compressed batch
		errs := pub.Publish(ctx, ms)
		for i, err := range errs {
			switch {
			case i == 2 && (!errors.Is(err, broker.ErrRejected) || errors.Is(err, broker.ErrUnavailable)):
				t.Errorf("the 8 KiB message on a topic of 4 KiB messages: %v; want ErrRejected", err)
			case i != 2 && err != nil:
				t.Errorf("message %d (it fits): %v; want it published", i, err)
			}
		}
		s := subscriber(t, kafka.SubscriberConfig{Config: cfg, Group: "g", Topics: []string{"orders"}})
		got := drain(t, s, 3)
		for i, want := range []int{0, 1, 3} {
			if got[i].ID != ms[want].ID {
				t.Fatalf("delivery %d is message %s, want message %d: the key's order broke", i, got[i].Payload, want)
			}
		}
	})
}

// A topic that does not exist counts against the message (an operator may
// create it): ErrNoTopic naming the topic, neither unavailable nor
// rejected.
func TestUnknownTopic(t *testing.T) {
	_, cfg := setup(t, 1, nil)
	pub := publisher(t, kafka.PublisherConfig{Config: cfg, AckTimeout: 20 * time.Second})
	ms := []courier.Message{courier.NewMessage("nowhere", "k", "T", nil), courier.NewMessage("orders", "k", "T", nil)}
	errs := pub.Publish(context.Background(), ms)
	if err := errs[0]; !errors.Is(err, kafka.ErrNoTopic) || errors.Is(err, broker.ErrUnavailable) || errors.Is(err, broker.ErrRejected) || !strings.Contains(err.Error(), `"nowhere"`) {
		t.Fatalf("message to a topic that does not exist: %v; want ErrNoTopic naming it, counted", err)
	}
	if errs[1] != nil {
		t.Fatalf("message to an existing topic: %v", errs[1])
	}
}

// A cluster nobody ever reached is an outage, reported within AckTimeout.
func TestNeverReachable(t *testing.T) {
	pub := publisher(t, kafka.PublisherConfig{Config: kafka.Config{Brokers: []string{"127.0.0.1:1"}}, AckTimeout: time.Second})
	for i, err := range pub.Publish(context.Background(), msgs("a", "b")) {
		if !errors.Is(err, broker.ErrUnavailable) || errors.Is(err, broker.ErrRejected) {
			t.Errorf("message %d: %v; want ErrUnavailable", i, err)
		}
	}
}

// Kafka keeps one committed offset per partition: acknowledging a record
// whose predecessors are not acknowledged commits nothing, so after a
// restart all of them come again.
func TestCommitsInOrder(t *testing.T) {
	_, cfg := setup(t, 1, nil)
	pub := publisher(t, kafka.PublisherConfig{Config: cfg})
	ms := msgs("k", "k", "k")
	for _, err := range pub.Publish(context.Background(), ms) {
		testenv.Must(t, err, "publish")
	}
	sc := kafka.SubscriberConfig{Config: cfg, Group: "g", Topics: []string{"orders"}}
	first := subscriber(t, sc)
	var ds []broker.Delivery
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		d, err := first.Next(ctx)
		cancel()
		testenv.Must(t, err, "next")
		ds = append(ds, d)
	}
	testenv.Must(t, ds[2].Ack(context.Background()), "ack the third")
	testenv.Must(t, ds[1].Ack(context.Background()), "ack the second")
	testenv.Must(t, first.Close(), "close")

	second := subscriber(t, sc)
	got := drain(t, second, 3) // the first was never acknowledged: all three come again
	for i := range got {
		if got[i].ID != ms[i].ID {
			t.Fatalf("after the restart, delivery %d is message %s", i, got[i].Payload)
		}
	}
	testenv.Must(t, second.Close(), "close")
	third := subscriber(t, sc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if d, err := third.Next(ctx); err == nil {
		t.Fatalf("record at offset %s came again after all were acknowledged in order", d.Raw().Data)
	}
}

// A second member joining mid-stream takes over partitions; nothing is
// lost: every message is received, and once all are acknowledged a new
// member of the group receives none again.
func TestRebalanceLosesNothing(t *testing.T) {
	_, cfg := setup(t, 8, nil)
	pub := publisher(t, kafka.PublisherConfig{Config: cfg})
	sc := kafka.SubscriberConfig{Config: cfg, Group: "billing", Topics: []string{"orders"}, Prefetch: 10}
	const total, keys = 600, 24
	var written []courier.Message
	for i := range total {
		written = append(written, courier.NewMessage("orders", fmt.Sprintf("key-%d", i%keys), "T", []byte(fmt.Sprint(i))))
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	seen := map[[16]byte]int{}
	received := make(chan struct{}, total*2)
	var byMember [2]atomic.Int32
	consume := func(member int, s broker.Subscriber) {
		for {
			d, err := s.Next(ctx)
			if err != nil {
				return
			}
			m, err := s.Decode(d.Raw())
			if err != nil {
				t.Errorf("decode: %v", err)
				return
			}
			time.Sleep(time.Millisecond) // a handler's transaction
			if err := d.Ack(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("ack: %v", err)
			}
			mu.Lock()
			seen[m.ID]++
			mu.Unlock()
			byMember[member].Add(1)
			received <- struct{}{}
		}
	}
	var wg sync.WaitGroup
	a := subscriber(t, sc)
	wg.Go(func() { consume(0, a) })
	for start := 0; start < total; start += 50 {
		for _, err := range pub.Publish(ctx, written[start:start+50]) {
			testenv.Must(t, err, "publish")
		}
		if start == total/4 {
			for range total / 8 { // the first member is busy when the second joins
				<-received
			}
			b := subscriber(t, sc)
			wg.Go(func() { consume(1, b) })
		}
	}
	testenv.Eventually(t, 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == total
	}, "received %v of %d messages", testenv.Lazy(func() any { mu.Lock(); defer mu.Unlock(); return len(seen) }), total)
	cancel()
	wg.Wait()
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	t.Logf("%d messages, %d delivered again after the rebalance; first member %d deliveries, second %d", total, dups, byMember[0].Load(), byMember[1].Load())
	if byMember[1].Load() == 0 {
		t.Fatal("the second member received nothing: no partition moved")
	}
	testenv.Must(t, a.Close(), "close the first member")

	// Everything was acknowledged: the group's committed offsets cover it.
	last := subscriber(t, sc)
	wait, stop := context.WithTimeout(context.Background(), 3*time.Second)
	defer stop()
	if d, err := last.Next(wait); err == nil {
		t.Fatalf("message %s came again to a new member after every message was acknowledged", d.Raw().Data)
	}
}
