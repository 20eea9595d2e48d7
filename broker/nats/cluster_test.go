package nats_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
)

// EnsureStream creates replicated streams: on a three-node cluster, an R3
// stream with a leader and two current replicas, which takes and keeps
// messages whether the servers fsync every write (sync_interval: always) or
// flush lazily (the default). What each setting risks is in docs/design.md;
// BenchmarkReplicatedPublish measures what always costs.
func TestReplicatedStream(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync_always=%v", sync), func(t *testing.T) {
			ctx := context.Background()
			c := testenv.NATSCluster(t, 3, testenv.NATSClusterOptions{SyncAlways: sync})
			nc, err := couriernats.Connect(c.URL())
			testenv.Must(t, err, "connect")
			t.Cleanup(nc.Close)
			mapping := couriernats.Config{SubjectPrefix: "r3."}
			testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: "R3", Replicas: 3}), "ensure stream")
			c.WaitStream(nc, "R3", 30*time.Second)
			sc, err := c.StreamCluster(ctx, nc, "R3")
			testenv.Must(t, err, "stream cluster")
			if sc.Size != 3 || len(sc.Replicas) != 2 {
				t.Fatalf("stream R3: %d replicas configured, %d peers besides leader %s; want 3 and 2", sc.Size, len(sc.Replicas), sc.Leader)
			}
			pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
			testenv.Must(t, err, "publisher")
			msgs := make([]courier.Message, 500)
			for i := range msgs {
				msgs[i] = courier.NewMessage("t", fmt.Sprintf("k%d", i%7), "T", fmt.Appendf(nil, "%d", i))
			}
			for i, err := range pub.Publish(ctx, msgs) {
				testenv.Must(t, err, fmt.Sprintf("publish message %d", i))
			}
			// Every replica holds them: read from a node that does not lead.
			for _, p := range c.Nodes {
				if p.Config.Name == sc.Leader {
					continue
				}
				got := c.StreamMessagesVia(p, "R3", mapping)
				if dups := testenv.CheckDelivery(t, msgs, got); dups != 0 || len(got) != len(msgs) {
					t.Errorf("read through %s: %d messages, %d duplicates; want %d and 0", p.Config.Name, len(got), dups, len(msgs))
				}
			}
		})
	}
}

// publishMode is a way the relay hands a Publisher a key's messages.
type publishMode struct {
	name    string
	cfg     couriernats.PublisherConfig // besides Config and AckTimeout
	runs    bool                        // what KeepsKeyOrder must answer
	batches bool                        // every run of several messages as atomic batches
}

// newPublisher returns a Publisher on nc with cfg (the mode's, with Config
// and AckTimeout set) that sends runs as the mode does.
func (m publishMode) newPublisher(t *testing.T, nc *natsgo.Conn, cfg couriernats.PublisherConfig) *couriernats.Publisher {
	t.Helper()
	pub, err := couriernats.NewPublisher(nc, cfg)
	testenv.Must(t, err, "publisher")
	if m.batches {
		couriernats.BatchEveryRun(pub)
	}
	return pub
}

// publishModes are the ways the relay hands a Publisher a key's messages:
// one per key per call, waiting for its acknowledgement before the next
// (any publisher), or the key's run at once to a publisher that keeps key
// order (broker.OrderKeeper, on nats-server 2.12 and later), which sends
// it in rounds (a message of the key per round trip, all keys at once) or
// as atomic batches, as PublisherConfig.BatchTime decides: here each way
// alone.
var publishModes = []publishMode{
	{name: "one per key per call", cfg: couriernats.PublisherConfig{NoAtomicBatches: true}},
	{name: "key runs in rounds", cfg: couriernats.PublisherConfig{BatchTime: time.Hour}, runs: true},
	{name: "key runs as atomic batches", runs: true, batches: true},
}

