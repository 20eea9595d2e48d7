package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/store/postgres"
)

// The handover section measures what a fault of one instance costs the
// keys it held. Four instances of the consumers section's consumer
// (inbox.ConsumerConfig.KeepOrder, Concurrency 8, its handler inserting a
// row per message), each a child process of its own (the bench binary
// again, -role instance), share the keys of a topic over 16 partitions
// with the libraries' default timing (a heartbeat every 1s, gone after 5s;
// Kafka: heartbeats every 1s and a session of 5s, where kgo's default
// session is 45s) while messages are published at handoverRate. Then one
// instance is stopped (SIGSTOP) for twice the timeout, killed (SIGKILL),
// cut off (its connections, through proxies, stop forwarding) for twice
// the timeout, or made slow (a message whose handler takes longer than
// NATS's default AckWait, 30s). Per broker and fault: the time from the
// fault to the first message of a moved key applied by another instance
// (a moved key: one whose last message before the fault the faulted
// instance applied), to the first message applied after the fault of the
// last moved key, and the longest any message waited from publish to
// applied. Every message must be applied once, each key's in order.

// The section's faults, in the order of its table.
var handoverFaults = []string{"pause", "kill", "cut", "slow"}

// The section's flags' values.
var (
	handoverBrokerList = consBrokerNames
	handoverFaultList  = handoverFaults
)

func init() {
	flag.Func("handover-brokers", "comma-separated brokers of the handover section: "+strings.Join(consBrokerNames, ", ")+" (default all)",
		func(s string) error { return pickList(s, consBrokerNames, &handoverBrokerList) })
	flag.Func("handover-faults", "comma-separated faults of the handover section: "+strings.Join(handoverFaults, ", ")+" (default all)",
		func(s string) error { return pickList(s, handoverFaults, &handoverFaultList) })
}

// pickList sets *dst to the comma-separated names of s, each one of known.
func pickList(s string, known []string, dst *[]string) error {
	list := splitList(s)
	for _, n := range list {
		if !slices.Contains(known, n) {
			return fmt.Errorf("unknown %q (want %s)", n, strings.Join(known, ", "))
		}
	}
	*dst = list
	return nil
}

// The section's settings.
const (
	handoverInstances   = 4
	handoverConcurrency = 8
	handoverKeys        = 400
	handoverRate        = 200 // messages per second
	handoverHeartbeat   = time.Second
	handoverTimeout     = 5 * time.Second
	handoverWarmup      = 3 * time.Second
	// handoverSlow is how long the slow message's handler takes: longer
	// than NATS's default AckWait (30s).
	handoverSlow = 35 * time.Second
	// handoverSlowType is the type of the message whose handler is slow.
	handoverSlowType = "Slow"
)

// handoverFigures are the section's figures; their cells are keyed by
// broker and fault ("nats/pause").
var handoverFigures = []Figure{
	{ID: "ho_first", Section: "handover", Label: "Fault to the first moved key applied by another instance", Unit: "s", LowerIsBetter: true, Digits: 2},
	{ID: "ho_all", Section: "handover", Label: "Fault to every moved key applied again", Unit: "s", LowerIsBetter: true, Digits: 2},
	{ID: "ho_moved", Section: "handover", Label: "Keys the faulted instance held", Unit: "keys", Digits: -1},
	{ID: "ho_wait", Section: "handover", Label: "Longest publish→applied", Unit: "s", LowerIsBetter: true, Digits: 2},
}

// handoverKey keys a cell of the section.
func handoverKey(broker, fault string) string { return broker + "/" + fault }

// runHandovers runs the section once: every broker (in an order that
// rotates from run to run), each with every fault.
func (b *Bench) runHandovers(ctx context.Context, try func(string, func() error), run int) {
	for _, br := range rotate(handoverBrokerList, run-1) {
		for _, f := range handoverFaultList {
			try(fmt.Sprintf("handover: %s, an instance %s", br, f), func() error { return b.runHandover(ctx, br, f) })
		}
	}
}

