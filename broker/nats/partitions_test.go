package nats_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
)

func TestKeySubjects(t *testing.T) {
	cfg := couriernats.Config{KeySubjects: true}
	m := courier.NewMessage("orders", "eu.o 42%", "T", []byte("x"))
	nm := cfg.ToNATS(&m)
	if nm.Subject != "courier.orders.eu%2Eo%2042%25" {
		t.Fatalf("subject %q", nm.Subject)
	}
	back, err := cfg.FromNATS(nm)
	testenv.Must(t, err, "decode")
	if back.Topic != "orders" || back.Key != m.Key {
		t.Fatalf("topic %q key %q, want orders and %q", back.Topic, back.Key, m.Key)
	}
	if f := cfg.Filter("orders"); f != "courier.orders.*" {
		t.Fatalf("filter %q", f)
	}
	for key, want := range map[string]string{"o-42": "o-42", "a:b=c@d+e_f~g": "a:b=c@d+e_f~g", "": "%", "*": "%2A", ">": "%3E", "é": "%C3%A9"} {
		if got := couriernats.KeyToken(key); got != want {
			t.Errorf("KeyToken(%q) = %q, want %q", key, got, want)
		}
	}
}

func FuzzKeyToken(f *testing.F) {
	for _, k := range []string{"o-42", "a.b", "%", "", "a b\t*>"} {
		f.Add(k)
	}
	seen := map[string]string{}
	f.Fuzz(func(t *testing.T, key string) {
		tok := couriernats.KeyToken(key)
		if tok == "" || strings.ContainsAny(tok, ". \t\r\n*>") {
			t.Fatalf("KeyToken(%q) = %q: not one subject token", key, tok)
		}
		for _, r := range tok {
			if r < 0x21 || r > 0x7e {
				t.Fatalf("KeyToken(%q) = %q: holds %q", key, tok, r)
			}
		}
		if other, ok := seen[tok]; ok && other != key {
			t.Fatalf("KeyToken(%q) = KeyToken(%q) = %q", key, other, tok)
		}
		seen[tok] = key
	})
}

