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

	"github.com/twmb/franz-go/pkg/kadm"
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
		if !broker.Permanent(err) || !strings.Contains(err.Error(), "max.message.bytes") {
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
			case i == 2 && !broker.Permanent(err):
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

// tally counts the deliveries of a test's consumers.
type tally struct {
	mu       sync.Mutex
	seen     map[[16]byte]int
	received chan struct{} // a value per acknowledged delivery
}

func newTally() *tally {
	return &tally{seen: map[[16]byte]int{}, received: make(chan struct{}, 1<<16)}
}

// consume handles what s delivers until ctx ends: it counts each delivery
// as its handler's transaction would commit, then acknowledges it. A
// delivery in hand when ctx ends is neither counted nor acknowledged, as by
// a member that crashed in its handler. It returns the number of
// deliveries it handled.
func (c *tally) consume(t *testing.T, ctx context.Context, s broker.Subscriber, acked *atomic.Int32) int {
	n := 0
	for {
		d, err := s.Next(ctx)
		if err != nil {
			return n
		}
		m, err := s.Decode(d.Raw())
		if err != nil {
			t.Errorf("decode: %v", err)
			return n
		}
		time.Sleep(time.Millisecond) // a handler's transaction …
		if ctx.Err() != nil {
			return n // … cut short by a crash: not committed, not acknowledged
		}
		c.mu.Lock() // … committed
		c.seen[m.ID]++
		c.mu.Unlock()
		n++
		acked.Add(1)
		c.received <- struct{}{}
		if err := d.Ack(ctx); err != nil {
			if ctx.Err() == nil {
				t.Errorf("ack: %v", err)
			}
			return n
		}
	}
}

// wait waits until every message of written was handled at least once and
// returns how many deliveries were duplicates.
func (c *tally) wait(t *testing.T, written []courier.Message) int {
	t.Helper()
	missing := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		n := 0
		for _, m := range written {
			if c.seen[m.ID] == 0 {
				n++
			}
		}
		return n
	}
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { n := missing(); return n == 0, n }, "messages of %d never handled", len(written))
	c.mu.Lock()
	defer c.mu.Unlock()
	dups := 0
	for _, n := range c.seen {
		dups += n - 1
	}
	return dups
}

// member runs a consumer of the group on s until stopped.
type member struct {
	acked atomic.Int32 // deliveries handled so far
	stop  func() int   // cancels the consumer and returns acked
}

func (c *tally) member(t *testing.T, s broker.Subscriber) *member {
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{}
	done := make(chan struct{})
	go func() { defer close(done); c.consume(t, ctx, s, &m.acked) }()
	m.stop = func() int {
		cancel()
		<-done
		return int(m.acked.Load())
	}
	t.Cleanup(func() { m.stop() })
	return m
}

func publishAll(t *testing.T, pub broker.Publisher, ms []courier.Message) {
	t.Helper()
	for _, err := range pub.Publish(context.Background(), ms) {
		testenv.Must(t, err, "publish")
	}
}

func keyed(total, keys int) []courier.Message { return keyedFrom(0, total, keys) }

// keyedFrom returns the messages from to to (not included) of the sequence
// keyed starts, spread over keys.
func keyedFrom(from, to, keys int) []courier.Message {
	var out []courier.Message
	for i := from; i < to; i++ {
		out = append(out, courier.NewMessage("orders", fmt.Sprintf("key-%d", i%keys), "T", []byte(fmt.Sprint(i))))
	}
	return out
}

// publishUntil publishes (*written)[next:] twenty at a time, 50 ms apart, and
// more of the same sequence when those run out, until done (the group has
// rebalanced: however long that takes on a busy machine, there are
// messages for the members); it returns where it stopped. It fails the
// test after 20,000 messages.
func publishUntil(t *testing.T, pub broker.Publisher, written *[]courier.Message, next int, done func() bool) int {
	t.Helper()
	const keys, most = 24, 20000
	for ; !done(); next += 20 {
		if next >= most {
			t.Fatalf("after %d messages the group has not rebalanced", next)
		}
		if next+20 > len(*written) {
			*written = append(*written, keyedFrom(len(*written), len(*written)+200, keys)...)
		}
		publishAll(t, pub, (*written)[next:next+20])
		time.Sleep(50 * time.Millisecond)
	}
	return next
}

