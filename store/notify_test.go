package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/courier-go/courier/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// wakes counts the wake-ups that arrive within d.
func wakes(n *store.LocalNotifier, d time.Duration) int {
	deadline := time.After(d)
	count := 0
	for {
		select {
		case <-n.Wake():
			count++
		case <-deadline:
			return count
		}
	}
}

func TestLocalNotifierWithoutRun(t *testing.T) {
	n := store.NewLocalNotifier()
	if ok, err := n.Arm(context.Background()); !ok || err != nil {
		t.Fatalf("Arm = %v, %v; want true, nil", ok, err)
	}
	if got := wakes(n, 20*time.Millisecond); got != 0 {
		t.Fatalf("%d wake-ups without a signal", got)
	}
	for range 5 {
		n.Signal() // never blocks; merged while nobody listens
	}
	if got := wakes(n, 20*time.Millisecond); got != 1 {
		t.Fatalf("%d wake-ups for signals sent while nobody listened, want them merged into 1", got)
	}
	if err := n.Disarm(context.Background()); err != nil {
		t.Fatalf("Disarm: %v", err)
	}
}

// A signal wakes the relay at once, and Run wakes it again a few times in
// the next quarter second (the writer's commit comes after its signal),
// then stays quiet.
func TestLocalNotifierFollowUps(t *testing.T) {
	n := store.NewLocalNotifier()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	n.Signal()
	got := wakes(n, 400*time.Millisecond)
	if got < 3 || got > 9 {
		t.Fatalf("%d wake-ups in the 400ms after one signal, want the immediate one and follow-ups (at most 9)", got)
	}
	if late := wakes(n, 300*time.Millisecond); late != 0 {
		t.Fatalf("%d wake-ups long after the signal, want none", late)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
}
