package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/courier-go/courier"
)

// The consumers section's two loads: the drain of a backlog, and a steady
// rate for the latency from publish to applied.

// consDrainResult is one drain's.
type consDrainResult struct {
	elapsed time.Duration
	// moved: an instance's partitions changed during the drain.
	moved bool
	// CPU used during the drain: the PostgreSQL backends serving the
	// instances (pgOK: read), this process (the instances, and kfake), the
	// broker's process (brokerOK: read; not for kfake), and the machine's
	// CPUs busy on average, in cores (machineOK: read).
	pg, bench, broker     time.Duration
	pgOK, brokerOK        bool
	machineCores          float64
	machineOK             bool
	publishing, readiness time.Duration
	// transactions is how many transactions applied the drain's messages.
	transactions int64
}

// consCPU is a reading of the CPU counters a drain records.
type consCPU struct {
	pg, bench, broker cpuSnapshot
	pgErr, brokerErr  error
	busy, total       time.Duration
	machineErr        error
}

// readConsCPU reads the counters: the backends of appName's connections,
// this process, the broker (probe; nil: none) and the machine.
func (b *Bench) readConsCPU(ctx context.Context, appName string, probe cpuProbe) consCPU {
	var c consCPU
	c.pg, c.pgErr = backendsCPU(ctx, b.admin, appName)
	c.bench, _ = selfProbe(ctx)
	if probe != nil {
		c.broker, c.brokerErr = probe(ctx)
	} else {
		c.brokerErr = fmt.Errorf("the broker's process is not read")
	}
	c.busy, c.total, c.machineErr = machineCPU()
	return c
}

// consumerDrain publishes s.n messages over s.keys keys while the
// instances hold their deliveries back, waits until the broker holds them
// all for the instances, then lets the instances receive and times them
// until every message is applied (the consumers' Applied counts, which
// count a message once its transaction committed), reading the CPU
// counters and the transactions counted before and after.
func (b *Bench) consumerDrain(ctx context.Context, env *Env, tgt *consTarget, g *consGroup, s consSettings) (consDrainResult, error) {
	var dr consDrainResult
	start := time.Now()
	if err := publishRange(ctx, tgt.pub, 0, s.n, s.keys); err != nil {
		return dr, err
	}
	dr.publishing = time.Since(start)
	if tgt.ready != nil {
		if err := tgt.ready(ctx, s.n); err != nil {
			return dr, err
		}
	}
	dr.readiness = time.Since(start) - dr.publishing
	held := g.partitions()
	tx0 := g.grouped.transactions(g.metrics().Applied)
	c0 := b.readConsCPU(ctx, g.appName, tgt.cpu)
	t0 := time.Now()
	g.open()
	end, err := g.waitApplied(ctx, int64(s.n))
	if err != nil {
		return dr, err
	}
	c1 := b.readConsCPU(ctx, g.appName, tgt.cpu)
	dr.elapsed = end.Sub(t0)
	dr.transactions = g.grouped.transactions(g.metrics().Applied) - tx0
	dr.moved = !slices.EqualFunc(held, g.partitions(), slices.Equal)
	dr.pg, dr.pgOK = cpuDelta(c0.pg, c1.pg), c0.pgErr == nil && c1.pgErr == nil
	dr.bench = cpuDelta(c0.bench, c1.bench)
	dr.broker, dr.brokerOK = cpuDelta(c0.broker, c1.broker), c0.brokerErr == nil && c1.brokerErr == nil
	if c0.machineErr == nil && c1.machineErr == nil && c1.total > c0.total {
		dr.machineCores = float64(c1.busy-c0.busy) / float64(c1.total-c0.total) * float64(runtime.NumCPU())
		dr.machineOK = true
	}
	logf("  published %d messages in %s, the broker held them %s later; drained in %s",
		s.n, dr.publishing.Round(time.Millisecond), dr.readiness.Round(time.Millisecond), dr.elapsed.Round(time.Millisecond))
	return dr, nil
}

// consLatencyResult is one latency run's.
type consLatencyResult struct {
	// total is the messages published (warm-up included).
	total int
	// p50 and p99 are from publish to applied (the effect row's insert),
	// ackP50 and ackP99 to acknowledged (the delivery's Ack called, after
	// the commit), in ms, after the warm-up; offered is the rate actually
	// published, msg/s.
	p50, p99, ackP50, ackP99, offered float64
}

