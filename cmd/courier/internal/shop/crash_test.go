package shop_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-go/courier/cmd/courier/internal/shop"
	"github.com/courier-go/courier/internal/testenv"
)

// Crashes mid-run: while orders flow, an instance of the orders service
// and one of inventory are killed (contexts cancelled, nothing drained:
// relay leases, unacknowledged deliveries and HTTP requests in flight are
// left behind) and restarted on the same databases, while the other
// instance of each goes on; both instances of payment crash by themselves
// at once, Faults.CrashAfter after they started (with the shop, so before
// or after the first orders reach them); with duplicated, reordered and
// failing deliveries, declines, exhausted stock and failed shipments on
// top. The last orders are placed only once every crash happened and every
// crashed instance applied a message since, so that the crashes, the
// restarts and the restarted instances' work are part of the run whatever
// its pace. Every order ends and every invariant holds.
func TestServicesCrashAndRestartMidRun(t *testing.T) {
	onEachStack(t, func(t *testing.T, st *stack) {
		opts := st.options(t)
		opts.Stock = map[string]int{"mug": 1000, "tee": 60}
		chaos := shop.Faults{FailureRate: 0.1, DuplicateRate: 0.1, ReorderRate: 0.1}
		payment, shipping := chaos, chaos
		payment.DeclineRate, payment.CrashAfter = 0.1, 1500*time.Millisecond
		shipping.ShipmentFailureRate = 0.05
		opts.Faults = map[string]shop.Faults{shop.Orders: chaos, shop.Payment: payment, shop.Inventory: chaos, shop.Shipping: shipping}
		s := st.start(t, opts)

		const n, concurrency = 150, 8
		var placed atomic.Int64
		// A worker whose order makes n-concurrency placed or more waits for
		// release before it takes another: each worker places at most one
		// such order before it, so at most n-1 orders are placed before
		// release and at least the last after every crash and restart.
		release := make(chan struct{})
		var releaseOnce sync.Once
		releaseLast := func() { releaseOnce.Do(func() { close(release) }) }
		placing := runLoad(t, s, n, shop.LoadConfig{Concurrency: concurrency, ReplayRate: 0.1, Placed: func(i int) {
			if i >= n-concurrency {
				<-release
			}
		}}, &placed, releaseLast)

		var crashed []restarted
		for _, c := range []struct {
			at      int64
			service string
		}{{n / 3, shop.Orders}, {2 * n / 3, shop.Inventory}} {
			testenv.WhileProgressing(t, settleStall, func() (bool, any) { return placed.Load() >= c.at, placed.Load() },
				"only %v orders placed, waiting for %d to restart %s", testenv.Lazy(func() any { return placed.Load() }), c.at, c.service)
			testenv.Must(t, s.Restart(c.service), "restart "+c.service)
			crashed = append(crashed, restartedNow(c.service, s.Service(c.service).Instance(0)))
		}
		// Payment's instances crash by themselves, CrashAfter after they
		// started, each once (the shop restarts an instance without the
		// crash). The shop counts a crash once the crashed incarnation
		// stopped: what the instance applies from then on, it applies after
		// its restart.
		testenv.Eventually(t, time.Minute, func() bool { return s.Crashes()[shop.Payment] == s.Instances() },
			"payment crashed %v times, want %d, once for each instance (Faults.CrashAfter %s)",
			testenv.Lazy(func() any { return s.Crashes()[shop.Payment] }), testenv.Lazy(func() any { return s.Instances() }), payment.CrashAfter)
		for _, in := range s.Payment.Instances() {
			crashed = append(crashed, restartedNow(shop.Payment, in))
		}
		testenv.Eventually(t, time.Minute, func() bool { return idle(crashed) == nil },
			"%v orders placed; instances that applied nothing since they crashed and restarted: %v",
			testenv.Lazy(func() any { return placed.Load() }), testenv.Lazy(func() any { return idle(crashed) }))
		t.Logf("%d orders placed when every crashed instance had applied a message since its crash: %v", placed.Load(), crashed)
		releaseLast()
		res := placing()

		a := st.settle(t)
		crashes := s.Crashes()
		if crashes[shop.Orders] != 1 || crashes[shop.Inventory] != 1 || crashes[shop.Payment] != s.Instances() {
			t.Fatalf("crashes %v; want orders and inventory once each, and each instance of payment once", crashes)
		}
		if a.Orders != n || len(res.Orders) != n || res.ReplayMismatches != 0 {
			t.Fatalf("%d orders stored, %d placed, %d replays for another order; want %d, %d, 0", a.Orders, len(res.Orders), res.ReplayMismatches, n, n)
		}
		if a.ByState[shop.StateShippingReady] == 0 || a.ByState[shop.StateCancelled] == 0 {
			t.Fatalf("orders by state %v: want some completed and some cancelled", a.ByState)
		}
		t.Logf("%v, cancelled because %v", a.ByState, a.Reasons)
	})
}

// restarted is an instance whose crashed incarnation has stopped, with its
// totals then.
type restarted struct {
	service string
	in      *shop.Instance
	then    shop.Metrics
}

// restartedNow records instance in of service, whose crashed incarnation
// has stopped: that incarnation's totals no longer grow, so that any
// message the instance's totals count from now on was applied by an
// incarnation after the crash.
func restartedNow(service string, in *shop.Instance) restarted {
	return restarted{service: service, in: in, then: in.Metrics()}
}

func (r restarted) String() string {
	m := r.in.Metrics()
	return fmt.Sprintf("%s instance %d (incarnations %d, then %d; messages applied %d, then %d)",
		r.service, r.in.Number(), m.Runs, r.then.Runs, m.Inbox.Applied, r.then.Inbox.Applied)
}

// idle returns the instances of rs that applied no message since they were
// recorded, nil when each of them did.
func idle(rs []restarted) []restarted {
	var out []restarted
	for _, r := range rs {
		if r.in.Metrics().Inbox.Applied <= r.then.Inbox.Applied {
			out = append(out, r)
		}
	}
	return out
}

// runLoad starts placing n orders, counting them in placed before
// cfg.Placed sees them, and returns a function that waits, for as long as
// placed grows, until they are placed. When the test ends first, the load
// is cancelled, unblock is called (for a cfg.Placed that holds on) and the
// load is waited for.
func runLoad(t *testing.T, s *shop.Shop, n int, cfg shop.LoadConfig, placed *atomic.Int64, unblock func()) func() shop.LoadResult {
	t.Helper()
	cfg.URL, cfg.Orders, cfg.SKUs = s.URL(), n, []string{"mug", "tee"}
	then := cfg.Placed
	cfg.Placed = func(i int) {
		placed.Store(int64(i))
		if then != nil {
			then(i)
		}
	}
	l, err := shop.NewLoad(cfg)
	testenv.Must(t, err, "load")
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		res shop.LoadResult
		err error
	}
	done, stopped := make(chan result, 1), make(chan struct{})
	go func() {
		defer close(stopped)
		res, err := l.Run(ctx)
		done <- result{res, err}
	}()
	t.Cleanup(func() {
		cancel()
		unblock()
		<-stopped
	})
	return func() shop.LoadResult {
		t.Helper()
		var r result
		testenv.WhileProgressing(t, settleStall, func() (bool, any) {
			select {
			case r = <-done:
				return true, nil
			default:
				return false, placed.Load()
			}
		}, "%v of %d orders placed", testenv.Lazy(func() any { return placed.Load() }), n)
		testenv.Must(t, r.err, "place orders")
		return r.res
	}
}
