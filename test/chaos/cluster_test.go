package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
)

// TestChaosCluster's sizes. The default is what CI runs: 40,000 messages
// over 1,000 keys under 90 seconds of faults (every kind at least once),
// about 2½ minutes under -race on two shared cores; 100,000 took 5½
// minutes there, most of the package's time, for the same faults. The
// consumers (one delivery in flight per partition, for strict order) are
// the slow part. -long keeps the faults coming for longer, with more
// messages; -short shrinks it.
var (
	clusterDefault = settings{messages: 40000, keys: 1000, partitions: 8, relays: 3, chaosFor: 90 * time.Second}
	clusterLong    = settings{messages: 200000, keys: 1000, partitions: 8, relays: 3, chaosFor: 3 * time.Minute}
	clusterShort   = settings{messages: 5000, keys: 1000, partitions: 4, relays: 3, chaosFor: 20 * time.Second}
)

// TestChaosCluster runs relays and consumers (processes of their own, as in
// TestChaos) on PostgreSQL against a three-node JetStream cluster holding an
// R3 stream, while the test SIGKILLs the stream's leader and other nodes and
// starts them again, cuts a node off (SIGSTOP for longer than the election
// timeout, then SIGCONT), takes the stream's quorum away for a moment, and
// kills relays and consumers. The relays and consumers know every node's
// URL. Afterwards every message must have been applied once, in key order,
// and none be a dead letter: an election, a lost leader or a lost quorum is
// an outage, which leaves a backlog, never dead letters.
//
// It needs COURIER_TEST_POSTGRES_URL and COURIER_TEST_NATS_SERVER.
//
//	go test ./test/chaos -run TestChaosCluster -v          # 40,000 messages, what CI runs
//	go test ./test/chaos -run TestChaosCluster -long -v    # 200,000 messages, three minutes of faults
func TestChaosCluster(t *testing.T) {
	t.Parallel()
	s := clusterDefault
	switch {
	case testenv.Long():
		s = clusterLong
	case testing.Short():
		s = clusterShort
	}
	runClusterChaos(t, s)
}

// clusterRun is the state of a cluster chaos run.
type clusterRun struct {
	*run
	c     *testenv.Cluster
	admin *natsgo.Conn
}

