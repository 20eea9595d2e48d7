package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
)

// courier relay --key-subjects feeds consumers that share the keys among
// their instances (nats.SubscriberConfig.Partitions), which listen on
// courier.orders.*: three instances receive every message the relay
// process publishes, each key's in the order written, each key at one
// instance.
func TestRelayKeySubjectsFeedsPartitionedConsumers(t *testing.T) {
	srv := testenv.EmbeddedNATS(t) // nats-server 2.10 or later: partitions
	nc := testenv.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mapping := couriernats.Config{KeySubjects: true}
	// The stream the relay would create, made first so that the consumers
	// listen while the relay publishes.
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{}), "stream")
	const instances = 3
	var (
		mu  sync.Mutex
		got []courier.Message
		at  = map[string]map[int]bool{} // key -> instances that received it
		wg  sync.WaitGroup
	)
	for i := range instances {
		sub, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{Config: mapping, Consumer: "billing",
			Topics: []string{"orders"}, Partitions: 8, MemberHeartbeat: 100 * time.Millisecond, MemberTimeout: time.Second})
		testenv.Must(t, err, "subscriber")
		t.Cleanup(func() { _ = sub.Close() })
		wg.Go(func() {
			for {
				d, err := sub.Next(ctx)
				if err != nil {
					return
				}
				m, err := sub.Decode(d.Raw())
				if err != nil {
					t.Errorf("instance %d: decode: %v", i, err)
					return
				}
				mu.Lock()
				got = append(got, m)
				if at[m.Key] == nil {
					at[m.Key] = map[int]bool{}
				}
				at[m.Key][i] = true
				mu.Unlock()
				_ = d.Ack(ctx)
			}
		})
	}
	t.Cleanup(wg.Wait)
	t.Cleanup(cancel)
	url, written := writeOutboxKeys(t, 400, 40)
	logs := runRelay(t, url, srv.ClientURL(), nil, "--key-subjects")
	if !strings.Contains(logs, `"key_subjects":true`) {
		t.Errorf("the relay's logs do not say it puts the keys in the subjects:\n%s", logs)
	}
	received := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	testenv.WhileProgressing(t, 10*time.Second, func() (bool, any) { n := received(); return n >= len(written), n },
		"the consumers received %d of %d messages", testenv.Lazy(func() any { return received() }), len(written))
	mu.Lock()
	defer mu.Unlock()
	testenv.CheckDelivery(t, written, got)
	used := map[int]bool{}
	for key, is := range at {
		if len(is) != 1 {
			t.Errorf("key %s went to instances %v while none came or went", key, is)
		}
		for i := range is {
			used[i] = true
		}
	}
	if len(used) < 2 {
		t.Errorf("40 keys went to instances %v; want them shared", fmt.Sprint(used))
	}
}
