package nats_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
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

// While a replicated stream's leader is lost (killed, or frozen past the
// election timeout, as a partition would cut it off) and while the stream
// has no quorum at all, every failed publish is broker.ErrUnavailable: an
// election or an outage of the cluster never counts against a message, so
// the relay keeps a backlog and makes no dead letters. Once the cluster has
// recovered every message is in the stream once.
func TestStreamLeaderLossIsAnOutage(t *testing.T) {
	type scenario struct {
		name string
		// onLeader connects the publisher to the stream's leader (else to
		// another node; nats.go fails over to the others either way).
		onLeader bool
		// fault breaks the cluster, given the stream's leader, and returns
		// what repairs it; progress is the number of messages published so
		// far.
		fault func(t *testing.T, c *testenv.Cluster, leader *testenv.NATSProcess, progress func() int64) (repair func())
	}
	// moves waits until the publisher has published more messages: a new
	// leader took over, and the publisher reaches it.
	moves := func(t *testing.T, progress func() int64, what string) {
		n := progress()
		testenv.Eventually(t, 60*time.Second, func() bool { return progress() >= n+200 }, "no messages published after %s", what)
	}
	killed := func(t *testing.T, c *testenv.Cluster, leader *testenv.NATSProcess, progress func() int64) func() {
		leader.Kill()
		moves(t, progress, "the leader was killed")
		return leader.Start
	}
	frozen := func(t *testing.T, c *testenv.Cluster, leader *testenv.NATSProcess, progress func() int64) func() {
		leader.Freeze()
		moves(t, progress, "the leader was frozen")
		return leader.Thaw
	}
	scenarios := []scenario{
		{"leader killed", false, killed},
		{"leader killed under the publisher", true, killed},
		{"leader frozen past the election timeout", false, frozen},
		// The publisher's connection stays open to a server that answers
		// nothing: only the client's pings (Connect's PingInterval) tell
		// it to fail over.
		{"leader frozen under the publisher", true, frozen},
		{"quorum lost", false, func(t *testing.T, c *testenv.Cluster, leader *testenv.NATSProcess, progress func() int64) func() {
			other := c.Nodes[(c.Index(leader.Config.Name)+1)%len(c.Nodes)]
			leader.Kill()
			other.Kill()
			time.Sleep(5 * time.Second)
			return func() { other.Start(); leader.Start() }
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			ctx := context.Background()
			c := testenv.NATSCluster(t, 3, testenv.NATSClusterOptions{})
			admin := testenv.Connect(t, c.URL())
			mapping := couriernats.Config{SubjectPrefix: "r3."}
			testenv.Must(t, couriernats.EnsureStream(ctx, admin, mapping, couriernats.StreamConfig{Name: "R3", Replicas: 3}), "ensure stream")
			c.WaitStream(admin, "R3", 30*time.Second)
			leader := c.StreamLeader(admin, "R3", 10*time.Second)
			// The publisher's first server is the leader or not, as the
			// scenario says; the others follow for failover.
			urls := []string{leader.URL}
			for _, p := range c.Nodes {
				if p != leader {
					urls = append(urls, p.URL)
				}
			}
			if !sc.onLeader {
				urls = append(urls[1:], urls[0])
			}
			nc, err := couriernats.Connect(strings.Join(urls, ","), natsgo.DontRandomize())
			testenv.Must(t, err, "connect")
			t.Cleanup(nc.Close)
			pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping, AckTimeout: 2 * time.Second})
			testenv.Must(t, err, "publisher")

			const total = 3000
			pctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			var progress atomic.Int64
			var out publishOutcome
			var wg sync.WaitGroup
			wg.Go(func() { out = publishAll(pctx, pub, total, &progress) })
			testenv.Eventually(t, 30*time.Second, func() bool { return progress.Load() >= 300 }, "publishing did not start")

			t.Logf("stream leader %s, publisher connected to %s: %s", leader.Config.Name, nc.ConnectedServerName(), sc.name)
			began := time.Now()
			repair := sc.fault(t, c, leader, progress.Load)
			during := progress.Load()
			t.Logf("repair %s after the fault", time.Since(began).Round(100*time.Millisecond))
			repair()
			wg.Wait()
			if pctx.Err() != nil {
				t.Fatalf("published %d of %d messages in 3 minutes", progress.Load(), total)
			}
			t.Logf("%d published before the repair; failed publishes by error:\n%s", during, out.summary())
			for _, err := range out.wrong {
				t.Errorf("publish failed with an error that is not broker.ErrUnavailable (or is also ErrNoStream / ErrRejected): %v", err)
			}
			if out.failed == 0 {
				t.Errorf("no publish failed: the fault went unnoticed")
			}
			c.WaitReady(60 * time.Second)
			c.WaitStream(admin, "R3", 60*time.Second)
			got := c.StreamMessages("R3", mapping)
			dups := testenv.CheckDelivery(t, out.published, got)
			t.Logf("stream holds %d messages for %d published, %d duplicates", len(got), len(out.published), dups)
		})
	}
}

// publishOutcome is what publishAll saw.
type publishOutcome struct {
	published []courier.Message
	failed    int
	byError   map[string]int // failed publishes by error text, ids and numbers blanked
	wrong     []error        // errors that are not (only) broker.ErrUnavailable
}

var digits = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f-]{27}|[0-9]+`)

func (o publishOutcome) summary() string {
	lines := make([]string, 0, len(o.byError))
	for e, n := range o.byError {
		lines = append(lines, fmt.Sprintf("  %6d  %s", n, e))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// publishAll publishes total messages in batches of 50 as a relay would:
// each failed message again in the next batch, until every one is
// published or ctx ends. progress counts the messages published.
func publishAll(ctx context.Context, pub *couriernats.Publisher, total int, progress *atomic.Int64) publishOutcome {
	out := publishOutcome{byError: map[string]int{}}
	var queue []courier.Message
	made := 0
	for len(out.published) < total && ctx.Err() == nil {
		for len(queue) < 50 && made < total {
			queue = append(queue, courier.NewMessage("t", fmt.Sprintf("k%d", made%7), "T", fmt.Appendf(nil, "%d", made)))
			made++
		}
		errs := pub.Publish(ctx, queue)
		var again []courier.Message
		for i, err := range errs {
			if err == nil {
				out.published = append(out.published, queue[i])
				progress.Add(1)
				continue
			}
			again = append(again, queue[i])
			out.failed++
			out.byError[digits.ReplaceAllString(err.Error(), "#")]++
			if !errors.Is(err, broker.ErrUnavailable) || errors.Is(err, couriernats.ErrNoStream) || errors.Is(err, broker.ErrRejected) {
				out.wrong = append(out.wrong, err)
			}
		}
		queue = again
		if len(again) == len(errs) {
			time.Sleep(50 * time.Millisecond) // the relay's pause in an outage
		}
	}
	return out
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