func runClusterChaos(t *testing.T, s settings) {
	began := time.Now()
	ctx := context.Background()
	r := &run{t: t, began: began, s: s, dialect: "postgres", faults: map[string]int{}}
	c := testenv.NATSCluster(t, 3, testenv.NATSClusterOptions{})
	r.db = setupPostgres(t)
	t.Logf("cluster chaos run: %s on a %d-node JetStream cluster, R3 stream", s, len(c.Nodes))
	cr := &clusterRun{run: r, c: c}

	r.stream = testenv.Name("CLUSTER")
	prefix := strings.ToLower(r.stream) + "."
	cr.createStream(ctx, prefix)
	common := []string{envNATS + "=" + c.URL(), envPrefix + "=" + prefix, envStream + "=" + r.stream}
	for i := range s.relays {
		r.relays = append(r.relays, &testenv.Proc{Name: fmt.Sprintf("relay %d", i), Env: append([]string{envRole + "=relay",
			envDB + "=" + r.db.relayURL(i), envFail + "=0.01"}, common...)})
	}
	for i := range s.partitions {
		r.consumers = append(r.consumers, &testenv.Proc{Name: fmt.Sprintf("consumer %d", i), Env: append([]string{envRole + "=consumer",
			envDB + "=" + r.db.consumerURL(i), envTopic + "=" + fmt.Sprintf("part%d", i),
			envDup + "=0.01", envReorder + "=0.01"}, common...)})
	}
	all := append(append([]*testenv.Proc(nil), r.relays...), r.consumers...)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	for _, p := range all {
		p.Supervise(t, stop, &wg)
	}

	producing := cr.produce()

	faults := cr.faultKinds()
	total := 0
	for _, f := range faults {
		total += f.weight
	}
	// Faults until the time is up, everything is written and most of it
	// applied (the consumers are the slow part: one delivery in flight per
	// partition), so that the drain runs under faults too; every kind at
	// least once.
	var msgs []written
	produced := false
	applied := func() int {
		var n int
		if err := r.db.consumer.QueryRowContext(ctx, `SELECT count(*) FROM effects`).Scan(&n); err != nil {
			t.Logf("count effects: %v", err)
		}
		return n
	}
	deadline := time.Now().Add(s.chaosFor)
	for round := 0; time.Now().Before(deadline) || !produced || applied() < s.messages*9/10 || round < len(faults); round++ {
		if !produced {
			select {
			case msgs = <-producing:
				produced = true
			default:
			}
		}
		time.Sleep(time.Duration(500+rand.IntN(1000)) * time.Millisecond)
		f := faults[round%len(faults)]
		if round >= len(faults) {
			n := rand.IntN(total)
			for _, f = range faults {
				if n -= f.weight; n < 0 {
					break
				}
			}
		}
		f.do(ctx)
		// The next fault finds the cluster whole: one node's loss at a
		// time keeps the quorum, except where a fault takes it on purpose.
		c.WaitReady(2 * time.Minute)
		c.WaitStream(cr.admin, r.stream, 2*time.Minute)
	}
	r.mu.Lock()
	t.Logf("faults: %v", r.faults)
	r.mu.Unlock()

	res := check(t, ctx, r, msgs)
	close(stop)
	wg.Wait()
	for _, p := range all {
		t.Logf("%-12s %2d runs", p.Name, p.Runs())
	}
	r.mu.Lock()
	t.Logf("summary cluster: %s; faults %v; %s; %s of faults, settled %s later, %s in all",
		res.messages, r.faults, res, s.chaosFor, res.settled.Round(100*time.Millisecond),
		time.Since(began).Round(100*time.Millisecond))
	r.mu.Unlock()
}

// produce writes s.messages messages, seq increasing per key, in
// transactions of 100 from one goroutine, spread over most of s.chaosFor;
// the channel yields them when done.
func (cr *clusterRun) produce() <-chan []written {
	s := cr.s
	out := make(chan []written, 1)
	go func() {
		var all []written
		seq := map[string]int{}
		const perTx = 100
		pace := s.chaosFor * 8 / 10 / time.Duration(max(1, s.messages/perTx))
		for len(all) < s.messages {
			began := time.Now()
			n := min(perTx, s.messages-len(all))
			msgs := make([]courier.Message, n)
			batch := make([]written, n)
			for i := range msgs {
				k := fmt.Sprintf("k%d", rand.IntN(s.keys))
				seq[k]++
				msgs[i] = courier.NewMessage(partition(k, s.partitions), k, "Step", []byte(strconv.Itoa(seq[k])))
				batch[i] = written{id: msgs[i].ID.String(), key: k, seq: seq[k]}
			}
			if err := cr.db.write(context.Background(), msgs); err != nil {
				// Not written: take the sequence numbers back and retry.
				for _, b := range batch {
					seq[b.key]--
				}
				time.Sleep(50 * time.Millisecond)
				continue
			}
			all = append(all, batch...)
			time.Sleep(pace - time.Since(began))
		}
		out <- all
	}()
	return out
}

