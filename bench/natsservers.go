package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The brokers section's nats-current and nats-r3 brokers are nats-servers
// the bench starts itself, from the binary -nats-server names: one node, and
// a cluster of three. Each is started the first time a drain needs it, kept
// for the rest of the run (every drain gets a fresh stream on it) and
// stopped when the run ends. Every node listens on loopback ports only and
// keeps its store in a temporary directory, removed afterwards; the
// servers' settings are their defaults (sync_interval included) but for the
// ports, the store and, in a cluster, the routes.

// defaultNATSServer is the -nats-server default when
// COURIER_TEST_NATS_SERVER is not set: the binary `go build -o
// bin/nats-server github.com/nats-io/nats-server/v2` makes at the
// repository's root, seen from bench/.
const defaultNATSServer = "../bin/nats-server"

// natsGroup is a nats-server, or a cluster of them, that the bench started.
type natsGroup struct {
	// url lists every node's client URL, comma-separated.
	url string
	// version is the servers' version, from the connection's INFO.
	version string
	dir     string
	nodes   []*exec.Cmd
	done    []chan struct{}
	monitor []int // each node's HTTP monitoring port
}

// startedNATS returns the group of nodes nats-servers started from
// -nats-server, starting it the first time. A missing binary, or one that
// does not start, is errNotMeasured.
func (b *Bench) startedNATS(ctx context.Context, nodes int) (*natsGroup, error) {
	if g, ok := b.natsGroups[nodes]; ok {
		return g, nil
	}
	if why, ok := b.natsStartFailed[nodes]; ok {
		return nil, errNotMeasured{why}
	}
	g, err := startNATSGroup(ctx, b.cfg.natsServer, nodes)
	if err != nil {
		why := err.Error()
		b.natsStartFailed[nodes] = why
		return nil, errNotMeasured{why}
	}
	b.natsGroups[nodes] = g
	logf("  started nats-server %s: %d node(s) at %s", g.version, nodes, g.url)
	return g, nil
}

// stopNATSServers stops every nats-server the bench started.
func (b *Bench) stopNATSServers() {
	for n, g := range b.natsGroups {
		g.stop()
		delete(b.natsGroups, n)
	}
}

// natsServerVersion runs bin --version, for the report; it says why when it
// cannot.
func natsServerVersion(bin string) string {
	if bin == "" {
		return "not configured (-nats-server is empty)"
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return fmt.Sprintf("%s cannot run: %v", bin, err)
	}
	return strings.TrimSpace(string(out)) + " (" + bin + ")"
}

// startNATSGroup starts nodes nats-servers from bin on loopback ports, each
// with JetStream and a store of its own; more than one form a cluster whose
// every node routes to every other. It returns once JetStream answers (in a
// cluster: once the nodes agree on a meta leader that sees them all).
func startNATSGroup(ctx context.Context, bin string, nodes int) (*natsGroup, error) {
	if bin == "" {
		return nil, errors.New("no nats-server binary (-nats-server is empty)")
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("no nats-server binary at %s (-nats-server, or $COURIER_TEST_NATS_SERVER; build one with `go build -o bin/nats-server github.com/nats-io/nats-server/v2` at the repository's root): %v", bin, err)
	}
	dir, err := os.MkdirTemp("", "bench-nats-")
	if err != nil {
		return nil, err
	}
	g := &natsGroup{dir: dir}
	ports := make([]int, 3*nodes)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			g.stop()
			return nil, err
		}
	}
	client, route := ports[:nodes], ports[nodes:2*nodes]
	g.monitor = ports[2*nodes:]
	routes := make([]string, nodes)
	urls := make([]string, nodes)
	for i := range nodes {
		routes[i] = fmt.Sprintf("%q", fmt.Sprintf("nats-route://127.0.0.1:%d", route[i]))
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", client[i])
	}
	g.url = strings.Join(urls, ",")
	for i := range nodes {
		name := fmt.Sprintf("n%d", i)
		conf := fmt.Sprintf("server_name: %q\nlisten: \"127.0.0.1:%d\"\nhttp: \"127.0.0.1:%d\"\njetstream {\n  store_dir: %q\n}\n",
			name, client[i], g.monitor[i], filepath.Join(dir, name))
		if nodes > 1 {
			conf += fmt.Sprintf("cluster {\n  name: \"bench\"\n  listen: \"127.0.0.1:%d\"\n  routes: [%s]\n}\n", route[i], strings.Join(routes, ", "))
		}
		path := filepath.Join(dir, name+".conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			g.stop()
			return nil, err
		}
		cmd := exec.Command(bin, "-c", path, "-l", filepath.Join(dir, name+".log"))
		// Should the bench die without stopping it, the server goes too.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			g.stop()
			return nil, fmt.Errorf("start %s: %w", bin, err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		g.nodes, g.done = append(g.nodes, cmd), append(g.done, done)
	}
	if err := g.waitReady(ctx, 60*time.Second); err != nil {
		logs := ""
		for i := range nodes {
			if b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("n%d.log", i))); err == nil {
				logs += "\n" + lastLines(string(b), 5)
			}
		}
		g.stop()
		return nil, fmt.Errorf("nats-server (%d node(s)) not ready: %w%s", nodes, err, logs)
	}
	return g, nil
}

