package waits_test

import (
	"context"
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