// createStream creates the run's R3 stream, binding the partitions'
// subjects, and waits until all three nodes hold it.
func (cr *clusterRun) createStream(ctx context.Context, prefix string) {
	t := cr.t
	cr.admin = testenv.Connect(t, cr.c.URL(), natsgo.MaxReconnects(-1), natsgo.ReconnectWait(100*time.Millisecond),
		natsgo.PingInterval(2*time.Second), natsgo.MaxPingsOutstanding(2))
	var err error
	cr.js, err = jetstream.New(cr.admin)
	testenv.Must(t, err, "jetstream")
	subjects := make([]string, cr.s.partitions)
	for i := range subjects {
		subjects[i] = fmt.Sprintf("%spart%d", prefix, i)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = cr.js.CreateStream(cctx, jetstream.StreamConfig{Name: cr.stream, Subjects: subjects, Storage: jetstream.FileStorage,
		Replicas: 3, Duplicates: 2 * time.Minute, MaxMsgSize: maxMsgSize})
	testenv.Must(t, err, "create the stream")
	cr.c.WaitStream(cr.admin, cr.stream, 30*time.Second)
}

// leader returns the stream's leader, or nil while it has none.
func (cr *clusterRun) leader(ctx context.Context) *testenv.NATSProcess {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	sc, err := cr.c.StreamCluster(cctx, cr.admin, cr.stream)
	if err != nil || sc.Leader == "" {
		return nil
	}
	return cr.c.Node(sc.Leader)
}

// follower returns a node other than the stream's leader, at random.
func (cr *clusterRun) follower(ctx context.Context) *testenv.NATSProcess {
	l := cr.leader(ctx)
	for {
		p := cr.c.Nodes[rand.IntN(len(cr.c.Nodes))]
		if p != l {
			return p
		}
	}
}

// down kills p with SIGKILL and starts it again after d.
func (cr *clusterRun) down(p *testenv.NATSProcess, d time.Duration) {
	p.Kill()
	time.Sleep(d)
	p.Start()
}

// faultKinds lists the cluster's faults, the ones that matter most first
// (the first round goes through them in order).
func (cr *clusterRun) faultKinds() []faultKind {
	pick := func(ps []*testenv.Proc) *testenv.Proc { return ps[rand.IntN(len(ps))] }
	// An election takes the followers' election timeout (seconds) to
	// start: a node cut off for longer loses its leadership.
	partition := func() time.Duration { return time.Duration(8000+rand.IntN(4000)) * time.Millisecond }
	return []faultKind{
		{"stream leader SIGKILL", 3, func(ctx context.Context) {
			if l := cr.leader(ctx); l != nil {
				cr.down(l, time.Duration(500+rand.IntN(2500))*time.Millisecond)
				cr.count("stream leader SIGKILLed, back after 0.5–3s", 1)
			}
		}},
		{"stream leader partitioned", 2, func(ctx context.Context) {
			if l := cr.leader(ctx); l != nil {
				l.Freeze()
				time.Sleep(partition())
				l.Thaw()
				cr.count("stream leader cut off (SIGSTOP) for 8–12s", 1)
			}
		}},
		{"follower SIGKILL", 2, func(ctx context.Context) {
			cr.down(cr.follower(ctx), time.Duration(500+rand.IntN(2500))*time.Millisecond)
			cr.count("follower SIGKILLed, back after 0.5–3s", 1)
		}},
		{"follower partitioned", 1, func(ctx context.Context) {
			f := cr.follower(ctx)
			f.Freeze()
			time.Sleep(partition())
			f.Thaw()
			cr.count("follower cut off (SIGSTOP) for 8–12s", 1)
		}},
		{"quorum lost", 1, func(ctx context.Context) {
			a := cr.c.Nodes[rand.IntN(len(cr.c.Nodes))]
			b := cr.c.Nodes[(cr.c.Index(a.Config.Name)+1)%len(cr.c.Nodes)]
			a.Kill()
			b.Kill()
			time.Sleep(time.Duration(1000+rand.IntN(2000)) * time.Millisecond)
			a.Start()
			b.Start()
			cr.count("two of three nodes SIGKILLed, back after 1–3s", 1)
		}},
		{"relay SIGKILL", 2, func(context.Context) {
			pick(cr.relays).Signal(syscall.SIGKILL)
			cr.count("relay SIGKILL", 1)
		}},
		{"consumer SIGKILL", 1, func(context.Context) {
			pick(cr.consumers).Signal(syscall.SIGKILL)
			cr.count("consumer SIGKILL", 1)
		}},
		{"nothing", 1, func(context.Context) {}},
	}
}
