package waits_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier/internal/waits"
)

func TestSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	if !waits.Sleep(ctx, time.Millisecond) || !waits.Sleep(ctx, 0) {
		t.Fatal("Sleep reported a live context as ended")
	}
	cancel()
	start := time.Now()
	if waits.Sleep(ctx, time.Hour) || waits.Sleep(ctx, 0) {
		t.Fatal("Sleep reported an ended context as live")
	}
	if time.Since(start) > time.Second {
		t.Fatal("Sleep waited on an ended context")
	}
}

// stoppedClock is a clock at an instant that moves only when advanced.
type stoppedClock struct {
	mu sync.Mutex
	at time.Time
}

func (c *stoppedClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.at }

func (c *stoppedClock) advance(d time.Duration) { c.mu.Lock(); c.at = c.at.Add(d); c.mu.Unlock() }

// Until ends when the clock passes the deadline: the real clock by
// sleeping, a clock the test holds when the test moves it, however far the
// deadline is in real time.
func TestUntil(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !waits.Until(ctx, nil, time.Now().Add(time.Millisecond)) || !waits.Until(ctx, nil, time.Now().Add(-time.Hour)) {
		t.Fatal("Until on the real clock reported a live context as ended")
	}

	clk := &stoppedClock{at: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)}
	done := make(chan bool)
	deadline := clk.now().Add(time.Hour)
	go func() { done <- waits.Until(ctx, clk.now, deadline) }()
	clk.advance(59 * time.Minute)
	select {
	case <-done:
		t.Fatal("Until returned a minute before its deadline")
	case <-time.After(3 * waits.ClockPoll): // it read the clock again meanwhile
	}
	clk.advance(time.Minute)
	select {
	case live := <-done:
		if !live {
			t.Fatal("Until reported a live context as ended")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Until did not end when its clock passed the deadline")
	}

	deadline = clk.now().Add(time.Hour)
	go func() { done <- waits.Until(ctx, clk.now, deadline) }()
	cancel()
	if <-done {
		t.Fatal("Until reported an ended context as live")
	}
}

func TestGrace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	work, done := waits.Grace(ctx, 20*time.Millisecond)
	defer done()
	cancel()
	if work.Err() != nil {
		t.Fatal("work ended with its parent, before the grace period")
	}
	select {
	case <-work.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("work outlived the grace period")
	}

	work, done = waits.Grace(context.Background(), time.Hour)
	done()
	if work.Err() == nil {
		t.Fatal("cancel did not end work")
	}
}
