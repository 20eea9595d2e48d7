package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvNATSServer is the path of a current nats-server binary, built from the
// github.com/nats-io/nats-server/v2 module at the version go.mod names:
//
//	go build -o bin/nats-server github.com/nats-io/nats-server/v2
//	export COURIER_TEST_NATS_SERVER=$PWD/bin/nats-server
//
// Tests that run such a server as a process of their own (to kill it, to
// freeze it, to build a cluster, or for what only a current release does)
// need it. .ci/run builds it and sets it.
const EnvNATSServer = "COURIER_TEST_NATS_SERVER"

// NATSServerBinary returns the path in EnvNATSServer, skipping the test when
// it is unset (failing it when services are required).
func NATSServerBinary(t testing.TB) string {
	t.Helper()
	bin := Need(t, EnvNATSServer)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s=%s: %v; build it with: go build -o bin/nats-server github.com/nats-io/nats-server/v2", EnvNATSServer, bin, err)
	}
	return bin
}

// NATSServerConfig is what StartNATSServer writes into the server's
// configuration file.
type NATSServerConfig struct {
	// Name is the server's name; default "n" + its port.
	Name string
	// Port is the client port; 0 picks a free one, kept across restarts.
	Port int
	// Dir is the JetStream store directory; default a temporary one, kept
	// across restarts.
	Dir string
	// SyncAlways sets JetStream's sync_interval to always: every write is
	// on disk before it is acknowledged. The server's default syncs every
	// two minutes.
	SyncAlways bool
	// Extra is appended to the configuration file as it is (a cluster
	// block, limits).
	Extra string
}

// NATSProcess is a nats-server running as a child process of the test, so
// the test can kill it, freeze it and start it again. It is killed when the
// test ends.
type NATSProcess struct {
	// URL is the client URL, nats://127.0.0.1:port.
	URL string
	// Config is the configuration the process runs with (Port and Dir
	// filled in).
	Config NATSServerConfig

	t    testing.TB
	bin  string
	conf string
	cmd  *exec.Cmd
	done chan struct{}
}

// FreePort returns a loopback TCP port that was free a moment ago, and that
// it has not returned before in this process: the kernel may hand a port
// that was just closed out again, and a server given one port twice (a
// client and a cluster port, say) fails to start.
func FreePort(t testing.TB) int {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		Must(t, err, "find a free port")
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		handedOut.Lock()
		fresh := !handedOut.ports[port]
		handedOut.ports[port] = true
		handedOut.Unlock()
		if fresh {
			return port
		}
	}
}

// handedOut is every port FreePort returned.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// StartNATSServer starts the nats-server of EnvNATSServer with JetStream
// and cfg, and waits until it accepts connections.
func StartNATSServer(t testing.TB, cfg NATSServerConfig) *NATSProcess {
	t.Helper()
	bin := NATSServerBinary(t)
	if cfg.Port == 0 {
		cfg.Port = FreePort(t)
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Name == "" {
		cfg.Name = fmt.Sprintf("n%d", cfg.Port)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %q\nlisten: \"127.0.0.1:%d\"\n", cfg.Name, cfg.Port)
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n", cfg.Dir)
	if cfg.SyncAlways {
		b.WriteString("  sync_interval: always\n")
	}
	b.WriteString("}\n")
	b.WriteString(cfg.Extra)
	conf := filepath.Join(t.TempDir(), cfg.Name+".conf")
	Must(t, os.WriteFile(conf, []byte(b.String()), 0o600), "write nats-server config")
	p := &NATSProcess{URL: fmt.Sprintf("nats://127.0.0.1:%d", cfg.Port), Config: cfg, t: t, bin: bin, conf: conf}
	p.Start()
	t.Cleanup(p.Kill)
	return p
}

// Start starts the process again after Kill, on the same port and store,
// and waits until it accepts connections.
func (p *NATSProcess) Start() {
	p.t.Helper()
	log := filepath.Join(filepath.Dir(p.conf), p.Config.Name+".log")
	cmd := exec.Command(p.bin, "-c", p.conf, "-l", log)
	Must(p.t, cmd.Start(), "start nats-server")
	p.cmd, p.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(p.done)
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p.Config.Port), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-p.done:
			out, _ := os.ReadFile(log)
			p.t.Fatalf("nats-server %s exited at start: %s", p.Config.Name, out)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("nats-server %s does not accept connections on port %d after 20s", p.Config.Name, p.Config.Port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill kills the process with SIGKILL (after Cont, should it be frozen) and
// waits for it to exit. Killing a process that is not running does nothing.
func (p *NATSProcess) Kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	<-p.done
	p.cmd = nil
}

// Freeze stops the process with SIGSTOP: it holds its connections but
// answers nothing, as a server cut off by a partition or stalled would.
func (p *NATSProcess) Freeze() {
	if p.cmd != nil {
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Thaw resumes a frozen process with SIGCONT.
func (p *NATSProcess) Thaw() {
	if p.cmd != nil {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Running reports whether the process was started and has not exited.
func (p *NATSProcess) Running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}