// instanceSpec is what a child instance is told (-role instance).
type instanceSpec struct {
	Cons     consSpec      `json:"cons"`
	DB       string        `json:"db"`       // PostgreSQL, search_path set
	Instance int           `json:"instance"` // its number, in the effects
	Slow     time.Duration `json:"slow"`     // how long a handoverSlowType message's handler takes
}

// childInstance runs an instance until SIGTERM.
func childInstance(raw string) error {
	var s instanceSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := newPool(ctx, s.DB, handoverConcurrency+2)
	if err != nil {
		return err
	}
	defer pool.Close()
	sub, err := s.Cons.subscribe(ctx)
	if err != nil {
		return err
	}
	defer sub.Close()
	db := postgres.NewDriver(pool)
	ib, err := inbox.New(db.Inbox(), consConsumer)
	if err != nil {
		return err
	}
	c, err := inbox.NewConsumer(ib, sub, db.ConsumerStore(), slowHandler(effectHandler(s.Instance), s.Slow),
		inbox.ConsumerConfig{KeepOrder: true, Concurrency: handoverConcurrency, Logger: consLogger})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// slowHandler is h, which first holds a handoverSlowType message's
// transaction for slow.
func slowHandler(h inbox.Handler[pgx.Tx], slow time.Duration) inbox.Handler[pgx.Tx] {
	return func(ctx context.Context, tx pgx.Tx, msg courier.Message) error {
		if msg.Type == handoverSlowType {
			if _, err := tx.Exec(ctx, "SELECT pg_sleep($1)", slow.Seconds()); err != nil {
				return err
			}
		}
		return h(ctx, tx, msg)
	}
}

// handoverProc is a child instance.
type handoverProc struct {
	cmd     *exec.Cmd
	done    chan struct{}
	proxies []*freezeProxy // between it and the broker
}

// startInstances starts the measurement's instances, the first behind
// proxies when it is to be cut off.
func startInstances(env *Env, tgt *consTarget, cut bool) ([]*handoverProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	db, err := withParams(env.URL, "application_name", "bench-handover-"+env.token)
	if err != nil {
		return nil, err
	}
	var procs []*handoverProc
	for i := range handoverInstances {
		p := &handoverProc{done: make(chan struct{})}
		spec := instanceSpec{Cons: tgt.spec, DB: db, Instance: i + 1, Slow: handoverSlow}
		if i == 0 && cut {
			if spec.Cons.Dial, p.proxies, err = proxiesFor(tgt.spec); err != nil {
				stopInstances(procs)
				return nil, err
			}
		}
		raw, _ := json.Marshal(spec)
		p.cmd = exec.Command(exe, "-role", "instance", "-spec", string(raw))
		p.cmd.Stderr = os.Stderr
		if err := p.cmd.Start(); err != nil {
			stopInstances(procs)
			return nil, err
		}
		go func() { _ = p.cmd.Wait(); close(p.done) }()
		procs = append(procs, p)
	}
	return procs, nil
}

// proxiesFor starts a proxy in front of each of spec's broker addresses.
func proxiesFor(spec consSpec) (map[string]string, []*freezeProxy, error) {
	addrs, err := spec.addrs()
	if err != nil {
		return nil, nil, err
	}
	dial := map[string]string{}
	var proxies []*freezeProxy
	for _, a := range addrs {
		p, err := startProxy(a)
		if err != nil {
			for _, p := range proxies {
				p.close()
			}
			return nil, nil, err
		}
		dial[a] = p.addr()
		proxies = append(proxies, p)
	}
	return dial, proxies, nil
}

// stopInstances stops the instances (SIGCONT first: one may be stopped)
// with SIGTERM, killing those that did not stop within 30s.
func stopInstances(procs []*handoverProc) {
	for _, p := range procs {
		for _, x := range p.proxies {
			x.thaw()
		}
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			logf("warning: an instance did not stop within 30s of SIGTERM; killed")
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		for _, x := range p.proxies {
			x.close()
		}
	}
}

// handoverProducer publishes message after message at handoverRate,
// recording when each was handed to the publisher.
type handoverProducer struct {
	mu     sync.Mutex
	at     []time.Time // message i's publish time
	slow   bool        // the next message is the slow one
	slowAt int         // the slow message's number; -1: none
	stop   chan struct{}
	done   chan struct{}
	failed error
}

// produce publishes until stop is closed, a call of handoverRate/50
// consecutive messages every 20ms, each call once the last was
// acknowledged (a key's messages stay in order).
func (p *handoverProducer) produce(ctx context.Context, tgt *consTarget) {
	defer close(p.done)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		p.mu.Lock()
		from, now, slow := len(p.at), time.Now(), p.slow
		msgs := make([]courier.Message, 0, handoverRate/50)
		for i := from; i < from+handoverRate/50; i++ {
			m := consMessage(i, handoverKeys)
			if slow && i == from {
				m.Type, p.slowAt = handoverSlowType, i
			}
			msgs = append(msgs, m)
			p.at = append(p.at, now)
		}
		p.slow = false
		p.mu.Unlock()
		if err := publishAll(ctx, tgt.pub, msgs); err != nil {
			p.mu.Lock()
			p.failed = err
			p.mu.Unlock()
			return
		}
	}
}

