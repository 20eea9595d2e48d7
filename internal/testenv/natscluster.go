package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
)

// NATSClusterOptions tunes the cluster NATSCluster starts.
type NATSClusterOptions struct {
	// Name is the cluster's name; default "courier".
	Name string
	// SyncAlways sets every node's JetStream sync_interval to always (see
	// NATSServerConfig.SyncAlways). Default: the server's lazy flush.
	SyncAlways bool
	// Extra is appended to every node's configuration file.
	Extra string
}

// Cluster is a JetStream cluster of nats-server processes on loopback
// ports, every node a NATSProcess the test can kill, start again, freeze
// and thaw. Its nodes are killed when the test ends.
type Cluster struct {
	// Nodes are the servers, named n0, n1, … in the order of their ports.
	Nodes []*NATSProcess
	// Name is the cluster's name.
	Name string

	t       testing.TB
	monitor []int // each node's HTTP monitoring port
}

// NATSCluster starts n nats-servers (EnvNATSServer; the test skips without
// it) forming one JetStream cluster: every node routes to every other, and
// each has its own store directory, client port and monitoring port, kept
// across restarts. It returns once the cluster has elected a meta leader
// that sees every node as current and JetStream answers requests.
//
// Node restarts and freezes are the test's (NATSProcess's Kill, Start,
// Freeze, Thaw); WaitReady and WaitStream wait for the cluster to recover.
func NATSCluster(t testing.TB, n int, opts NATSClusterOptions) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("NATSCluster: n is %d: a cluster needs at least one node (three for a quorum that survives a node)", n)
	}
	NATSServerBinary(t) // skip before picking ports
	if opts.Name == "" {
		opts.Name = "courier"
	}
	c := &Cluster{Name: opts.Name, t: t}
	clientPorts, routePorts := make([]int, n), make([]int, n)
	c.monitor = make([]int, n)
	for i := range n {
		clientPorts[i], routePorts[i], c.monitor[i] = FreePort(t), FreePort(t), FreePort(t)
	}
	routes := make([]string, n)
	for i, p := range routePorts {
		routes[i] = fmt.Sprintf("%q", fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	for i := range n {
		extra := fmt.Sprintf("http: \"127.0.0.1:%d\"\ncluster {\n  name: %q\n  listen: \"127.0.0.1:%d\"\n  routes: [%s]\n}\n%s",
			c.monitor[i], opts.Name, routePorts[i], strings.Join(routes, ", "), opts.Extra)
		c.Nodes = append(c.Nodes, StartNATSServer(t, NATSServerConfig{
			Name: fmt.Sprintf("n%d", i), Port: clientPorts[i], SyncAlways: opts.SyncAlways, Extra: extra,
		}))
	}
	c.WaitReady(60 * time.Second)
	return c
}

// URLs returns every node's client URL, for a client that fails over
// between them.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.Nodes))
	for i, p := range c.Nodes {
		urls[i] = p.URL
	}
	return urls
}

// URL returns every node's client URL, comma-separated, as nats.Connect
// takes them.
func (c *Cluster) URL() string { return strings.Join(c.URLs(), ",") }

// Node returns the node named name, or nil.
func (c *Cluster) Node(name string) *NATSProcess {
	for _, p := range c.Nodes {
		if p.Config.Name == name {
			return p
		}
	}
	return nil
}

// Index returns the position of the node named name in Nodes, or -1.
func (c *Cluster) Index(name string) int {
	for i, p := range c.Nodes {
		if p.Config.Name == name {
			return i
		}
	}
	return -1
}

// metaCluster is the part of a node's /jsz answer about the meta group.
type metaCluster struct {
	Leader      string `json:"leader"`
	ClusterSize int    `json:"cluster_size"`
	Replicas    []struct {
		Name    string `json:"name"`
		Current bool   `json:"current"`
		Offline bool   `json:"offline"`
	} `json:"replicas"`
}

// meta asks node i's monitoring endpoint about the meta group.
func (c *Cluster) meta(i int) (metaCluster, error) {
	hc := http.Client{Timeout: time.Second}
	resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz", c.monitor[i]))
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
		return metaCluster{}, fmt.Errorf("no meta_cluster in /jsz")
	}
	return *jsz.Meta, nil
}

// MetaLeader returns the name of the meta leader as the running nodes see
// it, or "" when they see none or disagree.
func (c *Cluster) MetaLeader() string {
	leader := ""
	for i, p := range c.Nodes {
		if !p.Running() {
			continue
		}
		m, err := c.meta(i)
		if err != nil || m.Leader == "" || leader != "" && m.Leader != leader {
			return ""
		}
		leader = m.Leader
	}
	return leader
}