// clusterFault breaks a three-node cluster while publishers write to an R3
// stream, and returns what repairs it.
type clusterFault struct {
	name string
	// onLeader connects the publishers to the stream's leader; else to
	// another node (nats.go fails over to the others either way).
	onLeader bool
	// unnoticed: the fault need not fail a publish (a lagging follower, a
	// freeze shorter than the election timeout).
	unnoticed bool
	// long: only with -long.
	long  bool
	fault func(f *faultScene) (repair func())
}

// faultScene is what a fault sees: the cluster, the stream's leader, the
// node the publishers are connected to, the proxies in front of every
// node (by name), and how many messages the publishers have had
// acknowledged so far (the least of them).
type faultScene struct {
	t        *testing.T
	c        *testenv.Cluster
	leader   *testenv.NATSProcess
	served   *testenv.NATSProcess
	proxies  map[string]*testenv.Proxy
	progress func() int64
}

// moves waits until every publisher has had 200 more messages
// acknowledged: a new leader took over, and the publishers reach it.
func (f *faultScene) moves(what string) {
	f.t.Helper()
	n := f.progress()
	testenv.Eventually(f.t, 60*time.Second, func() bool { return f.progress() >= n+200 }, "no messages published after %s", what)
}

// other returns a running node that is neither the leader nor the
// publishers' server, or nil.
func (f *faultScene) other() *testenv.NATSProcess {
	for _, p := range f.c.Nodes {
		if p != f.leader && p != f.served {
			return p
		}
	}
	return nil
}

// clusterFaults are the faults TestStreamLeaderLossIsAnOutage sweeps. The
// election timeout of nats-server's Raft is 4–9 s after the leader's last
// heartbeat (one a second): a leader frozen for less than 4 s keeps its
// place, one frozen for longer loses it.
var clusterFaults = []clusterFault{
	{name: "leader killed", fault: func(f *faultScene) func() {
		f.leader.Kill()
		f.moves("the leader was killed")
		return f.leader.Start
	}},
	{name: "leader killed under the publisher", onLeader: true, fault: func(f *faultScene) func() {
		f.leader.Kill()
		f.moves("the leader was killed")
		return f.leader.Start
	}},
	{name: "leader frozen past the election timeout", fault: func(f *faultScene) func() {
		f.leader.Freeze()
		f.moves("the leader was frozen")
		return f.leader.Thaw
	}},
	// The publishers' connections stay open to a server that answers
	// nothing: only the client's pings (Connect's PingInterval) tell them
	// to fail over.
	{name: "leader frozen under the publisher", onLeader: true, fault: func(f *faultScene) func() {
		f.leader.Freeze()
		f.moves("the leader was frozen")
		return f.leader.Thaw
	}},
	{name: "leader frozen short of the election timeout", unnoticed: true, fault: func(f *faultScene) func() {
		f.leader.Freeze()
		time.Sleep(2 * time.Second) // a heartbeat missed, the election timeout not reached
		return f.leader.Thaw
	}},
	{name: "leader frozen for 3.5s under the publisher", onLeader: true, unnoticed: true, long: true, fault: func(f *faultScene) func() {
		f.leader.Freeze()
		time.Sleep(3500 * time.Millisecond) // just short of the election timeout
		return f.leader.Thaw
	}},
	{name: "quorum lost", fault: func(f *faultScene) func() {
		other := f.other()
		f.leader.Kill()
		other.Kill()
		time.Sleep(3 * time.Second)
		return func() { other.Start(); f.leader.Start() }
	}},
	{name: "quorum lost with the publisher's server", long: true, fault: func(f *faultScene) func() {
		f.leader.Kill()
		f.served.Kill()
		time.Sleep(3 * time.Second)
		return func() { f.served.Start(); f.leader.Start() }
	}},
	// The stream goes on with two of its three replicas; the frozen one,
	// behind by then, catches up once thawed.
	{name: "a follower lagging", unnoticed: true, fault: func(f *faultScene) func() {
		other := f.other()
		other.Freeze()
		f.moves("a follower was frozen")
		return other.Thaw // it catches up while the publishers go on
	}},
	// The publishers' server runs on, in the cluster, but nothing gets
	// from them to it or back: what they sent last waits in the cut (the
	// proxy holds it) and reaches the server after they have failed over
	// and published it again.
	{name: "the publisher's server cut off", fault: func(f *faultScene) func() {
		cut := f.proxies[f.served.Config.Name]
		cut.Freeze()
		f.moves("the publishers' server was cut off")
		return cut.Thaw
	}},
}

