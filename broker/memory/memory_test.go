package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/brokertest"
	"github.com/courier-go/courier/broker/memory"
)

// KeepOrder: within a call, a key that failed other than for good stores
// none of its later messages; a rejected message does not hold its key.
func TestKeepOrder(t *testing.T) {
	ctx := context.Background()
	p := memory.NewPublisher()
	a1, a2, a3 := courier.NewMessage("t", "a", "T", nil), courier.NewMessage("t", "a", "T", nil), courier.NewMessage("t", "a", "T", nil)
	b1, b2, b3 := courier.NewMessage("t", "b", "T", nil), courier.NewMessage("t", "b", "T", nil), courier.NewMessage("t", "b", "T", nil)
	other := courier.NewMessage("u", "a", "T", nil) // same key, another topic
	p.Fail(a2.ID, 1)
	p.Reject(b2.ID, "too large")
	if p.KeepsKeyOrder() || broker.KeepsKeyOrder(p) {
		t.Fatal("a new Publisher keeps key order; want it off by default")
	}
	p.KeepOrder(true)
	errs := p.Publish(ctx, []courier.Message{a1, b1, a2, b2, other, a3, b3})
	for i, want := range []error{nil, nil, errAny, broker.ErrRejected, nil, broker.ErrUnavailable, nil} {
		switch err := errs[i]; {
		case want == nil && err != nil, want != nil && err == nil,
			want != nil && want != errAny && !errors.Is(err, want):
			t.Errorf("message %d: %v, want %v", i, err, want)
		}
	}
	if got := len(p.Messages()); got != 4 {
		t.Fatalf("%d messages stored, want a1 b1 other b3", got)
	}
}

func TestFaults(t *testing.T) {
	ctx := context.Background()
	p := memory.NewPublisher()
	a := courier.NewMessage("t", "a", "T", nil)
	b := courier.NewMessage("t", "b", "T", nil)
	c := courier.NewMessage("t", "c", "T", nil)

	p.FailNext(1)
	p.Reject(b.ID, "too large")
	p.Fail(c.ID, 2)
	for round, want := range [][3]error{
		{broker.ErrUnavailable, broker.ErrRejected, errAny},
		{nil, broker.ErrRejected, errAny},
		{nil, broker.ErrRejected, nil},
	} {
		errs := p.Publish(ctx, []courier.Message{a, b, c})
		for i, err := range errs {
			if !matches(err, want[i]) {
				t.Fatalf("round %d, message %d: %v, want %v", round, i, err, want[i])
			}
		}
	}
	if errs := p.Publish(ctx, []courier.Message{c}); errs[0] != nil {
		t.Fatalf("after its failures: %v", errs[0])
	}
	if got := p.Messages(); len(got) != 4 || got[0].ID != a.ID || got[1].ID != a.ID || got[2].ID != c.ID {
		t.Fatalf("acknowledged %d messages", len(got))
	}
	if p.Attempts(b.ID) != 3 || len(p.Calls()) != 4 {
		t.Fatalf("%d attempts of b, %d calls; want 3 and 4", p.Attempts(b.ID), len(p.Calls()))
	}

	p.Down(true)
	if errs := p.Publish(ctx, []courier.Message{a}); !errors.Is(errs[0], broker.ErrUnavailable) || !errors.Is(errs[0], memory.ErrOutage) {
		t.Fatalf("while down: %v", errs[0])
	}
	p.Down(false)

	p.Hold()
	done := make(chan []error)
	go func() { done <- p.Publish(ctx, []courier.Message{a}) }()
	<-p.Held()
	select {
	case <-done:
		t.Fatal("a held publish returned")
	case <-time.After(10 * time.Millisecond):
	}
	p.Release()
	if errs := <-done; errs[0] != nil {
		t.Fatalf("released publish: %v", errs[0])
	}

	p.Hold()
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if errs := p.Publish(short, []courier.Message{a}); !errors.Is(errs[0], broker.ErrUnavailable) {
		t.Fatalf("held publish whose context ended: %v", errs[0])
	}
}

var errAny = errors.New("any counted failure")

func matches(err, want error) bool {
	switch want {
	case nil:
		return err == nil
	case errAny:
		return err != nil && !errors.Is(err, broker.ErrUnavailable) && !errors.Is(err, broker.ErrRejected)
	}
	return errors.Is(err, want)
}

// The publisher part of the conformance suite: what the Publisher keeps is
// what the destination holds, and Down is the outage. It claims no
// features: it keeps duplicates and accepts any size.
func TestConformance(t *testing.T) {
	brokertest.Run(t, brokertest.Harness{
		New: func(t testing.TB) brokertest.Instance {
			pub := memory.NewPublisher()
			pub.KeepOrder(true)
			return brokertest.Instance{
				Topic:     "orders",
				Publisher: pub,
				Stored:    func(testing.TB) []courier.Message { return pub.Messages() },
				Unreachable: func(testing.TB) broker.Publisher {
					pub.Down(true)
					return pub
				},
			}
		},
	})
}
