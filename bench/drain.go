package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	natsgo "github.com/nats-io/nats.go"
)

// drainSpec is what the parent tells a drain child.
type drainSpec struct {
	// Env locates the system's data and stream.
	Env Env `json:"env"`
	// N is the number of messages to drain.
	N int `json:"n"`
	// DatabaseURL is the database (a store/dburl URL) of a Courier relay
	// in the dialects section; empty: Env.System's own relay.
	DatabaseURL string `json:"database_url,omitempty"`
	// BrokerURL is the broker (a broker/brokerurl URL) of a Courier relay
	// in the brokers section, on Env's schema; empty: Env's stream.
	BrokerURL string `json:"broker_url,omitempty"`
	// BrokerSecrets sign the requests of a webhook BrokerURL.
	BrokerSecrets []string `json:"broker_secrets,omitempty"`
}

// drainResult is what a drain child reports.
type drainResult struct {
	// Elapsed is from starting the relay to the last message published and
	// recorded.
	Elapsed time.Duration `json:"elapsed"`
	// Published is the relay's count at the end.
	Published int64 `json:"published"`
	// CPU is the child's user+sys time during the drain.
	CPU time.Duration `json:"cpu"`
	// PeakRSS is the child's peak resident set size in bytes (VmHWM).
	PeakRSS int64 `json:"peak_rss"`
	// BrokerCalls is how many times the relay called its publisher, and
	// KeepsKeyOrder what the publisher said about keeping a key's order at
	// the end (broker.OrderKeeper): a Courier relay in the brokers section
	// only.
	BrokerCalls   int64 `json:"broker_calls,omitempty"`
	KeepsKeyOrder bool  `json:"keeps_key_order,omitempty"`
	// Error is set when the drain failed.
	Error string `json:"error,omitempty"`
}

// Child protocol lines on the child's stdout / stdin.
const (
	lineReady = "READY"
	lineGo    = "GO"
)

// runDrain measures one drain of system: n pre-filled messages over keys
// keys, relayed by a child process. With cpu, it also records the CPU and
// memory figures.
func (b *Bench) runDrain(ctx context.Context, system string, keys int, cpu bool) error {
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
	n := b.cfg.drainN
	if err := sys.Fill(ctx, env, n, keys); err != nil {
		return err
	}
	rd, err := b.drainInChild(ctx, drainSpec{Env: *env, N: n}, b.backendsProbe(env), b.natsProbe())
	if err != nil {
		return err
	}
	if err := b.checkStream(ctx, env, n); err != nil {
		b.results.Flag(drainFigure(keys), system, err.Error())
	}
	b.results.Add(drainFigure(keys), system, float64(n)/rd.Elapsed.Seconds())
	if !cpu {
		return nil
	}
	per := 100000 / float64(n)
	b.results.Add("cpu_relay", system, rd.CPU.Seconds()*per)
	if rd.PeakRSS > 0 {
		b.results.Add("rss_relay", system, float64(rd.PeakRSS)/(1<<20))
	}
	if rd.dbOK {
		b.results.Add("cpu_pg", system, rd.dbCPU.Seconds()*per)
	}
	if rd.brokerOK {
		b.results.Add("cpu_nats", system, rd.brokerCPU.Seconds()*per)
	}
	return nil
}

// drainReading is a drain child's report with the CPU that the processes
// serving it used meanwhile.
type drainReading struct {
	drainResult
	// dbCPU is the database processes' CPU (dbOK: it was read).
	dbCPU time.Duration
	dbOK  bool
	// brokerCPU is the broker's CPU (brokerOK: it was read).
	brokerCPU time.Duration
	brokerOK  bool
}

// cpuProbe reads the CPU time of the processes serving a drain, before and
// after it.
type cpuProbe func(context.Context) (cpuSnapshot, error)

// pidProbe reads the CPU time of process pid; nil when pid is 0 (the
// process was not found).
func pidProbe(pid int) cpuProbe {
	if pid == 0 {
		return nil
	}
	return func(context.Context) (cpuSnapshot, error) {
		c, err := procCPU(pid)
		return cpuSnapshot{pid: c}, err
	}
}

// selfProbe reads this process's own CPU time (getrusage), for a broker or
// receiver that runs inside the parent while the child drains.
func selfProbe(context.Context) (cpuSnapshot, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return nil, err
	}
	return cpuSnapshot{os.Getpid(): rusageCPU(&ru)}, nil
}

// natsProbe reads nats-server's CPU time, nil when its process was not
// found.
func (b *Bench) natsProbe() cpuProbe { return pidProbe(b.natsPID) }

// backendsProbe reads the CPU time of the PostgreSQL backends serving env's
// relay.
func (b *Bench) backendsProbe(env *Env) cpuProbe {
	return func(ctx context.Context) (cpuSnapshot, error) { return backendsCPU(ctx, b.admin, env.AppName) }
}