// While a replicated stream's leader is lost (killed, or frozen past the
// election timeout, as a partition would cut it off), while the stream has
// no quorum at all, and while the publishers' own server is cut off from
// them, every failed publish is broker.ErrUnavailable: an election or an
// outage of the cluster never counts against a message, so the relay keeps
// a backlog and makes no dead letters. Each publish mode the relay uses
// (publishModes) runs through every fault at once, as rounds: once the
// cluster has recovered, every message is in the stream once and each
// key's messages are in the order they were written, and no call
// acknowledged a message of a key after an earlier one of the key failed.
//
// Without -long the sweep leaves out the faults marked long.
func TestStreamLeaderLossIsAnOutage(t *testing.T) {
	for _, fault := range clusterFaults {
		t.Run(fault.name, func(t *testing.T) {
			if fault.long && !testenv.Long() {
				t.Skip("with -long")
			}
			runClusterFault(t, fault)
		})
	}
}

// runClusterFault runs one publisher per publish mode against an R3
// stream on a fresh cluster through fault, and checks the stream.
func runClusterFault(t *testing.T, fault clusterFault) {
	ctx := context.Background()
	c := testenv.NATSCluster(t, 3, testenv.NATSClusterOptions{})
	admin := testenv.Connect(t, c.URL())
	mapping := couriernats.Config{SubjectPrefix: "r3."}
	testenv.Must(t, couriernats.EnsureStream(ctx, admin, mapping, couriernats.StreamConfig{Name: "R3", Replicas: 3}), "ensure stream")
	c.WaitStream(admin, "R3", 30*time.Second)
	leader := c.StreamLeader(admin, "R3", 10*time.Second)
	// The publishers reach each node through a proxy of its own, the
	// leader first or last as the fault says, and only through them.
	served := leader
	if !fault.onLeader {
		served = c.Nodes[(c.Index(leader.Config.Name)+1)%len(c.Nodes)]
	}
	proxies := map[string]*testenv.Proxy{}
	urls := []string{}
	for _, p := range append([]*testenv.NATSProcess{served}, c.Nodes...) {
		if _, ok := proxies[p.Config.Name]; ok {
			continue
		}
		proxies[p.Config.Name] = testenv.StartProxy(t, strings.TrimPrefix(p.URL, "nats://"))
		urls = append(urls, proxies[p.Config.Name].URL(t, p.URL))
	}

	const total = 3000
	pctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	progress := make([]atomic.Int64, len(publishModes))
	least := func() int64 {
		n := progress[0].Load()
		for i := range progress {
			n = min(n, progress[i].Load())
		}
		return n
	}
	outs := make([]roundsOutcome, len(publishModes))
	var wg sync.WaitGroup
	for i, mode := range publishModes {
		nc, err := couriernats.Connect(strings.Join(urls, ","), natsgo.DontRandomize(), natsgo.IgnoreDiscoveredServers())
		testenv.Must(t, err, "connect")
		t.Cleanup(nc.Close)
		cfg := mode.cfg
		cfg.Config, cfg.AckTimeout = couriernats.Config{SubjectPrefix: fmt.Sprintf("r3.m%d.", i)}, 2*time.Second
		pub := mode.newPublisher(t, nc, cfg)
		if got := pub.KeepsKeyOrder(); got != mode.runs {
			t.Fatalf("%s: KeepsKeyOrder is %v on %s; want %v", mode.name, got, nc.ConnectedServerVersion(), mode.runs)
		}
		r := rounds{pub: pub, runs: mode.runs, most: 50, keys: 20, topic: "t"}
		wg.Go(func() { outs[i] = r.publish(pctx, total, &progress[i]) })
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return least() >= 300 }, "publishing did not start")

	t.Logf("stream leader %s, publishers connected to %s: %s", leader.Config.Name, served.Config.Name, fault.name)
	began := time.Now()
	repair := fault.fault(&faultScene{t: t, c: c, leader: leader, served: served, proxies: proxies, progress: least})
	during := least()
	t.Logf("repair %s after the fault", time.Since(began).Round(100*time.Millisecond))
	repair()
	wg.Wait()
	if pctx.Err() != nil {
		t.Fatalf("published %d of %d messages in 3 minutes (the least of the publish modes)", least(), total)
	}
	c.WaitReady(60 * time.Second)
	c.WaitStream(admin, "R3", 60*time.Second)
	got := c.StreamMessages("R3", mapping)
	for i, mode := range publishModes {
		out := outs[i]
		t.Logf("%s: %d published before the repair; failed publishes by error:\n%s", mode.name, during, out.summary())
		for _, err := range out.wrong {
			t.Errorf("%s: publish failed with an error that is not broker.ErrUnavailable (or is also ErrNoStream / ErrRejected): %v", mode.name, err)
		}
		for _, b := range out.broken {
			t.Errorf("%s: %s", mode.name, b)
		}
		if out.failed == 0 && !fault.unnoticed {
			t.Errorf("%s: no publish failed: the fault went unnoticed", mode.name)
		}
		dups := testenv.CheckDelivery(t, out.written, got)
		t.Logf("%s: stream holds %d messages for %d written, %d duplicates", mode.name, len(got), len(out.written), dups)
		if dups != 0 {
			t.Errorf("%s: %d duplicates in the stream: a publish again within the duplicate window must be dropped", mode.name, dups)
		}
	}
}

