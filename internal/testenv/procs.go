package testenv

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/courier-go/courier/broker/nats/embedded"
)

// Proc is one supervised child process of a chaos run, restarted whenever
// it dies until the run stops it (Supervise).
type Proc struct {
	// Name names the process in the test's log.
	Name string
	// Cmdline is the program and arguments to run; empty: this test
	// binary, in the role Env gives it (RunRole).
	Cmdline []string
	// Env is added to the test's environment.
	Env []string
	// Stderr is where its log goes; nil: os.Stderr.
	Stderr *os.File

	mu      sync.Mutex
	cmd     *exec.Cmd
	hold    bool // do not restart for now
	stopped bool // the test sent SIGSTOP (not the process itself)
	killed  bool // the test sent SIGKILL to the running process
	peak    int64
	runs    int
	started time.Time
}

// start starts the process; p.mu is held.
func (p *Proc) start(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if len(p.Cmdline) > 0 {
		cmd = exec.Command(p.Cmdline[0], p.Cmdline[1:]...)
	}
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stderr = os.Stderr
	if p.Stderr != nil {
		cmd.Stderr = p.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Errorf("start %s: %v", p.Name, err)
		return
	}
	p.cmd = cmd
	p.runs++
	p.started = time.Now()
	p.killed = false
}

// Signal sends sig to the running process, if there is one.
func (p *Proc) Signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
		p.killed = p.killed || sig == syscall.SIGKILL
	}
}

// Hold keeps the supervisor from restarting the process while on is true
// (kill it, Hold(true), and it stays down until Hold(false)).
func (p *Proc) Hold(on bool) {
	p.mu.Lock()
	p.hold = on
	p.mu.Unlock()
}

// MarkStopped records whether the test itself stopped the process with
// SIGSTOP (StoppedByTest), as against the process stopping itself.
func (p *Proc) MarkStopped(on bool) {
	p.mu.Lock()
	p.stopped = on
	p.mu.Unlock()
}

// StoppedByTest reports what MarkStopped last recorded.
func (p *Proc) StoppedByTest() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

// Runs returns how many times the process was started.
func (p *Proc) Runs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs
}

// PeakKiB returns the highest resident set Sample saw, in KiB.
func (p *Proc) PeakKiB() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak
}

// State returns the process's pid and its state letter from /proc (R, S,
// T for stopped, …), or 0 and 0 when it is not running.
func (p *Proc) State() (int, byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0, 0
	}
	pid := p.cmd.Process.Pid
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0
	}
	return pid, b[i+2]
}

// Sample records the process's resident set high-water mark (PeakKiB).
func (p *Proc) Sample() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			if kb, _ := strconv.ParseInt(f[1], 10, 64); kb > p.peak {
				p.peak = kb
			}
		}
	}
}

// Supervise keeps p running until stop is closed, then stops it with
// SIGTERM and reports an unclean exit; wg waits for that.
func (p *Proc) Supervise(t *testing.T, stop <-chan struct{}, wg *sync.WaitGroup) {
	wg.Go(func() {
		for {
			p.mu.Lock()
			if !p.hold {
				p.start(t)
			}
			cmd := p.cmd
			p.mu.Unlock()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
				time.Sleep(100 * time.Millisecond)
				if !p.waitHold(stop) {
					return
				}
			case <-stop:
				p.stop(t, cmd, done)
				return
			}
		}
	})
}

// waitHold waits while p is held; false: stop was closed meanwhile.
func (p *Proc) waitHold(stop <-chan struct{}) bool {
	for {
		p.mu.Lock()
		hold := p.hold
		p.mu.Unlock()
		if !hold {
			return true
		}
		select {
		case <-stop:
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop stops cmd with SIGTERM (resuming it first, were it paused) and
// reports an unclean exit, unless the test had SIGKILLed it already (a
// kill sent just before the stop, whose exit the supervisor had not seen
// yet); done has cmd's exit.
func (p *Proc) stop(t *testing.T, cmd *exec.Cmd, done <-chan error) {
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	p.mu.Lock()
	fresh := time.Since(p.started) < 2*time.Second // may not handle signals yet
	killed := p.killed
	p.mu.Unlock()
	select {
	case err := <-done:
		if err != nil && !fresh && !killed {
			t.Errorf("%s did not stop cleanly on SIGTERM: %v", p.Name, err)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("%s did not stop within 30s of SIGTERM", p.Name)
	}
}

// Role is one role a test binary plays as a child process (RunRole): it
// runs until ctx is done, logging to log.
type Role func(ctx context.Context, log *slog.Logger) error

// RunRole runs the role of roles that the environment variable roleEnv
// names, then exits the process: 0 when the role returns nil, 3 when it
// fails (logged). It returns when roleEnv is empty. The role's context
// ends on SIGTERM or SIGINT; it logs to stderr, with its role and pid, at
// level(role), or debug when logLevelEnv says debug.
func RunRole(roleEnv, logLevelEnv string, level func(role string) slog.Level, roles map[string]Role) {
	role := os.Getenv(roleEnv)
	if role == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	lv := level(role)
	if os.Getenv(logLevelEnv) == "debug" {
		lv = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv})).With("role", role, "pid", os.Getpid())
	err := fmt.Errorf("unknown role %q", role)
	if run, ok := roles[role]; ok {
		err = run(ctx, log)
	}
	if err != nil {
		log.Error("role failed", "error", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// NATSRole returns the role that runs an embedded NATS server storing in
// the directory the environment variable dirEnv names and listening on the
// port portEnv names, until its context ends.
func NATSRole(dirEnv, portEnv string) Role {
	return func(ctx context.Context, _ *slog.Logger) error {
		port, _ := strconv.Atoi(os.Getenv(portEnv))
		srv, err := embedded.Start(embedded.Config{Dir: os.Getenv(dirEnv), Port: port})
		if err != nil {
			return err
		}
		<-ctx.Done()
		srv.Shutdown()
		return nil
	}
}

// Every calls f every d, in a goroutine of its own, until the returned
// stop is called; stop waits for a call under way and may be called more
// than once.
func Every(d time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				f()
			}
		}
	})
	return sync.OnceFunc(func() { close(done); wg.Wait() })
}