// waitReady waits until every node runs and, in a cluster, the nodes agree
// on a meta leader that sees every node as a current peer, and until
// JetStream answers a client.
func (g *natsGroup) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	why := "not started"
	for time.Now().Before(deadline) {
		if why = g.notReady(ctx); why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("after %s: %s", timeout, why)
}

// notReady says why the group is not ready yet, "" once it is.
func (g *natsGroup) notReady(ctx context.Context) string {
	for i, d := range g.done {
		select {
		case <-d:
			return fmt.Sprintf("node n%d exited", i)
		default:
		}
	}
	if len(g.nodes) > 1 {
		leader := ""
		for i := range g.nodes {
			m, err := g.meta(i)
			if err != nil {
				return err.Error()
			}
			if m.Leader == "" || leader != "" && m.Leader != leader {
				return "the nodes see no meta leader, or disagree"
			}
			leader = m.Leader
			current := 1 // the leader itself
			for _, r := range m.Replicas {
				if r.Current && !r.Offline {
					current++
				}
			}
			if m.Leader == fmt.Sprintf("n%d", i) && current < len(g.nodes) {
				return fmt.Sprintf("meta leader %s sees %d of %d nodes current", leader, current, len(g.nodes))
			}
		}
	}
	nc, err := natsgo.Connect(g.url, natsgo.Timeout(time.Second))
	if err != nil {
		return err.Error()
	}
	defer nc.Close()
	g.version = nc.ConnectedServerVersion()
	js, err := jetstream.New(nc)
	if err != nil {
		return err.Error()
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(actx); err != nil {
		return "JetStream account info: " + err.Error()
	}
	return ""
}

// metaCluster is the part of a node's /jsz answer about the meta group.
type metaCluster struct {
	Leader   string `json:"leader"`
	Replicas []struct {
		Name    string `json:"name"`
		Current bool   `json:"current"`
		Offline bool   `json:"offline"`
	} `json:"replicas"`
}

// meta asks node i's monitoring endpoint about the meta group.
func (g *natsGroup) meta(i int) (metaCluster, error) {
	hc := http.Client{Timeout: time.Second}
	resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz", g.monitor[i]))
	if err != nil {
		return metaCluster{}, err
	}
	defer resp.Body.Close()
	var jsz struct {
		Meta *metaCluster `json:"meta_cluster"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return metaCluster{}, err
	}
	if jsz.Meta == nil {
		return metaCluster{}, fmt.Errorf("node n%d: no meta_cluster in /jsz", i)
	}
	return *jsz.Meta, nil
}

// probe reads the CPU time of every node.
func (g *natsGroup) probe(context.Context) (cpuSnapshot, error) {
	snap := cpuSnapshot{}
	for _, cmd := range g.nodes {
		d, err := procCPU(cmd.Process.Pid)
		if err != nil {
			return nil, err
		}
		snap[cmd.Process.Pid] = d
	}
	return snap, nil
}

// stop stops every node (SIGTERM, then SIGKILL after 10 s) and removes the
// stores.
func (g *natsGroup) stop() {
	for i, cmd := range g.nodes {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-g.done[i]:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-g.done[i]
		}
	}
	g.nodes, g.done = nil, nil
	if g.dir != "" {
		if err := os.RemoveAll(g.dir); err != nil {
			logf("warning: remove %s: %v", g.dir, err)
		}
	}
}

// freePort returns a loopback TCP port free at the moment of asking.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// atomicServer reports whether a nats-server of this version takes atomic
// batches (2.12 and later), as Courier's EnsureStream decides whether a
// stream it creates allows them.
func atomicServer(version string) bool {
	var major, minor int
	if _, err := fmt.Sscanf(version, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 2 || major == 2 && minor >= 12
}

// brokerStreamTune returns the settings of a brokers-section stream on the
// server at natsURL, as EnsureStream would create it there: allowing atomic
// batches on nats-server 2.12 and later, on replicas servers.
func brokerStreamTune(natsURL string, replicas int) (func(*jetstream.StreamConfig), bool, error) {
	nc, err := natsgo.Connect(natsURL)
	if err != nil {
		return nil, false, fmt.Errorf("connect to nats: %w", err)
	}
	atomic := atomicServer(nc.ConnectedServerVersion())
	nc.Close()
	return func(c *jetstream.StreamConfig) {
		c.AllowAtomicPublish = atomic
		c.Replicas = replicas
	}, atomic, nil
}
