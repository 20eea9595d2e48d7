package group

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A pump hands deliveries on in order, counts them until settled (each
// ticket once), and Drain waits for that; ErrLost ends it as lost, Stop
// ends it and waits.
func TestPump(t *testing.T) {
	in := make(chan int)
	recv := func(stop <-chan struct{}) (int, error) {
		select {
		case n, ok := <-in:
			if !ok {
				return 0, ErrLost
			}
			return n, nil
		case <-stop:
			return 0, errors.New("stopped")
		}
	}
	type handed struct {
		n int
		t *Ticket
	}
	out := make(chan handed)
	p := StartPump(recv, func(n int, t *Ticket) handed { return handed{n, t} }, out)
	var got []handed
	for i := range 3 {
		in <- i
		got = append(got, <-out)
	}
	for i, h := range got {
		if h.n != i {
			t.Fatalf("handed %d as %d", h.n, i)
		}
	}
	if p.Drain(context.Background(), 20*time.Millisecond) {
		t.Fatal("Drain reported all settled with three out")
	}
	got[0].t.Settle()
	got[0].t.Settle() // once only
	got[1].t.Settle()
	if p.Drain(context.Background(), 20*time.Millisecond) {
		t.Fatal("Drain reported all settled with one out (a ticket settled twice?)")
	}
	done := make(chan bool)
	go func() { done <- p.Drain(context.Background(), 10*time.Second) }()
	got[2].t.Settle()
	if !<-done {
		t.Fatal("Drain did not see every delivery settled")
	}
	(*Ticket)(nil).Settle() // a delivery of no partition
	close(in)
	p.Stop()
	if !p.Lost() {
		t.Fatal("recv returned ErrLost and the pump is not lost")
	}

	in = make(chan int) // the pump below receives from a channel still open
	q := StartPump(recv, func(n int, t *Ticket) handed { return handed{n, t} }, out)
	q.Stop()
	q.Stop()
	if q.Lost() {
		t.Fatal("a stopped pump says it was lost")
	}
}
