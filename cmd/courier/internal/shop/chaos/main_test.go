// Package chaos runs the reference shop's four services and a NATS server,
// each a process of its own, through kills, pauses and cut database
// sessions while orders are placed, then audits the shop's databases
// (TestShopUnderProcessKills).
//
//	go test ./cmd/courier/internal/shop/chaos          # 250 orders, 25 s of faults, what CI runs
//	go test ./cmd/courier/internal/shop/chaos -long    # 5,000 orders, 4 minutes of faults
//
// It needs PostgreSQL (COURIER_TEST_POSTGRES_URL); NATS runs embedded in a
// child process it can kill.
package chaos

import (
	"context"
	"flag"
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
	"github.com/courier-go/courier/internal/testenv"
)

func TestMain(m *testing.M) {
	runRole()
	flag.Parse()
	os.Exit(testenv.M(m).Run())
}

// The test binary plays every process of the run: COURIER_CHAOS_ROLE says
// which (nats or shop). Settings come in the environment.
const (
	envRole     = "COURIER_CHAOS_ROLE"
	envPG       = "COURIER_CHAOS_PG"     // role shop: the service's database
	envNATS     = "COURIER_CHAOS_NATS"   // client URL
	envDir      = "COURIER_CHAOS_DIR"    // NATS store (role nats)
	envPort     = "COURIER_CHAOS_PORT"   // NATS port (role nats)
	envPrefix   = "COURIER_CHAOS_PREFIX" // subject prefix
	envStream   = "COURIER_CHAOS_STREAM"
	envLogLevel = "COURIER_CHAOS_LOG_LEVEL" // debug to see everything
)

// runRole runs the process's role and exits; it returns when there is none.
func runRole() {
	role := os.Getenv(envRole)
	if role == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	lv := slog.LevelWarn // its log is kept in a file, shown when the test fails
	if os.Getenv(envLogLevel) == "debug" {
		lv = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv})).With("role", role, "pid", os.Getpid())
	var err error
	switch role {
	case "nats":
		err = runNATS(ctx)
	case "shop":
		err = runShopService(ctx, log)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		log.Error("role failed", "error", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// runNATS runs an embedded NATS server until SIGTERM.
func runNATS(ctx context.Context) error {
	port, _ := strconv.Atoi(os.Getenv(envPort))
	srv, err := embedded.Start(embedded.Config{Dir: os.Getenv(envDir), Port: port})
	if err != nil {
		return err
	}
	<-ctx.Done()
	srv.Shutdown()
	return nil
}

// proc is one supervised child process, this test binary in the role env
// gives it, restarted whenever it dies until the run stops it.
type proc struct {
	name    string
	env     []string
	stderr  *os.File // where its log goes
	mu      sync.Mutex
	cmd     *exec.Cmd
	hold    bool // do not restart for now
	peak    int64
	runs    int
	started time.Time
}

func (p *proc) start(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Errorf("start %s: %v", p.name, err)
		return
	}
	p.cmd = cmd
	p.runs++
	p.started = time.Now()
}

func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// sample records the process's resident set high-water mark.
func (p *proc) sample() {
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

// supervise keeps p running until stop is closed, then stops it with
// SIGTERM and reports an unclean exit.
func (p *proc) supervise(t *testing.T, stop <-chan struct{}, wg *sync.WaitGroup) {
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
func (p *proc) waitHold(stop <-chan struct{}) bool {
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
// reports an unclean exit; done has cmd's exit.
func (p *proc) stop(t *testing.T, cmd *exec.Cmd, done <-chan error) {
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	p.mu.Lock()
	fresh := time.Since(p.started) < 2*time.Second // may not handle signals yet
	p.mu.Unlock()
	select {
	case err := <-done:
		if err != nil && !fresh {
			t.Errorf("%s did not stop cleanly on SIGTERM: %v", p.name, err)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("%s did not stop within 30s of SIGTERM", p.name)
	}
}
