package chaos

import (
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/courier-go/courier/broker/brokertest"
	"github.com/courier-go/courier/internal/testenv"
)

// TestOrderedGroupPauses is the pause sweep of the ordered consumer groups,
// on NATS, Kafka (kfake) and RabbitMQ at once: four instances of one
// consumer, each a process of its own applying through the inbox in
// PostgreSQL and keeping order, as in TestOrderedGroupNATS, while one
// instance after another is stopped (SIGSTOP) for each of the durations of
// brokertest.Pauses, on both sides of every boundary of the group's timing
// (NATS and Kafka: a heartbeat every 250ms, gone after 1.25s; RabbitMQ:
// 500ms and 2.5s, since its connection heartbeat counts whole seconds),
// cut off from the broker (its proxies stop forwarding) for nine tenths
// and twice the timeout, and made slower than NATS's AckWait (1s; the
// inbox is told to extend it only every 2s) and than the timeout, by
// messages whose application takes that long. A fault starts every half
// timeout, whether or not the one before is over. Nothing may be lost,
// applied twice or applied before its key's previous message. With -long
// the schedule runs ten times over, and once more with the broker's
// default timing.
func TestOrderedGroupPauses(t *testing.T) {
	t.Parallel()
	short := brokertest.Timing{Heartbeat: 250 * time.Millisecond, Timeout: 1250 * time.Millisecond}
	def := brokertest.Timing{Heartbeat: time.Second, Timeout: 5 * time.Second}
	brokers := []struct {
		name       string
		target     func(*testing.T) groupTarget
		short, def brokertest.Timing
		ackWait    time.Duration
	}{
		{"NATS", natsGroup, short, def, time.Second},
		{"Kafka", func(t *testing.T) groupTarget { return kafkaGroup(t, short.Timeout) }, short,
			brokertest.Timing{Heartbeat: 3 * time.Second, Timeout: 45 * time.Second}, 0},
		{"RabbitMQ", amqpGroup, brokertest.Timing{Heartbeat: 500 * time.Millisecond, Timeout: 2500 * time.Millisecond}, def, 0},
	}
	var wg sync.WaitGroup
	for _, b := range brokers { // at once: subtests run from goroutines do
		wg.Go(func() {
			t.Run(b.name, func(t *testing.T) { runPauses(t, b.target, b.short, b.def, b.ackWait) })
		})
	}
	wg.Wait()
}

// runPauses runs the sweep on a group of target's with the short timing,
// and with -long ten times over and once with the default timing too.
// ackWait is the NATS consumers' (0: the default).
func runPauses(t *testing.T, target func(*testing.T) groupTarget, short, def brokertest.Timing, ackWait time.Duration) {
	if !testenv.Long() {
		runGroup(t, target(t), pauseSettings(short, ackWait, 1))
		return
	}
	t.Run("short", func(t *testing.T) { runGroup(t, target(t), pauseSettings(short, ackWait, 10)) })
	t.Run("default", func(t *testing.T) { runGroup(t, target(t), pauseSettings(def, ackWait, 1)) })
}

// pauseSettings are a sweep's with timing tm, its schedule run repeats
// times over.
func pauseSettings(tm brokertest.Timing, ackWait time.Duration, repeats int) groupSettings {
	var schedule []groupFault
	for range repeats {
		for _, d := range brokertest.Pauses(tm) {
			schedule = append(schedule, groupFault{kind: "pause", d: d})
		}
		schedule = append(schedule, groupFault{kind: "cut", d: tm.Timeout * 9 / 10}, groupFault{kind: "cut", d: 2 * tm.Timeout},
			groupFault{kind: "slow"})
	}
	// NATS partitions pull 10 deliveries ahead, so that a pull that stalls
	// overflows them at this rate (see broker/nats, Key partitions). Four
	// messages at once per instance keep the three brokers' twelve
	// instances within PostgreSQL's 100 connections, beside the tests of
	// other packages.
	s := groupSettings{keys: 100, roundEvery: 500 * time.Millisecond, faultEvery: tm.Timeout / 2, instances: 4,
		timing: tm, schedule: schedule, ackWait: ackWait, prefetch: 10, concurrency: 4}
	// Rounds until the last fault is over and its partitions have moved.
	span := time.Duration(len(schedule)+1)*s.faultEvery + 3*tm.Timeout + 2*time.Second
	s.rounds = int(span/s.roundEvery) + 1
	return s
}

// runSchedule makes the run's scheduled faults, one every faultEvery, on
// the instances in turn (the oldest first), whether or not the one before
// is over, then waits for the producer to end.
func (r *groupRun) runSchedule(produced <-chan struct{}) {
	tick := time.NewTicker(r.s.faultEvery)
	defer tick.Stop()
	for _, f := range r.s.schedule {
		select {
		case <-produced:
			return // reportRebalances says which faults were not made
		case <-tick.C:
		}
		in := r.pick(false)
		r.mu.Lock()
		r.alive = append(r.alive, in) // next time, the next one
		r.mu.Unlock()
		f.who, f.at = in.name, time.Now()
		switch f.kind {
		case "pause":
			_ = in.cmd.Process.Signal(syscall.SIGSTOP)
			time.AfterFunc(f.d, func() { _ = in.cmd.Process.Signal(syscall.SIGCONT) })
		case "cut":
			for _, p := range in.proxies {
				p.Freeze()
			}
			time.AfterFunc(f.d, func() {
				for _, p := range in.proxies {
					p.Thaw()
				}
			})
		case "slow":
			f.who, f.d = "whoever has them", groupSlow(r.s)
			r.mu.Lock()
			r.slowRound = len(r.published) + 1
			r.mu.Unlock()
		}
		r.mu.Lock()
		r.faults = append(r.faults, f)
		r.mu.Unlock()
	}
	<-produced
}
