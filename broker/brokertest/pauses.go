package brokertest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier/internal/tcpproxy"
	"github.com/courier-go/courier/internal/testwait"
)

// Pauses returns the durations the pause sweep stops an instance for, with
// timing: on both sides of every boundary a paused instance meets, at the
// same points of the timeout whatever it is. With NATS's and RabbitMQ's
// defaults (a heartbeat every 1s, gone after 5s): 0.5, 0.8, 1, 1.2, 1.5, 3,
// 4, 4.5, 4.8, 5.2, 6 and 10 s; that is a tenth, a fifth and three tenths
// of the timeout, the heartbeat less and more a twenty-fifth of the
// timeout, three fifths, four fifths (two missed heartbeats of a NATS
// partition's pull, two missed AMQP heartbeats: the connection is closed),
// nine tenths, the timeout less and more a twenty-fifth, six fifths and
// twice the timeout.
func Pauses(t Timing) []time.Duration {
	at := func(num, den int64) time.Duration { return t.Timeout * time.Duration(num) / time.Duration(den) }
	return []time.Duration{
		at(1, 10), at(1, 5), at(3, 10),
		t.Heartbeat - at(1, 25), t.Heartbeat + at(1, 25),
		at(3, 5), at(4, 5), at(9, 10),
		t.Timeout - at(1, 25), t.Timeout + at(1, 25),
		at(6, 5), 2 * t.Timeout,
	}
}

// The faults of the sweep.
const (
	faultPause = "pause" // the instance's process stopped (SIGSTOP), then continued
	faultCut   = "cut"   // the instance's connections to the broker stop forwarding, then forward again
	faultSlow  = "slow"  // two of its messages take longer to apply than the broker's ack wait and the timeout
)

// sweepCase is one run of the sweep: a fault of an instance, for a while.
type sweepCase struct {
	fault  string
	d      time.Duration
	timing Timing
}

func (c sweepCase) String() string {
	return fmt.Sprintf("%s_%s_of_%s", c.fault, c.d, c.timing.Timeout)
}

// The sweep's traffic: sweepKeys keys, a message of each every
// sweepRound, each applied in sweepWork by one of sweepInstances.
const (
	sweepInstances = 2
	sweepKeys      = 12
	sweepRound     = 100 * time.Millisecond
	sweepWork      = 2 * time.Millisecond
)

// testPausedInstance is the pause sweep: two instances of a consumer that
// shares keys, each a process of its own (see Child), receive a steady
// stream of messages while one of them is stopped (SIGSTOP) for each of
// Pauses' durations, its connections are cut, or its handler is slower
// than the broker's ack wait; every case runs at once, on a destination of
// its own. Each instance appends every message it applies to one log,
// whose order is the order of application: every message must be applied,
// each key's in the order published, a message applied again (the next
// owner of a partition receives what the last did not acknowledge) only
// after it was first applied. By default it runs with the harness's
// ShortTiming, cuts of nine tenths and twice the timeout; with Long also
// with its Timing, cuts as long as every pause, each case ten times.
func testPausedInstance(t *testing.T, h Harness) {
	if h.New(t).SharedRecipe == "" {
		t.Skip("brokertest: the harness gives no SharedRecipe: its consumers that share keys do not run as processes")
	}
	if h.ShortTiming.Timeout <= 0 {
		t.Fatal("brokertest: Harness.ShortTiming is not set: give the short timing the sweep runs with")
	}
	if h.Long && h.Timing.Timeout <= 0 {
		t.Fatal("brokertest: Harness.Timing is not set: give the default timing the sweep runs with under Long")
	}
	timings, repeats := []Timing{h.ShortTiming}, 1
	if h.Long {
		timings, repeats = append(timings, h.Timing), 10
	}
	running := make(chan struct{}, maxCases)
	for r := range repeats {
		for _, tm := range timings {
			var wg sync.WaitGroup
			for _, c := range sweepCases(tm, h.Features.RedeliversAfter, h.Long) {
				running <- struct{}{}
				wg.Go(func() {
					defer func() { <-running }()
					t.Run(fmt.Sprintf("%s/%d", c, r+1), func(t *testing.T) { runCase(t, h, c) })
				})
			}
			wg.Wait()
		}
	}
}

// maxCases bounds the cases that run at once (subtests run from
// goroutines, which -parallel does not bound), so that a broker on two
// cores serves them all.
const maxCases = 16

// sweepCases are the cases of one timing (see testPausedInstance).
func sweepCases(tm Timing, ackWait time.Duration, long bool) []sweepCase {
	var cases []sweepCase
	for _, d := range Pauses(tm) {
		cases = append(cases, sweepCase{faultPause, d, tm})
		if long {
			cases = append(cases, sweepCase{faultCut, d, tm})
		}
	}
	if !long {
		cases = append(cases, sweepCase{faultCut, tm.Timeout * 9 / 10, tm}, sweepCase{faultCut, 2 * tm.Timeout, tm})
	}
	return append(cases, sweepCase{faultSlow, max(ackWait*3/2, tm.Timeout), tm})
}

// runCase runs one case on a destination of its own.
func runCase(t *testing.T, h Harness, c sweepCase) {
	in := h.New(t)
	if c.fault == faultCut && len(in.BrokerAddrs) == 0 {
		t.Skip("brokertest: the harness gives no BrokerAddrs: nothing to cut")
	}
	log := filepath.Join(t.TempDir(), "applied")
	testwait.Must(t, os.WriteFile(log, nil, 0o600), "the log")
	r := &sweepRun{t: t, in: in, c: c, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(r.stopAll)
	for i := range sweepInstances {
		p := Process{Recipe: in.SharedRecipe, Timing: c.timing}
		if i == 0 && c.fault == faultCut {
			p.Dial = map[string]string{}
			for _, addr := range in.BrokerAddrs {
				proxy := tcpproxy.Start(t, addr)
				p.Dial[addr] = proxy.Addr()
				r.proxies = append(r.proxies, proxy)
			}
		}
		r.start(p, "i"+strconv.Itoa(i))
	}
	go r.produce()
	defer r.stopProducing()
	r.waitApplying(0, "before the fault")
	end := r.fault()
	r.waitApplying(end, "after the fault")
	published := r.stopProducing()
	testwait.WhileProgressing(t, 30*time.Second, func() (bool, any) { a := r.applied(); return a.distinct >= published*sweepKeys, a.distinct },
		"%d of %d messages applied; the instances said:\n%s", testwait.Lazy(func() any { return r.applied().distinct }), published*sweepKeys, testwait.Lazy(r.output))
	r.stopAll()
	r.check(published)
}
