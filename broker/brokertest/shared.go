package brokertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// sharing bounds the waits for partitions to be shared out or to move.
const sharing = 30 * time.Second

// Two instances of a consumer that shares its keys split the partitions
// and each key's messages go to one of them, in order. When one closes, the
// other takes over its partitions and goes on with its keys in order, with
// nothing delivered twice: the instance that closed settled what it had.
func testSharedKeys(t *testing.T, h Harness) {
	in := newInstance(t, h)
	if in.SubscribeShared == nil {
		t.Skip("brokertest: the harness gives no subscriber that shares keys")
	}
	const keys, perRound = 24, 10
	round := func(r int) []courier.Message {
		var msgs []courier.Message
		for i := range perRound {
			for k := range keys {
				msgs = append(msgs, message(in, fmt.Sprintf("key-%d", k), []byte(fmt.Sprint(r*perRound+i))))
			}
		}
		return msgs
	}
	c := &collector{got: map[string][]string{}, at: map[string]map[string]bool{}, ids: map[[16]byte]bool{}}
	t.Cleanup(c.wg.Wait)
	s1 := c.start(t, in, "first")
	waitFor(t, func() bool { return len(s1.Partitions()) > 0 }, func() string { return "the first instance took no partition" })
	s2 := c.start(t, in, "second")
	var all []int
	waitFor(t, func() bool {
		p1, p2 := s1.Partitions(), s2.Partitions()
		all = append(slices.Clone(p1), p2...)
		slices.Sort(all)
		return len(p1) > 0 && len(p2) > 0 && len(slices.Compact(slices.Clone(all))) == len(all)
	}, func() string {
		return fmt.Sprintf("the instances did not split the partitions: %v and %v", s1.Partitions(), s2.Partitions())
	})

	first := round(0)
	publish(t, in.Publisher, first...)
	c.wait(t, first)
	c.mu.Lock()
	used := map[string]bool{}
	for key, at := range c.at {
		if len(at) != 1 {
			t.Errorf("key %s went to %d instances while neither came nor went", key, len(at))
		}
		for name := range at {
			used[name] = true
		}
	}
	c.mu.Unlock()
	if len(used) != 2 {
		t.Errorf("%d keys went to %d instance(s); want them spread over both", keys, len(used))
	}

	c.stop(t, s1)
	waitFor(t, func() bool { return slices.Equal(s2.Partitions(), all) }, func() string {
		return fmt.Sprintf("the second instance holds %v, not all of %v, after the first closed", s2.Partitions(), all)
	})
	second := round(1)
	publish(t, in.Publisher, second...)
	c.wait(t, append(first, second...))

	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range keys {
		key := fmt.Sprintf("key-%d", k)
		var want []string
		for i := range 2 * perRound {
			want = append(want, fmt.Sprint(i))
		}
		if !slices.Equal(c.got[key], want) {
			t.Errorf("key %s: received %v; want %v, each once, in order", key, c.got[key], want)
		}
	}
}

// waitFor waits until cond holds, failing t with what says after sharing.
func waitFor(t *testing.T, cond func() bool, what func() string) {
	t.Helper()
	for deadline := time.Now().Add(sharing); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(what())
		}
	}
}

// collector receives from the instances of a consumer that shares keys,
// acknowledging each delivery.
type collector struct {
	mu  sync.Mutex
	got map[string][]string        // key -> payloads, in order received
	at  map[string]map[string]bool // key -> instances that received it
	ids map[[16]byte]bool          // messages received
	wg  sync.WaitGroup
}

// sharer is an instance of a consumer that shares keys.
type sharer struct {
	*sub
	broker.KeySharer
	stop context.CancelFunc
}

// start starts an instance named name and receives from it.
func (c *collector) start(t *testing.T, in Instance, name string) *sharer {
	t.Helper()
	s := &sub{Subscriber: in.SubscribeShared(t)}
	ks, ok := s.Subscriber.(broker.KeySharer)
	if !ok || !ks.SharesKeys() {
		t.Fatalf("brokertest: Instance.SubscribeShared returned a %T, which shares no keys (broker.KeySharer)", s.Subscriber)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sh := &sharer{sub: s, KeySharer: ks, stop: cancel}
	t.Cleanup(func() { c.stop(t, sh) })
	c.wg.Go(func() {
		for {
			d, err := s.Next(ctx)
			if ctx.Err() != nil || errors.Is(err, broker.ErrUnavailable) {
				return
			}
			if err != nil {
				t.Errorf("%s instance: Next: %v", name, err)
				return
			}
			m, err := s.Decode(d.Raw())
			if err != nil {
				t.Errorf("%s instance: decode: %v", name, err)
				return
			}
			c.mu.Lock()
			c.got[m.Key] = append(c.got[m.Key], string(m.Payload))
			if c.at[m.Key] == nil {
				c.at[m.Key] = map[string]bool{}
			}
			c.at[m.Key][name] = true
			c.ids[m.ID] = true
			c.mu.Unlock()
			if err := d.Ack(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("%s instance: ack: %v", name, err)
			}
		}
	})
	return sh
}

// stop stops receiving from s and closes it.
func (c *collector) stop(t testing.TB, s *sharer) {
	s.close(t)
	s.stop()
}

// wait waits until every message of want was received.
func (c *collector) wait(t *testing.T, want []courier.Message) {
	t.Helper()
	waitFor(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, m := range want {
			if !c.ids[m.ID] {
				return false
			}
		}
		return true
	}, func() string { return "not every message came" })
}