// published stops the producer and returns when each message was
// published.
func (p *handoverProducer) published() ([]time.Time, error) {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.at, p.failed
}

// runHandover makes one measurement of fault on brokerName.
func (b *Bench) runHandover(ctx context.Context, brokerName, fault string) error {
	br, err := consBrokerByName(brokerName)
	if err != nil {
		return err
	}
	key := handoverKey(brokerName, fault)
	s := consSettings{keys: handoverKeys, partitions: consPartitions, shape: consShape{concurrency: handoverConcurrency},
		heartbeat: handoverHeartbeat, timeout: handoverTimeout}
	env, tgt, err := b.openConsumers(ctx, br, "handover", s, "ho_first", key)
	if err != nil || tgt == nil {
		return err
	}
	defer env.Close()
	defer tgt.close()
	procs, err := startInstances(env, tgt, fault == "cut")
	if err != nil {
		return err
	}
	defer stopInstances(procs)
	p := &handoverProducer{stop: make(chan struct{}), done: make(chan struct{}), slowAt: -1}
	go p.produce(ctx, tgt)
	defer p.published()
	if err := waitEveryInstance(ctx, env); err != nil {
		return err
	}
	time.Sleep(handoverWarmup) // the steady state the fault interrupts
	t0 := time.Now()
	end := makeFault(fault, procs, p)
	time.Sleep(time.Until(end.Add(3 * handoverTimeout))) // until the keys have moved, and back
	at, err := p.published()
	if err != nil {
		return err
	}
	rows, err := waitEffects(ctx, env, len(at))
	if err != nil {
		return err
	}
	r, err := analyzeHandover(rows, at, t0, p.slowAt)
	if err != nil {
		return err
	}
	if fault != "slow" && (r.moved == 0 || r.firstMissed) {
		return fmt.Errorf("the faulted instance held %d keys, and no other instance applied one after the fault", r.moved)
	}
	logf("  %s: %d keys held by the faulted instance, the first applied by another %.2fs after the fault, all %.2fs after; longest wait %.2fs",
		key, r.moved, r.first.Seconds(), r.all.Seconds(), r.wait.Seconds())
	if fault != "slow" { // nothing moves: the slow message's key waits, alone
		b.results.Add("ho_first", key, r.first.Seconds())
		b.results.Add("ho_all", key, r.all.Seconds())
		b.results.Add("ho_moved", key, float64(r.moved))
	}
	b.results.Add("ho_wait", key, r.wait.Seconds())
	return nil
}

// waitEveryInstance waits (at most a minute) until every instance has
// applied a message.
func waitEveryInstance(ctx context.Context, env *Env) error {
	var n int
	err := waitFor(ctx, time.Minute, 50*time.Millisecond, func() (bool, error) {
		err := env.Pool.QueryRow(ctx, "SELECT count(DISTINCT instance) FROM effects").Scan(&n)
		return n == handoverInstances, err
	})
	if err != nil {
		return fmt.Errorf("%d of %d instances applied a message: %w", n, handoverInstances, err)
	}
	return nil
}

// effectRow is a row of effects: key k's message seq, applied by instance
// at.
type effectRow struct {
	k        string
	seq      int
	instance int
	at       time.Time
}

