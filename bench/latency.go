package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// latencyWriters is how many writer goroutines share the offered load
// (-latency-writers).
var latencyWriters = 16

// latencySyncCommit is synchronous_commit for the latency section's writer
// sessions (-latency-sync-commit): "off" lets a machine with slow fsyncs
// offer more commits per second.
var latencySyncCommit = "on"

// commitRecord is one written message: its id and when Commit returned.
type commitRecord struct {
	id string
	at time.Time
}

// runLatency offers rate messages/s, one message per transaction, to a
// running relay of system for warmup+window, and records the time from
// each Commit returning to a core NATS subscriber receiving the message
// (p50, p99, p999 over the window; warm-up messages are discarded).
func (b *Bench) runLatency(ctx context.Context, system string, rate int) error {
	sys, err := systemByName(system)
	if err != nil {
		return err
	}
	return b.latencyOf(ctx, sys, system, rate)
}

// latencyOf is runLatency of sys, its results recorded under system.
func (b *Bench) latencyOf(ctx context.Context, sys System, system string, rate int) error {
	env, err := newEnv(ctx, b.admin, b.cfg.pgURL, b.cfg.natsURL, system)
	if err != nil {
		return err
	}
	defer env.Close()
	if err := sys.Prepare(ctx, env); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	w, err := sys.NewWriter(ctx, env)
	if err != nil {
		return err
	}
	// The writers' own pool, with synchronous_commit as asked (the relay's
	// sessions keep the server's setting).
	wcfg, err := pgxpool.ParseConfig(env.URL)
	if err != nil {
		return err
	}
	wcfg.MaxConns = int32(latencyWriters + 2)
	wcfg.ConnConfig.RuntimeParams["synchronous_commit"] = latencySyncCommit
	wpool, err := pgxpool.NewWithConfig(ctx, wcfg)
	if err != nil {
		return err
	}
	defer wpool.Close()
	warmupN := int(float64(rate) * b.cfg.latencyWarmup.Seconds())
	total := warmupN + int(float64(rate)*b.cfg.latencyWindow.Seconds())

	// The subscriber has its own connection and never lets messages go.
	nc, err := natsgo.Connect(b.cfg.natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	arr, err := subscribeArrivals(nc, env.Prefix+">", total)
	if err != nil {
		return err
	}
	defer arr.Close()

	r, err := sys.StartRelay(ctx, env)
	if err != nil {
		return err
	}
	defer func() { _ = r.Stop() }()
	time.Sleep(500 * time.Millisecond) // let the relay go idle

	// A pacer hands out turns at the offered rate; writers take them. If
	// writers fall behind, turns queue up and the pacer does not slow down,
	// so the offered load holds as long as the writers can commit it.
	commits := make([]commitRecord, total)
	turns := make(chan int, total)
	start := time.Now()
	go func() {
		defer close(turns)
		for i := range total {
			due := start.Add(time.Duration(i) * time.Second / time.Duration(rate))
			if d := time.Until(due); d > 20*time.Microsecond {
				time.Sleep(d)
			}
			select {
			case turns <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	var writers sync.WaitGroup
	var writeErr error
	var errOnce sync.Once
	for range latencyWriters {
		writers.Go(func() {
			for i := range turns {
				var id string
				err := pgx.BeginFunc(ctx, wpool, func(tx pgx.Tx) error {
					var err error
					id, err = w.Write(ctx, tx, keyFor(i, 10000), payloadFor(i))
					return err
				})
				if err != nil {
					errOnce.Do(func() { writeErr = err })
					for range turns { // stop the pacer
					}
					return
				}
				commits[i] = commitRecord{id: id, at: time.Now()}
			}
		})
	}
	writers.Wait()
	if writeErr != nil {
		return fmt.Errorf("writer: %w", writeErr)
	}
	offered := float64(total) / time.Since(start).Seconds()

	// Wait for every message (a relay that cannot keep up works off its
	// backlog here).
	_ = waitFor(ctx, b.cfg.latencyDrainTimeout, 10*time.Millisecond, func() (bool, error) { return arr.count() >= total, nil })

	lat, missing := arr.latencies(commits[warmupN:])
	if len(lat) == 0 {
		return fmt.Errorf("no message arrived")
	}
	q := func(p float64) float64 { return quantile(lat, p) }
	fig := fmt.Sprintf("lat%d_", rate)
	if offered < 0.95*float64(rate) {
		for _, p := range []string{"p50", "p99", "p999"} {
			b.results.Flag(fig+p, system, fmt.Sprintf("offered load not held: the writers committed less than 95%% of %s msg/s (see the \"Load actually offered\" row)", thousands(int64(rate))))
		}
	}
	if missing > 0 {
		for _, p := range []string{"p50", "p99", "p999"} {
			b.results.Flag(fig+p, system, fmt.Sprintf("%d of %d messages had not arrived %s after the last commit; percentiles of the others (understated)",
				missing, total-warmupN, b.cfg.latencyDrainTimeout))
		}
	}
	b.results.Add(fig+"p50", system, q(0.50))
	b.results.Add(fig+"p99", system, q(0.99))
	b.results.Add(fig+"p999", system, q(0.999))
	b.results.Add(fig+"offered", system, offered)
	return nil
}

// arrivals records when each message, by its Nats-Msg-Id, first reaches a
// core NATS subscriber: the latency measurements' receiving end.
type arrivals struct {
	mu  sync.Mutex
	at  map[string]time.Time
	sub *natsgo.Subscription
}

// subscribeArrivals subscribes to subject on nc (a connection of its own,
// so that the relay's traffic does not delay it) with no pending limits;
// capacity sizes the record.
func subscribeArrivals(nc *natsgo.Conn, subject string, capacity int) (*arrivals, error) {
	a := &arrivals{at: make(map[string]time.Time, capacity)}
	var err error
	a.sub, err = nc.Subscribe(subject, func(m *natsgo.Msg) {
		now := time.Now()
		id := m.Header.Get(jetstream.MsgIDHeader)
		a.mu.Lock()
		if _, dup := a.at[id]; !dup {
			a.at[id] = now
		}
		a.mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	_ = a.sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		_ = a.sub.Unsubscribe()
		return nil, err
	}
	return a, nil
}

// count returns the number of distinct messages received.
func (a *arrivals) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.at)
}

// latencies returns the commit→arrival times of commits in milliseconds,
// sorted, and how many of them have not arrived.
func (a *arrivals) latencies(commits []commitRecord) (lat []float64, missing int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	lat = make([]float64, 0, len(commits))
	for _, c := range commits {
		at, ok := a.at[c.id]
		if !ok {
			missing++
			continue
		}
		lat = append(lat, max(0, at.Sub(c.at).Seconds()*1000))
	}
	slices.Sort(lat)
	return lat, missing
}

// Close unsubscribes.
func (a *arrivals) Close() { _ = a.sub.Unsubscribe() }

// quantile returns the p quantile (0 to 1) of sorted values: the value
// below which a fraction p of them lie.
func quantile(sorted []float64, p float64) float64 {
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}
