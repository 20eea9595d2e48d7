package brokertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// wait bounds every wait for a delivery that should come.
const wait = 20 * time.Second

// quiet is how long the suite listens for a delivery that should not come,
// on top of the broker's RedeliversAfter.
const quiet = 1500 * time.Millisecond

// newInstance builds the test's destination and checks it is complete.
func newInstance(t *testing.T, h Harness) Instance {
	t.Helper()
	in := h.New(t)
	if in.Topic == "" || in.Publisher == nil {
		t.Fatal("brokertest: Harness.New returned an Instance without Topic or Publisher")
	}
	return in
}

// message returns a new message on in's topic.
func message(in Instance, key string, payload []byte, opts ...courier.Option) courier.Message {
	return courier.NewMessage(in.Topic, key, "brokertest.Event", payload, opts...)
}

// publish publishes msgs and fails t unless the broker acknowledged each.
func publish(t testing.TB, pub broker.Publisher, msgs ...courier.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	errs := pub.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("Publish of %d messages returned %d errors, want one per message", len(msgs), len(errs))
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("publish message %d of %d (key %s): %v", i+1, len(msgs), msgs[i].Key, err)
		}
	}
}

// sub is a subscriber the suite closes once, at the latest when the test
// ends.
type sub struct {
	broker.Subscriber
	once sync.Once
}

func (s *sub) close(t testing.TB) {
	t.Helper()
	s.once.Do(func() {
		if err := s.Subscriber.Close(); err != nil {
			t.Errorf("close subscriber: %v", err)
		}
	})
}

// subscribe returns a new subscriber of in, skipping t when the broker has
// none.
func subscribe(t testing.TB, in Instance) *sub {
	t.Helper()
	if in.Subscribe == nil {
		t.Skip("brokertest: the harness gives no Subscriber")
	}
	s := &sub{Subscriber: in.Subscribe(t)}
	t.Cleanup(func() { s.close(t) })
	return s
}

// next waits up to timeout for a delivery; nil when none came.
func next(t testing.TB, s broker.Subscriber, timeout time.Duration) broker.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d, err := s.Next(ctx)
	switch {
	case err == nil:
		return d
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		return nil
	}
	t.Fatalf("Next: %v", err)
	return nil
}

// mustNext waits for a delivery and decodes it, failing t when none comes.
func mustNext(t testing.TB, s broker.Subscriber, what string) (broker.Delivery, courier.Message) {
	t.Helper()
	d := next(t, s, wait)
	if d == nil {
		t.Fatalf("no delivery within %s: %s", wait, what)
	}
	m, err := s.Decode(d.Raw())
	if err != nil {
		t.Fatalf("decode delivery on %q: %v", d.Raw().Subject, err)
	}
	return d, m
}

// ack acknowledges d, failing t on an error.
func ack(t testing.TB, d broker.Delivery) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := d.Ack(ctx); err != nil {
		t.Fatalf("ack: %v", err)
	}
}

// receive acknowledges deliveries until it has seen every message of want
// (by id) and returns what it received in order of delivery, duplicates
// included.
func receive(t testing.TB, s broker.Subscriber, want []courier.Message) []courier.Message {
	t.Helper()
	missing := make(map[[16]byte]bool, len(want))
	for _, m := range want {
		missing[m.ID] = true
	}
	var got []courier.Message
	for len(missing) > 0 {
		d, m := mustNext(t, s, fmt.Sprintf("%d of %d messages still missing", len(missing), len(want)))
		ack(t, d)
		delete(missing, m.ID)
		got = append(got, m)
	}
	return got
}

// stored returns what in's destination holds: through Stored when the
// harness gives it, else through [received].
func stored(t testing.TB, in Instance, want []courier.Message) []courier.Message {
	t.Helper()
	if in.Stored != nil {
		return in.Stored(t)
	}
	return received(t, in, want)
}

// received returns what a subscriber of in receives, acknowledging each
// delivery, until want have all come and then nothing more for a while;
// without a subscriber, what Stored returns.
func received(t testing.TB, in Instance, want []courier.Message) []courier.Message {
	t.Helper()
	if in.Subscribe == nil && in.Stored != nil {
		return in.Stored(t)
	}
	if in.Subscribe == nil {
		t.Skip("brokertest: the harness gives neither Stored nor a Subscriber")
	}
	s := subscribe(t, in)
	got := receive(t, s, want)
	for {
		d := next(t, s, quiet)
		if d == nil {
			return got
		}
		m, err := s.Decode(d.Raw())
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		ack(t, d)
		got = append(got, m)
	}
}

// firstCopies returns msgs without the copies that came again (a message
// id seen before), in order: a broker delivers at least once, and order
// is a promise about first deliveries.
func firstCopies(msgs []courier.Message) []courier.Message {
	seen := make(map[[16]byte]bool, len(msgs))
	var out []courier.Message
	for _, m := range msgs {
		if !seen[m.ID] {
			seen[m.ID] = true
			out = append(out, m)
		}
	}
	return out
}
