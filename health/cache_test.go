package health_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-go/courier/health"
	"github.com/courier-go/courier/internal/testenv"
)

// pinger is a database whose Ping the test holds and counts.
type pinger struct {
	calls   atomic.Int32
	release chan struct{}
}

func (p *pinger) Ping(ctx context.Context) error {
	p.calls.Add(1)
	select {
	case <-p.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// testClock is a time the test moves, counting who reads it.
type testClock struct {
	mu    sync.Mutex
	now   time.Time
	reads atomic.Int32
}

func (c *testClock) Now() time.Time {
	c.reads.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// A flood of probes costs one round of checks per CacheFor (a second by
// default): requests that come while the checks run wait for them and
// share their answer, and those within the second after get it too.
func TestReadyChecksAtMostOncePerCacheFor(t *testing.T) {
	db := &pinger{release: make(chan struct{})}
	clk := &testClock{now: time.Now()}
	broker := atomic.Int32{}
	h, err := health.New(health.Config{
		Database: db,
		Broker:   func(context.Context) error { broker.Add(1); return nil },
		Clock:    clk.Now,
	})
	testenv.Must(t, err, "new")
	srv := httptest.NewServer(h)
	defer srv.Close()

	const probes = 20
	codes := make(chan int, probes)
	for range probes {
		go func() {
			resp, err := http.Get(srv.URL + "/readyz")
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	// Every probe has arrived (each reads the clock once) while the first
	// round of checks is held in its ping.
	testenv.Eventually(t, 10*time.Second, func() bool { return clk.reads.Load() >= probes && db.calls.Load() >= 1 },
		"%v probes arrived, %v pings", testenv.Lazy(func() any { return clk.reads.Load() }), testenv.Lazy(func() any { return db.calls.Load() }))
	close(db.release)
	for range probes {
		if code := <-codes; code != http.StatusOK {
			t.Fatalf("a probe got %d", code)
		}
	}
	if db.calls.Load() != 1 || broker.Load() != 1 {
		t.Fatalf("%d probes at once: %d pings, %d broker checks; want one of each", probes, db.calls.Load(), broker.Load())
	}
	clk.Add(health.DefaultCacheFor - time.Millisecond)
	if rep := h.Ready(context.Background()); !rep.Ready || db.calls.Load() != 1 {
		t.Fatalf("within the second: %+v, %d pings; want the answer before", rep, db.calls.Load())
	}
	clk.Add(time.Millisecond)
	if rep := h.Ready(context.Background()); !rep.Ready || db.calls.Load() != 2 {
		t.Fatalf("a second later: %+v, %d pings; want a new round", rep, db.calls.Load())
	}
	if _, err := health.New(health.Config{CacheFor: -time.Second}); err != nil {
		t.Fatalf("CacheFor -1s (no cache): %v", err)
	}
}