// WaitReady waits until the running nodes agree on a meta leader, the
// leader sees every running node as a current peer, and JetStream answers a
// client connected to the cluster. It fails the test after timeout.
func (c *Cluster) WaitReady(timeout time.Duration) {
	c.t.Helper()
	why := "no meta leader"
	ready := func() bool {
		leader := c.MetaLeader()
		if leader == "" {
			why = "the running nodes see no meta leader, or disagree"
			return false
		}
		li := c.Index(leader)
		if li < 0 {
			why = "meta leader " + leader + " is not a node of the cluster"
			return false
		}
		m, err := c.meta(li)
		if err != nil {
			why = err.Error()
			return false
		}
		current := map[string]bool{leader: true}
		for _, r := range m.Replicas {
			if r.Current && !r.Offline {
				current[r.Name] = true
			}
		}
		for _, p := range c.Nodes {
			if p.Running() && !current[p.Config.Name] {
				why = fmt.Sprintf("meta leader %s does not see %s as a current peer", leader, p.Config.Name)
				return false
			}
		}
		nc, err := natsgo.Connect(c.URL(), natsgo.Timeout(time.Second))
		if err != nil {
			why = err.Error()
			return false
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			why = err.Error()
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := js.AccountInfo(ctx); err != nil {
			why = "JetStream account info: " + err.Error()
			return false
		}
		return true
	}
	deadline := time.Now().Add(timeout)
	for !ready() {
		if time.Now().After(deadline) {
			c.t.Fatalf("NATS cluster %s not ready after %s: %s", c.Name, timeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StreamCluster is what JetStream says about a replicated stream's group.
type StreamCluster struct {
	// Leader is the name of the node that leads the stream; "" during an
	// election or while the stream has no quorum.
	Leader string
	// Replicas are the other peers' names, with whether each is current.
	Replicas map[string]bool
	// Size is the stream's configured number of replicas.
	Size int
}

// StreamCluster asks JetStream ($JS.API.STREAM.INFO) for the stream's
// group, over nc.
func (c *Cluster) StreamCluster(ctx context.Context, nc *natsgo.Conn, stream string) (StreamCluster, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return StreamCluster{}, err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return StreamCluster{}, err
	}
	info := s.CachedInfo()
	sc := StreamCluster{Replicas: map[string]bool{}, Size: info.Config.Replicas}
	if info.Cluster == nil {
		return sc, fmt.Errorf("stream %s: no cluster information (is the server clustered?)", stream)
	}
	sc.Leader = info.Cluster.Leader
	for _, r := range info.Cluster.Replicas {
		sc.Replicas[r.Name] = r.Current && !r.Offline
	}
	return sc, nil
}

// StreamLeader returns the node that leads stream, waiting up to timeout
// for one to be elected; it fails the test after that.
func (c *Cluster) StreamLeader(nc *natsgo.Conn, stream string, timeout time.Duration) *NATSProcess {
	c.t.Helper()
	var last error
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		sc, err := c.StreamCluster(ctx, nc, stream)
		cancel()
		if err == nil && sc.Leader != "" {
			if p := c.Node(sc.Leader); p != nil && p.Running() {
				return p
			}
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("stream %s has no leader after %s (last error: %v)", stream, timeout, last)
	return nil
}

// WaitStream waits until stream has a leader and every peer of its group
// that runs is a current replica; it fails the test after timeout.
func (c *Cluster) WaitStream(nc *natsgo.Conn, stream string, timeout time.Duration) {
	c.t.Helper()
	why := ""
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		sc, err := c.StreamCluster(ctx, nc, stream)
		cancel()
		switch {
		case err != nil:
			why = err.Error()
		case sc.Leader == "":
			why = "no leader"
		case len(sc.Replicas)+1 < sc.Size:
			why = fmt.Sprintf("leader %s, %d of %d replicas placed", sc.Leader, len(sc.Replicas)+1, sc.Size)
		default:
			why = ""
			for name, current := range sc.Replicas {
				if p := c.Node(name); !current && p != nil && p.Running() {
					why = fmt.Sprintf("leader %s; %s is not a current replica", sc.Leader, name)
				}
			}
		}
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("stream %s not fully replicated after %s: %s", stream, timeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StreamMessages reads the whole stream in order through its leader, as
// the package function StreamMessages does, retrying for up to a minute
// while the cluster settles after a fault (a consumer created on a node
// whose interest has not reached the others yet answers "no responders").
func (c *Cluster) StreamMessages(stream string, mapping couriernats.Config) []courier.Message {
	c.t.Helper()
	return c.StreamMessagesVia(nil, stream, mapping)
}

// StreamMessagesVia reads the whole stream as StreamMessages does, through
// node (nil: the stream's leader).
func (c *Cluster) StreamMessagesVia(node *NATSProcess, stream string, mapping couriernats.Config) []courier.Message {
	c.t.Helper()
	var last error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		via := node
		if via == nil {
			admin, err := natsgo.Connect(c.URL())
			if err != nil {
				last = err
				continue
			}
			via = c.StreamLeader(admin, stream, 30*time.Second)
			admin.Close()
		}
		nc, err := natsgo.Connect(via.URL)
		if err != nil {
			last = err
			continue
		}
		msgs, err := readStream(nc, stream, mapping)
		nc.Close()
		if err == nil {
			return msgs
		}
		last = err
	}
	c.t.Fatalf("read stream %s: %v", stream, last)
	return nil
}

// readStream reads the whole stream on nc in order.
func readStream(nc *natsgo.Conn, stream string, mapping couriernats.Config) ([]courier.Message, error) {
	// The stream's and the consumer's requests get an answer within
	// seconds from a settled cluster; one that gets none (its node was
	// still learning the stream's leader) fails this attempt, not the
	// caller's whole minute, which StreamMessagesVia spends on attempts.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	total := int(s.CachedInfo().State.Msgs)
	if total == 0 {
		return nil, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	out := make([]courier.Message, 0, total)
	lastGot := time.Now()
	for len(out) < total {
		batch, err := cons.Fetch(min(1000, total-len(out)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			msg, err := mapping.FromNATS(&natsgo.Msg{Subject: m.Subject(), Header: natsgo.Header(m.Headers()), Data: m.Data()})
			if err != nil {
				return nil, err
			}
			out = append(out, msg)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, natsgo.ErrTimeout) {
			return nil, err
		}
		if got > 0 {
			lastGot = time.Now() // reading goes on while messages come
		} else if time.Since(lastGot) > 15*time.Second {
			return nil, fmt.Errorf("read %d of %d messages, then none for %s", len(out), total, time.Since(lastGot).Round(time.Second))
		}
	}
	return out, nil
}