// nothingLeft checks the group's committed offsets once the members are
// closed: a new member receives again at most the records the members held
// unacknowledged when they stopped (each a message acknowledged before, in
// another delivery), and no message that was never acknowledged.
func (c *tally) nothingLeft(t *testing.T, sc kafka.SubscriberConfig, members int) {
	t.Helper()
	last := subscriber(t, sc)
	again := 0
	for {
		wait, stop := context.WithTimeout(context.Background(), 3*time.Second)
		d, err := last.Next(wait)
		stop()
		if err != nil {
			break
		}
		m, err := last.Decode(d.Raw())
		testenv.Must(t, err, "decode")
		testenv.Must(t, d.Ack(context.Background()), "ack")
		c.mu.Lock()
		acked := c.seen[m.ID] > 0
		c.mu.Unlock()
		if !acked {
			t.Fatalf("message %s came to a new member though nobody handled it before", m.Payload)
		}
		again++
	}
	if limit := members * (sc.Prefetch + 1); again > limit {
		t.Fatalf("%d acknowledged messages came again to a new member, more than the %d the members may have held: their acknowledgements were not committed", again, limit)
	}
	t.Logf("a new member received %d records the closed members held", again)
}

// A second member joining mid-stream takes over partitions; nothing is
// lost: every message is received, and once all are acknowledged a new
// member of the group receives none again.
func TestRebalanceLosesNothing(t *testing.T) {
	_, cfg := setup(t, 8, nil)
	pub := publisher(t, kafka.PublisherConfig{Config: cfg})
	sc := kafka.SubscriberConfig{Config: cfg, Group: "billing", Topics: []string{"orders"}, Prefetch: 10}
	written := keyed(1200, 24)
	c := newTally()
	a := subscriber(t, sc)
	ma := c.member(t, a)
	publishAll(t, pub, written[:150])
	for range 75 { // the first member is busy when the second joins
		<-c.received
	}
	b := subscriber(t, sc)
	mb := c.member(t, b)
	// Publish until the second member has partitions and handled some.
	next := publishUntil(t, pub, &written, 150, func() bool { return mb.acked.Load() >= 20 })
	publishAll(t, pub, written[next:])
	dups := c.wait(t, written)
	na, nb := ma.stop(), mb.stop()
	t.Logf("%d messages, %d delivered again after the rebalance; first member handled %d, second %d", len(written), dups, na, nb)
	testenv.Must(t, a.Close(), "close the first member")
	testenv.Must(t, b.Close(), "close the second member")
	c.nothingLeft(t, sc, 2)
}

// A member leaving mid-stream with a delivery in hand (not acknowledged)
// and records fetched but not handed out: its partitions move to the other
// member, which receives all of those.
func TestMemberLeavesMidStream(t *testing.T) {
	_, cfg := setup(t, 8, nil)
	pub := publisher(t, kafka.PublisherConfig{Config: cfg})
	sc := kafka.SubscriberConfig{Config: cfg, Group: "billing", Topics: []string{"orders"}, Prefetch: 10}
	written := keyed(1200, 24)
	c := newTally()
	a, b := subscriber(t, sc), subscriber(t, sc)
	ma, mb := c.member(t, a), c.member(t, b)
	// Publish until both members have partitions and acknowledged some.
	next := publishUntil(t, pub, &written, 0, func() bool { return ma.acked.Load() >= 20 && mb.acked.Load() >= 20 })
	na := ma.stop() // in the middle of a delivery, most likely
	testenv.Must(t, a.Close(), "close the leaving member")
	publishAll(t, pub, written[next:])
	dups := c.wait(t, written)
	nb := mb.stop()
	t.Logf("%d messages, %d delivered again; the leaving member handled %d, the other %d", len(written), dups, na, nb)
	testenv.Must(t, b.Close(), "close the other member")
	c.nothingLeft(t, sc, 1)
}

// Acknowledging a record commits its partition only: a partition the
// member owns but has nothing acknowledged in keeps the group's offset
// (a commit of offset 0 there would bring its whole history again).
func TestAckCommitsOnlyItsPartition(t *testing.T) {
	_, cfg := setup(t, 4, nil)
	pub := publisher(t, kafka.PublisherConfig{Config: cfg})
	sc := kafka.SubscriberConfig{Config: cfg, Group: "g", Topics: []string{"orders"}}
	publishAll(t, pub, keyed(40, 20))
	first := subscriber(t, sc)
	drain(t, first, 40)
	testenv.Must(t, first.Close(), "close")

	later := courier.NewMessage("orders", "key-0", "T", []byte("later"))
	publishAll(t, pub, []courier.Message{later})
	second := subscriber(t, sc)
	if got := drain(t, second, 1); got[0].ID != later.ID {
		t.Fatalf("the second member got %s, want the message published later", got[0].Payload)
	}
	testenv.Must(t, second.Close(), "close")
	third := subscriber(t, sc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if d, err := third.Next(ctx); err == nil {
		t.Fatalf("message %s came again after all were acknowledged", d.Raw().Data)
	}
}

// While the cluster is gone Next waits (its context ends it) and Close
// still returns, without committing.
func TestSubscriberOutlivesCluster(t *testing.T) {
	c, cfg := setup(t, 2, nil)
	pub := publisher(t, kafka.PublisherConfig{Config: cfg})
	publishAll(t, pub, keyed(4, 2))
	s := subscriber(t, kafka.SubscriberConfig{Config: cfg, Group: "g", Topics: []string{"orders"}})
	drain(t, s, 4)
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if d, err := s.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next while the cluster is gone: %v, %v; want it to wait until its context ends", d, err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		testenv.Must(t, err, "close")
	case <-time.After(30 * time.Second):
		t.Fatal("Close hangs while the cluster is gone")
	}
	if _, err := s.Next(context.Background()); !errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("Next after Close: %v; want ErrUnavailable", err)
	}
}