// drainInChild runs one drain in a child process (the binary re-executed
// with -role drain) and returns its report. dbCPU and brokerCPU, when not
// nil, read the CPU of the database processes serving the relay and of the
// broker's; they are read right before the child is told to start and right
// after it reported.
func (b *Bench) drainInChild(ctx context.Context, spec drainSpec, dbCPU, brokerCPU cpuProbe) (drainReading, error) {
	var rd drainReading
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return rd, err
	}
	exe, err := os.Executable()
	if err != nil {
		return rd, err
	}
	cmd := exec.CommandContext(ctx, exe, "-role", "drain", "-spec", string(specJSON))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return rd, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return rd, err
	}
	if err := cmd.Start(); err != nil {
		return rd, err
	}
	waited := false
	defer func() {
		if waited {
			return
		}
		_ = stdin.Close()
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func(timeout time.Duration) (string, error) {
		select {
		case l, ok := <-lines:
			if !ok {
				return "", errors.New("drain child exited early")
			}
			return l, nil
		case <-time.After(timeout):
			return "", fmt.Errorf("drain child silent for %s", timeout)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if l, err := next(time.Minute); err != nil || l != lineReady {
		return rd, fmt.Errorf("drain child not ready: %q %v", l, err)
	}
	var dbStart, dbEnd, brokerStart, brokerEnd cpuSnapshot
	var errDB, errDB2, errBroker, errBroker2 error
	if dbCPU != nil {
		dbStart, errDB = dbCPU(ctx)
	}
	if brokerCPU != nil {
		brokerStart, errBroker = brokerCPU(ctx)
	}
	if _, err := io.WriteString(stdin, lineGo+"\n"); err != nil {
		return rd, err
	}
	l, err := next(15 * time.Minute)
	if err != nil {
		return rd, err
	}
	if dbCPU != nil {
		dbEnd, errDB2 = dbCPU(ctx)
	}
	if brokerCPU != nil {
		brokerEnd, errBroker2 = brokerCPU(ctx)
	}
	if err := json.Unmarshal([]byte(l), &rd.drainResult); err != nil {
		return rd, fmt.Errorf("drain child said %q: %w", l, err)
	}
	if rd.Error != "" {
		return rd, fmt.Errorf("drain child: %s", rd.Error)
	}
	_ = stdin.Close() // the child stops its relay and exits
	waitErr := cmd.Wait()
	waited = true
	if waitErr != nil {
		return rd, fmt.Errorf("drain child: %w", waitErr)
	}
	if dbCPU != nil && errDB == nil && errDB2 == nil && len(dbEnd) > 0 {
		rd.dbCPU, rd.dbOK = cpuDelta(dbStart, dbEnd), true
	}
	if brokerCPU != nil && errBroker == nil && errBroker2 == nil && len(brokerEnd) > 0 {
		rd.brokerCPU, rd.brokerOK = cpuDelta(brokerStart, brokerEnd), true
	}
	return rd, nil
}

func drainFigure(keys int) string { return fmt.Sprintf("drain_keys%d", keys) }

// checkStream verifies that the stream holds exactly n messages.
func (b *Bench) checkStream(ctx context.Context, env *Env, n int) error {
	nc, err := natsgo.Connect(env.NATSURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	got, err := streamCount(ctx, nc, env.Stream)
	if err != nil {
		return err
	}
	if got != uint64(n) {
		return fmt.Errorf("stream holds %d messages, want %d", got, n)
	}
	return nil
}

// childDrain is the drain child's main: it waits for GO, starts the relay,
// waits until spec.N messages are published and recorded, reports, and
// exits when its stdin closes.
func childDrain(spec string) error {
	var s drainSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		return err
	}
	start, err := relayStarter(&s)
	if err != nil {
		return err
	}
	in := bufio.NewReader(os.Stdin)
	fmt.Println(lineReady)
	l, err := in.ReadString('\n')
	if err != nil || strings.TrimSpace(l) != lineGo {
		return fmt.Errorf("expected %s, got %q (%v)", lineGo, l, err)
	}
	res, r := drainWith(start, &s)
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	_, _ = io.Copy(io.Discard, in) // until the parent closes stdin
	if r != nil {
		return r.Stop()
	}
	return nil
}

// relayStarter returns what starts the relay of a drain child's spec: a
// Courier relay on the spec's store dialect or to the spec's broker, or the
// relay of Env.System.
func relayStarter(s *drainSpec) (func(context.Context) (Relay, error), error) {
	if s.DatabaseURL != "" {
		return dialectRelayStarter(s)
	}
	if s.BrokerURL != "" {
		return brokerRelayStarter(s)
	}
	sys, err := systemByName(s.Env.System)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (Relay, error) { return sys.StartRelay(ctx, &s.Env) }, nil
}

// drainOnce runs the relay until spec.N messages are through.
func drainOnce(sys System, s *drainSpec) (drainResult, Relay) {
	return drainWith(func(ctx context.Context) (Relay, error) { return sys.StartRelay(ctx, &s.Env) }, s)
}

// drainWith starts a relay with startRelay and runs it until spec.N
// messages are through.
func drainWith(startRelay func(context.Context) (Relay, error), s *drainSpec) (drainResult, Relay) {
	ctx := context.Background()
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	r, err := startRelay(ctx)
	if err != nil {
		return drainResult{Error: err.Error()}, nil
	}
	n := int64(s.N)
	err = waitFor(ctx, 10*time.Minute, time.Millisecond, func() (bool, error) { return r.Published() >= n, nil })
	if err == nil {
		err = r.Settle(ctx, n)
	}
	elapsed := time.Since(start)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	res := drainResult{Elapsed: elapsed, Published: r.Published(), CPU: rusageCPU(&ru1) - rusageCPU(&ru0), PeakRSS: peakRSS()}
	if c, ok := r.(interface{ brokerCalls() (int64, bool, bool) }); ok {
		if calls, keeps, ok := c.brokerCalls(); ok {
			res.BrokerCalls, res.KeepsKeyOrder = calls, keeps
		}
	}
	if err != nil {
		res.Error = fmt.Sprintf("after %d of %d messages: %v", r.Published(), n, err)
	}
	return res, r
}

// rusageCPU is user+sys time.
func rusageCPU(ru *syscall.Rusage) time.Duration {
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSS returns this process's peak resident set size in bytes from
// /proc/self/status (VmHWM), or 0. getrusage's ru_maxrss cannot serve here:
// Go starts children with vfork, so when the child execs, the kernel records
// the parent's peak RSS as the child's maxrss.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			var kb int64
			if _, err := fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