// BenchmarkReplicatedPublish measures publishing to an R3 stream on a
// three-node cluster whose servers flush lazily (the default) or fsync every
// write (sync_interval: always), in batches of 100 as the relay does.
//
//	go test -run '^$' -bench ReplicatedPublish -benchtime 20000x ./broker/nats
func BenchmarkReplicatedPublish(b *testing.B) {
	for _, cfg := range []struct {
		name     string
		nodes    int
		sync     bool
		replicas int
	}{
		{"R1/single/sync=default", 1, false, 1},
		{"R1/single/sync=always", 1, true, 1},
		{"R3/cluster/sync=default", 3, false, 3},
		{"R3/cluster/sync=always", 3, true, 3},
	} {
		b.Run(cfg.name, func(b *testing.B) {
			ctx := context.Background()
			var url string
			if cfg.nodes == 1 {
				url = testenv.StartNATSServer(b, testenv.NATSServerConfig{SyncAlways: cfg.sync}).URL
			} else {
				url = testenv.NATSCluster(b, cfg.nodes, testenv.NATSClusterOptions{SyncAlways: cfg.sync}).URL()
			}
			nc, err := couriernats.Connect(url)
			testenv.Must(b, err, "connect")
			b.Cleanup(nc.Close)
			mapping := couriernats.Config{SubjectPrefix: "bench."}
			testenv.Must(b, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: "BENCH", Replicas: cfg.replicas}), "ensure stream")
			pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
			testenv.Must(b, err, "publisher")
			batch := func(n int) []courier.Message {
				msgs := make([]courier.Message, n)
				for i := range msgs {
					msgs[i] = courier.NewMessage("t", fmt.Sprintf("k%d", i%100), "T", make([]byte, 256))
				}
				return msgs
			}
			// Warm up: the stream's leader is elected, the subject known.
			for _, err := range pub.Publish(ctx, batch(100)) {
				testenv.Must(b, err, "warm-up publish")
			}
			b.ResetTimer()
			for done := 0; done < b.N; {
				n := min(100, b.N-done)
				for _, err := range pub.Publish(ctx, batch(n)) {
					if err != nil {
						b.Fatalf("publish: %v", err)
					}
				}
				done += n
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