// consLatencyTotal is the messages a latency run of s publishes, its
// warm-up's included.
func consLatencyTotal(s consSettings) int {
	return int(float64(s.rate) * (s.warmup + s.window).Seconds())
}

// consTick is how often the latency run's publisher publishes what fell
// due since its last call.
const consTick = 5 * time.Millisecond

// consumerLatency publishes s.rate messages a second for s.warmup +
// s.window, continuing the drain's numbering (message s.n onwards, same
// keys), each call holding what fell due since the previous one (every
// consTick, or at once when a call took longer), and each message's
// publish time is when its call began. Once every one is applied, its
// latency is its row's applied_at (clock_timestamp() at the insert, in the
// inbox's transaction) minus its publish time, and the moment its
// delivery's Ack was called (after the commit) minus its publish time;
// the warm-up's are left out. In a group, a row is inserted before the
// group's other messages are applied and the commit, so the second
// includes what the first leaves out.
func consumerLatency(ctx context.Context, env *Env, tgt *consTarget, g *consGroup, s consSettings) (consLatencyResult, error) {
	total := consLatencyTotal(s)
	warm := int(float64(s.rate) * s.warmup.Seconds())
	res := consLatencyResult{total: total}
	pubAt := make([]time.Time, total)
	tick := time.NewTicker(consTick)
	defer tick.Stop()
	start := time.Now()
	for sent := 0; sent < total; {
		due := min(total, int(time.Since(start).Seconds()*float64(s.rate))+1)
		if due <= sent {
			<-tick.C
			continue
		}
		upTo := min(due, sent+min(consMaxCall, s.keys))
		msgs := make([]courier.Message, 0, upTo-sent)
		for i := sent; i < upTo; i++ {
			msgs = append(msgs, consMessage(s.n+i, s.keys))
		}
		now := time.Now()
		for i := sent; i < upTo; i++ {
			pubAt[i] = now
		}
		if err := publishAll(ctx, tgt.pub, msgs); err != nil {
			return res, err
		}
		sent = upTo
	}
	res.offered = float64(total) / time.Since(start).Seconds()
	if _, err := g.waitApplied(ctx, int64(s.n+total)); err != nil {
		return res, err
	}
	lat, err := latencies(ctx, env, s.n+warm, pubAt[warm:])
	if err != nil {
		return res, err
	}
	slices.Sort(lat)
	res.p50, res.p99 = quantile(lat, 0.50), quantile(lat, 0.99)
	acked, err := ackLatencies(ctx, g.acked, s.n+warm, pubAt[warm:])
	if err != nil {
		return res, err
	}
	slices.Sort(acked)
	res.ackP50, res.ackP99 = quantile(acked, 0.50), quantile(acked, 0.99)
	return res, nil
}

// ackLatencies returns, in ms, when each message numbered from on was
// first acknowledged minus its publish time pubAt[seq-from], once every
// one was (a consumer counts a message applied just before it
// acknowledges it; at most 10 s).
func ackLatencies(ctx context.Context, acked *ackStamps, from int, pubAt []time.Time) ([]float64, error) {
	missing := 0
	err := waitFor(ctx, 10*time.Second, time.Millisecond, func() (bool, error) {
		missing = 0
		for i := range pubAt {
			if _, ok := acked.of(from + i); !ok {
				missing++
			}
		}
		return missing == 0, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%d of the latency run's %d messages applied were not acknowledged: %w", missing, len(pubAt), err)
	}
	lat := make([]float64, len(pubAt))
	for i, pub := range pubAt {
		at, _ := acked.of(from + i)
		lat[i] = ms(at.Sub(pub))
	}
	return lat, nil
}

// latencies returns, in ms, each applied_at of the messages numbered from
// on minus its publish time pubAt[seq-from].
func latencies(ctx context.Context, env *Env, from int, pubAt []time.Time) ([]float64, error) {
	rows, err := env.Pool.Query(ctx, "SELECT seq, applied_at FROM effects WHERE seq >= $1", from)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	lat := make([]float64, 0, len(pubAt))
	for rows.Next() {
		var seq int
		var at time.Time
		if err := rows.Scan(&seq, &at); err != nil {
			return nil, err
		}
		if i := seq - from; i < len(pubAt) {
			lat = append(lat, ms(at.Sub(pubAt[i])))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(lat) == 0 {
		return nil, fmt.Errorf("no message of the latency run was found applied")
	}
	return lat, nil
}