func TestPartitionsNeedKeySubjectsAndTopics(t *testing.T) {
	nc, _ := startNATS(t)
	ctx := context.Background()
	for _, tc := range []struct {
		cfg  couriernats.SubscriberConfig
		want string
	}{
		{couriernats.SubscriberConfig{Consumer: "c", Topics: []string{"t"}, Partitions: 4}, "needs Config.KeySubjects"},
		{couriernats.SubscriberConfig{Config: couriernats.Config{KeySubjects: true}, Consumer: "c", Partitions: 4}, "needs Topics"},
		{couriernats.SubscriberConfig{Config: couriernats.Config{KeySubjects: true}, Consumer: "c", Topics: []string{"t.>"}, Partitions: 4}, "may hold * wildcards but not >"},
		{couriernats.SubscriberConfig{Config: couriernats.Config{KeySubjects: true}, Consumer: "c", Topics: []string{"t"}, Partitions: -1}, "Partitions is -1"},
		{couriernats.SubscriberConfig{Config: couriernats.Config{KeySubjects: true}, Consumer: "c", Topics: []string{"t"}, Partitions: 4,
			MemberHeartbeat: time.Second, MemberTimeout: time.Second}, "MemberTimeout is 1s"},
	} {
		if _, err := couriernats.NewSubscriber(ctx, nc, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}

// On a nats-server older than 2.10 (Debian's 2.9), Partitions is refused
// with the server's version and what to do.
func TestPartitionsRefusedOnOldServer(t *testing.T) {
	url := testenv.NATS(t)
	nc, err := couriernats.Connect(url)
	testenv.Must(t, err, "connect")
	defer nc.Close()
	v := nc.ConnectedServerVersion()
	if !strings.HasPrefix(v, "2.9.") && !strings.HasPrefix(v, "2.8.") {
		t.Skipf("the server at %s is %s: nothing to refuse", url, v)
	}
	_, err = couriernats.NewSubscriber(context.Background(), nc, couriernats.SubscriberConfig{
		Config: couriernats.Config{KeySubjects: true}, Stream: "none", Consumer: "c", Topics: []string{"t"}, Partitions: 4})
	if err == nil || !strings.Contains(err.Error(), "needs nats-server 2.10 or later") || !strings.Contains(err.Error(), v) {
		t.Fatalf("Partitions on nats-server %s: %v", v, err)
	}
}

// received is what the instances of a consumer took, per key, in order.
type received struct {
	mu    sync.Mutex
	byKey map[string][]string // key -> payloads
	who   map[string]string   // key -> instance that received it last
	moved int                 // keys whose messages came to two instances
}

// take receives from sub as instance until ctx ends, acknowledging each
// delivery.
func (r *received) take(ctx context.Context, t *testing.T, instance string, sub broker.Subscriber) {
	for {
		d, err := sub.Next(ctx)
		if ctx.Err() != nil || errors.Is(err, broker.ErrUnavailable) {
			return // stopped, or closed
		}
		if err != nil {
			t.Errorf("%s: next: %v", instance, err)
			return
		}
		m, err := sub.Decode(d.Raw())
		if err != nil {
			t.Errorf("%s: decode: %v", instance, err)
			return
		}
		r.mu.Lock()
		if w, ok := r.who[m.Key]; ok && w != instance {
			r.moved++
		}
		r.who[m.Key] = instance
		r.byKey[m.Key] = append(r.byKey[m.Key], string(m.Payload))
		r.mu.Unlock()
		_ = d.Ack(ctx)
	}
}

// count returns how many distinct messages were received.
func (r *received) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ps := range r.byKey {
		seen := map[string]bool{}
		for _, p := range ps {
			seen[p] = true
		}
		n += len(seen)
	}
	return n
}

// rewalks checks that got is want, a key's messages in the order
// published, possibly with runs of it coming again (a handover gives an
// instance the messages its predecessor had not acknowledged), and returns
// how many came again; -1 when a message came before one published earlier
// had, or one never came.
func rewalks(got, want []string) (again int) {
	pos := make(map[string]int, len(want))
	for i, w := range want {
		pos[w] = i
	}
	next := 0 // the first of want not received yet
	for _, g := range got {
		i, ok := pos[g]
		switch {
		case !ok || i > next:
			return -1
		case i == next:
			next++
		default:
			again++
		}
	}
	if next != len(want) {
		return -1
	}
	return again
}

// Two instances of a consumer share its keys: each key's messages go to one
// of them, in order; when one leaves, the other takes its keys, with what
// it had not acknowledged.
func TestPartitionsShareKeys(t *testing.T) {
	nc, js := startNATS(t)
	ctx := context.Background()
	mapping := couriernats.Config{KeySubjects: true}
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{}), "stream")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
	testenv.Must(t, err, "publisher")
	publish := func(from, to int) {
		var msgs []courier.Message
		for i := from; i < to; i++ {
			msgs = append(msgs, courier.NewMessage("orders", fmt.Sprintf("k%d", i%20), "T", []byte(fmt.Sprint(i))))
		}
		for i, err := range pub.Publish(ctx, msgs) {
			testenv.Must(t, err, fmt.Sprintf("publish %d", from+i))
		}
	}
	cfg := couriernats.SubscriberConfig{Config: mapping, Consumer: "billing", Topics: []string{"orders"}, Partitions: 8,
		MemberHeartbeat: 200 * time.Millisecond, MemberTimeout: 2 * time.Second, AckWait: 5 * time.Second}
	r := &received{byKey: map[string][]string{}, who: map[string]string{}}
	var wg sync.WaitGroup
	defer wg.Wait()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	subs := make([]*couriernats.Subscriber, 2)
	for i := range subs {
		subs[i], err = couriernats.NewSubscriber(ctx, nc, cfg)
		testenv.Must(t, err, "subscriber")
		sub := subs[i]
		wg.Go(func() { r.take(runCtx, t, fmt.Sprint("instance", i), sub) })
	}
	defer func() {
		for _, s := range subs {
			_ = s.Close()
		}
	}()
	testenv.Eventually(t, 10*time.Second, func() bool {
		return len(subs[0].Partitions())+len(subs[1].Partitions()) == 8 && len(subs[0].Partitions()) == 4
	}, "the partitions were not shared 4 and 4: %v and %v", subs[0].Partitions, subs[1].Partitions)

	publish(0, 400)
	testenv.Eventually(t, 10*time.Second, func() bool { return r.count() >= 400 }, "received %d of 400", r.count)
	if r.moved != 0 {
		t.Fatalf("%d keys went to both instances while neither came or went", r.moved)
	}

	// One leaves: the other takes every partition.
	testenv.Must(t, subs[0].Close(), "close")
	testenv.Eventually(t, 10*time.Second, func() bool { return len(subs[1].Partitions()) == 8 }, "the partitions left did not move: %v", subs[1].Partitions)
	publish(400, 800)
	testenv.Eventually(t, 10*time.Second, func() bool { return r.count() >= 800 }, "received %d of 800", r.count)

	r.mu.Lock()
	defer r.mu.Unlock()
	for key, got := range r.byKey {
		var want []string
		for i := 0; i < 800; i++ {
			if fmt.Sprintf("k%d", i%20) == key {
				want = append(want, fmt.Sprint(i))
			}
		}
		switch again := rewalks(got, want); {
		case again < 0:
			t.Errorf("key %s: received out of order or not all: %v", key, got)
		case again > 0:
			t.Errorf("key %s: %d of its messages came again after a graceful handover: %v", key, again, got)
		}
	}
	// The partition stream is Courier's, described as such.
	s, err := js.Stream(ctx, couriernats.PartitionStream(couriernats.DefaultStream, "billing"))
	testenv.Must(t, err, "partition stream")
	if d := s.CachedInfo().Config.Description; !strings.Contains(d, "8 partitions") {
		t.Fatalf("partition stream's description %q", d)
	}
}

