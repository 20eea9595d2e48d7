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
	var mu sync.Mutex
	arrivals := make(map[string]time.Time, total)
	sub, err := nc.Subscribe(env.Prefix+">", func(m *natsgo.Msg) {
		now := time.Now()
		id := m.Header.Get(jetstream.MsgIDHeader)
		mu.Lock()
		if _, dup := arrivals[id]; !dup {
			arrivals[id] = now
		}
		mu.Unlock()
	})
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		return err
	}

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
	arrived := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(arrivals)
	}
	_ = waitFor(ctx, b.cfg.latencyDrainTimeout, 10*time.Millisecond, func() (bool, error) { return arrived() >= total, nil })

	mu.Lock()
	lat := make([]float64, 0, total-warmupN)
	missing := 0
	for _, c := range commits[warmupN:] {
		at, ok := arrivals[c.id]
		if !ok {
			missing++
			continue
		}
		lat = append(lat, max(0, at.Sub(c.at).Seconds()*1000))
	}
	mu.Unlock()
	if len(lat) == 0 {
		return fmt.Errorf("no message arrived")
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
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
