package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// EnvRabbitMQServer is the path of RabbitMQ's server script
// (rabbitmq-server, with rabbitmqctl beside it). Tests that stop RabbitMQ,
// raise its memory alarm or change its settings run a node of their own
// from it, so that the machine's broker, which other packages' tests use at
// the same time, is never disturbed. .ci/run sets it.
const EnvRabbitMQServer = "COURIER_TEST_RABBITMQ_SERVER"

// RabbitMQServer is a RabbitMQ node the test runs as a child process, with
// a node name, ports, data directory and Erlang cookie of its own. It is
// stopped, and its directory removed, when the test ends.
type RabbitMQServer struct {
	// URL is its amqp:// URL as guest, such as amqp://guest:guest@127.0.0.1:41672/.
	URL string

	t    testing.TB
	node string
	dir  string
	ctl  string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRabbitMQ starts a RabbitMQ node and waits until it accepts AMQP
// connections and its application runs (rabbitmqctl await_startup).
func StartRabbitMQ(t testing.TB) *RabbitMQServer {
	t.Helper()
	server := Need(t, EnvRabbitMQServer)
	dir, err := os.MkdirTemp("", "courier-rabbitmq-")
	Must(t, err, "temp dir")
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	port, dist := FreePort(t), FreePort(t)
	s := &RabbitMQServer{
		URL:  fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", port),
		t:    t,
		node: fmt.Sprintf("courier-%d@localhost", port),
		dir:  dir,
		ctl:  filepath.Join(filepath.Dir(server), "rabbitmqctl"),
	}
	// Written by the test, so that the machine's files (rabbitmq-env.conf
	// names the machine's node) do not apply.
	files := map[string]string{
		"rabbitmq.conf":     fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\nloopback_users = none\n", port),
		"enabled_plugins":   "[].\n",
		"rabbitmq-env.conf": "",
	}
	for name, body := range files {
		Must(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600), "write "+name)
	}
	cmd := exec.Command(server)
	cmd.Env = append(s.env(),
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(dist),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "rabbitmq.pid"),
	)
	out, err := os.Create(filepath.Join(dir, "server.out"))
	Must(t, err, "server output")
	cmd.Stdout, cmd.Stderr = out, out
	// A group of its own: the script starts Erlang's runtime, which starts
	// helpers; the whole group is killed if the node does not stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	Must(t, cmd.Start(), "start rabbitmq-server")
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); _ = out.Close(); close(s.done) }()
	t.Cleanup(s.stop)

	// The listener opens as the node boots; rabbitmqctl (an Erlang
	// runtime of its own, a second of CPU) runs once it is there.
	deadline := time.Now().Add(90 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			_ = conn.Close()
			break
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "server.out"))
			t.Fatalf("the RabbitMQ node %s exited at start:\n%s", s.node, log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the RabbitMQ node %s does not listen on port %d after 90s: %v", s.node, port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.Ctl("await_startup")
	return s
}

// env is the environment of the node and of rabbitmqctl run against it:
// the node's name and its Erlang cookie (in HOME) are the test's own.
func (s *RabbitMQServer) env() []string {
	return append(os.Environ(),
		"HOME="+s.dir,
		"RABBITMQ_NODENAME="+s.node,
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(s.dir, "rabbitmq-env.conf"),
	)
}

// Ctl runs rabbitmqctl against the node with args, such as "stop_app",
// and returns what it printed, failing the test on an error.
func (s *RabbitMQServer) Ctl(args ...string) string {
	s.t.Helper()
	out, err := s.run(args...)
	if err != nil {
		s.t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// run runs rabbitmqctl -n node args.
func (s *RabbitMQServer) run(args ...string) (string, error) {
	cmd := exec.Command(s.ctl, append([]string{"-n", s.node}, args...)...)
	cmd.Env = s.env()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// stop stops the node (rabbitmqctl stop) and kills what is left of its
// process group.
func (s *RabbitMQServer) stop() {
	if out, err := s.run("stop"); err != nil && !errors.Is(err, exec.ErrNotFound) {
		s.t.Logf("rabbitmqctl stop on %s: %v\n%s", s.node, err, out)
	}
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}