// waitEffects waits until n messages were applied (failing once none is
// for consStall) and returns the effects in the order inserted.
func waitEffects(ctx context.Context, env *Env, n int) ([]effectRow, error) {
	last, since := -1, time.Now()
	for {
		var got int
		if err := env.Pool.QueryRow(ctx, "SELECT count(DISTINCT seq) FROM effects").Scan(&got); err != nil {
			return nil, err
		}
		if got >= n {
			break
		}
		if got != last {
			last, since = got, time.Now()
		}
		if time.Since(since) > consStall {
			return nil, fmt.Errorf("%d of %d messages applied, and none more for %s", got, n, consStall)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r, err := env.Pool.Query(ctx, "SELECT k, seq, instance, applied_at FROM effects ORDER BY n")
	if err != nil {
		return nil, err
	}
	var rows []effectRow
	var e effectRow
	_, err = pgx.ForEachRow(r, []any{&e.k, &e.seq, &e.instance, &e.at}, func() error { rows = append(rows, e); return nil })
	return rows, err
}

// handoverResult is what a fault cost.
type handoverResult struct {
	moved       int           // keys the faulted instance held
	first, all  time.Duration // to the first moved key applied by another instance; to every moved key applied again
	wait        time.Duration // the longest publish→applied of a message not of the slow message's key
	firstMissed bool          // no moved key was applied by another instance
}

// analyzeHandover checks that each of the messages published at at was
// applied once, each key's in order, and measures what the fault at t0 on
// instance 1 cost; slowAt is the slow message's number (-1: none).
func analyzeHandover(rows []effectRow, at []time.Time, t0 time.Time, slowAt int) (handoverResult, error) {
	var r handoverResult
	seen := make([]int, len(at))
	due := map[string]int{}
	held := map[string]int{} // key -> the instance that applied its last message before t0
	firstAfter := map[string]time.Time{}
	slowKey := ""
	if slowAt >= 0 {
		slowKey = keyFor(slowAt, handoverKeys)
	}
	for _, e := range rows {
		if e.seq < 0 || e.seq >= len(at) {
			return r, fmt.Errorf("message %d applied, of %d published", e.seq, len(at))
		}
		if seen[e.seq]++; seen[e.seq] > 1 {
			return r, fmt.Errorf("message %d applied twice", e.seq)
		}
		want, ok := due[e.k]
		if !ok {
			want = e.seq % handoverKeys
		}
		if e.seq != want {
			return r, fmt.Errorf("key %s: message %d applied where %d was due", e.k, e.seq, want)
		}
		due[e.k] = e.seq + handoverKeys
		if e.at.Before(t0) {
			held[e.k] = e.instance
		} else if _, ok := firstAfter[e.k]; !ok {
			firstAfter[e.k] = e.at
		}
		if e.k != slowKey {
			r.wait = max(r.wait, e.at.Sub(at[e.seq]))
		}
	}
	var first time.Time
	for _, e := range rows {
		if held[e.k] == 1 && e.instance != 1 && !e.at.Before(t0) && (first.IsZero() || e.at.Before(first)) {
			first = e.at
		}
	}
	for k, in := range held {
		if in == 1 {
			r.moved++
			r.all = max(r.all, firstAfter[k].Sub(t0))
		}
	}
	r.first, r.firstMissed = first.Sub(t0), first.IsZero()
	return r, nil
}

// makeFault makes fault happen to the first instance and returns when it
// ends (at once for a kill).
func makeFault(fault string, procs []*handoverProc, p *handoverProducer) time.Time {
	victim := procs[0]
	switch fault {
	case "pause":
		_ = victim.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(2 * handoverTimeout)
		_ = victim.cmd.Process.Signal(syscall.SIGCONT)
	case "kill":
		_ = victim.cmd.Process.Kill()
	case "cut":
		for _, x := range victim.proxies {
			x.freeze()
		}
		time.Sleep(2 * handoverTimeout)
		for _, x := range victim.proxies {
			x.thaw()
		}
	case "slow":
		p.mu.Lock()
		p.slow = true
		p.mu.Unlock()
		return time.Now().Add(handoverSlow)
	}
	return time.Now()
}