// A partition stream of the consumer's name that Courier did not make, or
// made for other partitions, is refused and left as it is.
func TestPartitionStreamRefused(t *testing.T) {
	nc, js := startNATS(t)
	ctx := context.Background()
	mapping := couriernats.Config{KeySubjects: true}
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{}), "stream")
	cfg := couriernats.SubscriberConfig{Config: mapping, Consumer: "billing", Topics: []string{"orders"}, Partitions: 8}
	sub, err := couriernats.NewSubscriber(ctx, nc, cfg)
	testenv.Must(t, err, "subscriber")
	testenv.Must(t, sub.Close(), "close")
	cfg.Partitions = 16
	if _, err := couriernats.NewSubscriber(ctx, nc, cfg); err == nil || !strings.Contains(err.Error(), "must agree") {
		t.Fatalf("16 partitions on a stream made for 8: %v", err)
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: couriernats.PartitionStream(couriernats.DefaultStream, "other"), Subjects: []string{"mine.>"}})
	testenv.Must(t, err, "someone's stream")
	cfg.Consumer = "other"
	if _, err := couriernats.NewSubscriber(ctx, nc, cfg); err == nil || !strings.Contains(err.Error(), "Courier did not make it") {
		t.Fatalf("a stream Courier did not make: %v", err)
	}
	if _, err := js.Stream(ctx, couriernats.PartitionStream(couriernats.DefaultStream, "other")); err != nil {
		t.Fatalf("the stream Courier did not make is gone: %v", err)
	}
}

// Close gives the partitions up at once, deliveries left unsettled
// included (the consumer that took them has stopped): it does not wait
// MemberTimeout for them, and the next instance gets them.
func TestPartitionsCloseGivesBackUnsettled(t *testing.T) {
	nc, _ := startNATS(t)
	ctx := context.Background()
	mapping := couriernats.Config{KeySubjects: true}
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{}), "stream")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
	testenv.Must(t, err, "publisher")
	m := courier.NewMessage("orders", "k", "T", []byte("x"))
	testenv.Must(t, pub.Publish(ctx, []courier.Message{m})[0], "publish")
	cfg := couriernats.SubscriberConfig{Config: mapping, Consumer: "billing", Topics: []string{"orders"}, Partitions: 2,
		MemberHeartbeat: 100 * time.Millisecond, MemberTimeout: time.Minute}
	first, err := couriernats.NewSubscriber(ctx, nc, cfg)
	testenv.Must(t, err, "subscriber")
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := first.Next(nctx); err != nil { // and never settled
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { _ = first.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(4 * time.Second): // a wait for it would last 5s (Close's bound) or more
		t.Fatal("Close waited for a delivery nobody will settle (MemberTimeout is a minute)")
	}
	second, err := couriernats.NewSubscriber(ctx, nc, cfg)
	testenv.Must(t, err, "subscriber")
	defer second.Close()
	d, err := second.Next(nctx)
	testenv.Must(t, err, "the message given back")
	if got, _ := second.Decode(d.Raw()); got.ID != m.ID {
		t.Fatalf("got %s, want the message the first instance left unsettled", got.ID)
	}
}