// Pipelined, a key's run goes out in several produce requests. When Kafka
// refuses one of them (a counted failure, not for good), the messages
// Publish reports published are a leading part of the run, Kafka stores
// exactly those, in order, and every later message of the key fails: the
// relay may hand a key's run at once (broker.OrderKeeper).
func TestPipelinedFailureStoresNothingAfter(t *testing.T) {
	c, cfg := setup(t, 1, nil)
	// Small batches: the run needs many produce requests.
	pub := publisher(t, kafka.PublisherConfig{Config: cfg, MaxMessageBytes: 2048})
	if !broker.KeepsKeyOrder(pub) {
		t.Fatal("the Kafka publisher does not declare that it keeps a key's order")
	}
	var requests atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if requests.Add(1) != 2 {
			return nil, nil, false // stored as usual
		}
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.PolicyViolation.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	ms := make([]courier.Message, 2000)
	for i := range ms {
		ms[i] = courier.NewMessage("orders", "k", "T", []byte(fmt.Sprint(i)))
	}
	errs := pub.Publish(context.Background(), ms)
	published := 0
	for published < len(errs) && errs[published] == nil {
		published++
	}
	if published == len(ms) || requests.Load() < 2 {
		t.Fatalf("%d produce requests, %d of %d messages published: want a refused request mid-run", requests.Load(), published, len(ms))
	}
	for i, err := range errs[published:] {
		if err == nil {
			t.Fatalf("message %d published after message %d failed", published+i, published)
		}
	}
	if err := errs[published]; errors.Is(err, broker.ErrUnavailable) || errors.Is(err, broker.ErrRejected) {
		t.Fatalf("the refused message: %v; want a counted failure", err)
	}
	for i, err := range errs[published+1:] {
		if !errors.Is(err, broker.ErrUnavailable) {
			t.Fatalf("message %d, after the refused one: %v; want ErrUnavailable (not its fault)", published+1+i, err)
		}
	}
	c.DropControl()
	if published > 0 {
		s := subscriber(t, kafka.SubscriberConfig{Config: cfg, Group: "g", Topics: []string{"orders"}})
		for i, m := range drain(t, s, published) {
			if m.ID != ms[i].ID {
				t.Fatalf("delivery %d is message %s, want %d", i, m.Payload, i)
			}
		}
	}
	// Nothing beyond: the partition ends where the published part does.
	adm := admin(t, c)
	offsets, err := kadm.NewClient(adm).ListEndOffsets(context.Background(), "orders")
	testenv.Must(t, err, "end offsets")
	if end, _ := offsets.Lookup("orders", 0); end.Offset != int64(published) {
		t.Fatalf("partition holds %d records, want the %d published", end.Offset, published)
	}
	t.Logf("%d produce requests; %d of %d messages published before the refusal", requests.Load(), published, len(ms))
}

// Kafka answers INVALID_RECORD for a whole batch when one record of it is
// invalid; franz-go fails the partition's records with it. Publish produces
// each of them again alone, so only the record Kafka still refuses alone is
// rejected: here none, since the refusal came once.
func TestInvalidRecordBatchSparesTheInnocent(t *testing.T) {
	c, cfg := setup(t, 1, nil)
	pub := publisher(t, kafka.PublisherConfig{Config: cfg})
	n := failProduce(c, kerr.InvalidRecord.Code, 1)
	ms := msgs("a", "b", "a", "c")
	for i, err := range pub.Publish(context.Background(), ms) {
		if err != nil {
			t.Fatalf("message %d: %v; want it published when produced alone", i, err)
		}
	}
	if n.Load() != 1 {
		t.Fatalf("%d produce requests refused, want 1", n.Load())
	}
	s := subscriber(t, kafka.SubscriberConfig{Config: cfg, Group: "g", Topics: []string{"orders"}})
	for i, m := range drain(t, s, len(ms)) {
		if m.ID != ms[i].ID {
			t.Fatalf("delivery %d is message %s, want %d", i, m.Payload, i)
		}
	}
}
