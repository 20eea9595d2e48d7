package chaos

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/broker/brokertest"
	"github.com/courier-go/courier/broker/kafka"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/postgres"
)

// The ordered consumer group runs (TestOrderedGroupNATS, …Kafka,
// …RabbitMQ): instances of one consumer, each a process of its own, share
// the keys of a topic (NATS: SubscriberConfig.Partitions; Kafka: the
// consumer group; RabbitMQ: partition queues with a single active
// consumer) and apply each message in a PostgreSQL transaction through the
// inbox, keeping order (KeepOrder), while the test publishes a steady
// stream of messages, one per key a round, and SIGKILLs instances, freezes
// them past their heartbeat (SIGSTOP, then SIGCONT), adds one and removes
// one (SIGTERM). Every effect is a row (key, sequence, the process that
// applied it, whether the key's previous message was already committed);
// at the end nothing may be lost, applied twice or applied before an
// earlier message of its key. Each fault's rebalance is measured as the
// longest a message published in the half second after it waited to be
// applied.
const groupConsumerRole = "group-consumer"

// The group consumers' environment.
const (
	envGroupKind        = "COURIER_CHAOS_GROUP_KIND"        // nats, kafka or amqp
	envGroupURL         = "COURIER_CHAOS_GROUP_URL"         // the broker
	envGroupName        = "COURIER_CHAOS_GROUP_NAME"        // NATS consumer, Kafka group, RabbitMQ queue
	envGroupTiming      = "COURIER_CHAOS_GROUP_TIMING"      // heartbeat and timeout, such as 250ms/1.5s
	envGroupAckWait     = "COURIER_CHAOS_GROUP_ACK_WAIT"    // NATS AckWait; empty: the default
	envGroupDial        = "COURIER_CHAOS_GROUP_DIAL"        // broker addresses to reach through others: a=b,c=d
	envGroupSlow        = "COURIER_CHAOS_GROUP_SLOW"        // how long applying a SlowStep message takes
	envGroupPrefetch    = "COURIER_CHAOS_GROUP_PREFETCH"    // NATS Prefetch; empty: the default
	envGroupConcurrency = "COURIER_CHAOS_GROUP_CONCURRENCY" // the inbox consumer's
)

// The groups' partitions and topic, and the classic run's timing:
// instances announce themselves every 250ms and a silent one's partitions
// move after 1.5s (Kafka: its session timeout); a frozen instance stays
// stopped for groupFreeze, past both.
const (
	groupPartitions = 16
	groupFreeze     = 4 * time.Second
	groupTopic      = "orders"
)

var groupTiming = brokertest.Timing{Heartbeat: 250 * time.Millisecond, Timeout: 1500 * time.Millisecond}

// groupSettings are one run's.
type groupSettings struct {
	keys, rounds int
	roundEvery   time.Duration // the producer publishes one message per key this often
	faultEvery   time.Duration
	instances    int
	timing       brokertest.Timing
	// schedule, when set, is the run's faults, one every faultEvery
	// whether or not the one before is over (see TestOrderedGroupPauses…);
	// without it the run cycles through a freeze, a kill, an addition and
	// a removal.
	schedule    []groupFault
	ackWait     time.Duration // NATS AckWait; 0: the default
	prefetch    int           // NATS Prefetch; 0: the default
	concurrency int           // each instance's inbox.ConsumerConfig.Concurrency
}

// groupRunSettings are the classic run's: faults far enough apart that
// each rebalance is over (a frozen instance back, a killed one replaced)
// before the next fault, so that each is measured alone.
func groupRunSettings() groupSettings {
	if testenv.Long() {
		return groupSettings{keys: 1000, rounds: 100, roundEvery: time.Second, faultEvery: 6 * time.Second, instances: 4, timing: groupTiming, concurrency: 8}
	}
	return groupSettings{keys: 400, rounds: 26, roundEvery: time.Second, faultEvery: 5500 * time.Millisecond, instances: 4, timing: groupTiming, concurrency: 8}
}

// groupTarget is a broker the group runs on.
type groupTarget struct {
	kind, url, name string
	publisher       broker.Publisher
	addrs           []string // the broker's host:port addresses, which a cut instance reaches through proxies
	// describe, when set, says how the broker sees the group, for a
	// failure's message.
	describe func() string
}

func TestOrderedGroupNATS(t *testing.T) {
	t.Parallel()
	runGroup(t, natsGroup(t), groupRunSettings())
}

// natsGroup is a current nats-server of the test's own, its stream and a
// publisher.
func natsGroup(t *testing.T) groupTarget {
	srv := testenv.StartNATSServer(t, testenv.NATSServerConfig{})
	nc := testenv.Connect(t, srv.URL)
	mapping := couriernats.Config{SubjectPrefix: "grp.", KeySubjects: true}
	testenv.Must(t, couriernats.EnsureStream(context.Background(), nc, mapping, couriernats.StreamConfig{Name: "GRP"}), "stream")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
	testenv.Must(t, err, "publisher")
	return groupTarget{kind: "nats", url: srv.URL, name: "group", publisher: pub, addrs: []string{hostOf(t, srv.URL)}}
}

func TestOrderedGroupKafka(t *testing.T) {
	t.Parallel()
	runGroup(t, kafkaGroup(t, groupTiming.Timeout), groupRunSettings())
}

// kafkaGroup is a kfake cluster of the test's own whose groups take
// sessions as short as minSession, its topic and a publisher.
func kafkaGroup(t *testing.T, minSession time.Duration) groupTarget {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(minSession))
	testenv.Must(t, err, "kfake")
	t.Cleanup(c.Close)
	raw := "kafka://" + strings.Join(c.ListenAddrs(), ",") + "?topic_prefix=grp."
	cfg, err := kafka.ParseURL(raw)
	testenv.Must(t, err, "parse the Kafka URL")
	adm, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	testenv.Must(t, err, "admin client")
	defer adm.Close()
	testenv.Must(t, kafka.EnsureTopic(context.Background(), adm, cfg, groupTopic, kafka.TopicConfig{Partitions: groupPartitions}), "topic")
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Config: cfg})
	testenv.Must(t, err, "publisher")
	t.Cleanup(pub.Close)
	return groupTarget{kind: "kafka", url: raw, name: "group", publisher: pub, addrs: cfg.Brokers,
		describe: func() string { return describeKafkaGroup(cfg.Brokers, "group") }}
}

// describeKafkaGroup says how the cluster sees group: its state and
// members.
func describeKafkaGroup(brokers []string, group string) string {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err.Error()
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	groups, err := kadm.NewClient(cl).DescribeGroups(ctx, group)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, g := range groups {
		fmt.Fprintf(&b, "group %s: state %s, protocol %s, %d members, error %v\n", g.Group, g.State, g.Protocol, len(g.Members), g.Err)
		for _, m := range g.Members {
			fmt.Fprintf(&b, "  member %s (client %s at %s)\n", m.MemberID, m.ClientID, m.ClientHost)
		}
	}
	return b.String()
}

func TestOrderedGroupRabbitMQ(t *testing.T) {
	t.Parallel()
	runGroup(t, amqpGroup(t), groupRunSettings())
}

// amqpGroup is an exchange and partition queues of the test's own on the
// machine's RabbitMQ, and a publisher.
func amqpGroup(t *testing.T) groupTarget {
	exchange, queue := testenv.Name("courier_grp_"), testenv.Name("grp_")
	raw := testenv.AMQP(t) + "?exchange=" + exchange + "&prefix=grp."
	cfg, err := amqp.ParseURL(raw)
	testenv.Must(t, err, "parse the AMQP URL")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Cleanup(func() {
		conn, err := amqp091.Dial(cfg.URL)
		if err != nil {
			t.Logf("delete the run's queues and exchanges: %v", err)
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		for p := range groupPartitions {
			_, _ = ch.QueueDelete(amqp.PartitionQueue(queue, p), false, false, false)
		}
		_ = ch.ExchangeDelete(amqp.PartitionExchange(queue), false, false)
		_ = ch.ExchangeDelete(amqp.MembersExchange(queue), false, false)
		_ = ch.ExchangeDelete(exchange, false, false)
	})
	testenv.Must(t, amqp.EnsureTopology(ctx, cfg, amqp.Topology{Queue: queue, Topics: []string{groupTopic}, Partitions: groupPartitions}), "topology")
	pub, err := amqp.NewPublisher(amqp.PublisherConfig{Config: cfg})
	testenv.Must(t, err, "publisher")
	t.Cleanup(func() { _ = pub.Close() })
	return groupTarget{kind: "amqp", url: raw, name: queue, publisher: pub, addrs: []string{hostOf(t, raw)}}
}

// hostOf returns the host:port of url.
func hostOf(t *testing.T, url string) string {
	u, err := neturl.Parse(url)
	testenv.Must(t, err, "parse "+url)
	return u.Host
}

// runGroupConsumer is an instance of the group's consumer: it applies each
// message as a row of effects, noting whether its key's previous message
// was committed before it.
func runGroupConsumer(ctx context.Context, log *slog.Logger) error {
	db, err := openDatabase(ctx, os.Getenv(envDB))
	if err != nil {
		return err
	}
	defer db.Close()
	concurrency, err := strconv.Atoi(os.Getenv(envGroupConcurrency))
	if err != nil {
		return fmt.Errorf("%s: %w", envGroupConcurrency, err)
	}
	db.SQL().SetMaxOpenConns(concurrency + 2) // the handlers' and the consumer store's
	sub, err := groupSubscriber(ctx, log)
	if err != nil {
		return err
	}
	defer sub.Close()
	pid := os.Getpid()
	slow, _ := time.ParseDuration(os.Getenv(envGroupSlow))
	apply := func(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
		seq, err := payloadSeq(msg)
		if err != nil {
			return err
		}
		if msg.Type == slowStep { // a statement that takes long, holding the message's marker
			if _, err := db.Exec(ctx, tx, `SELECT pg_sleep(?)`, slow.Seconds()); err != nil {
				return err
			}
		}
		_, err = db.Exec(ctx, tx, `INSERT INTO effects (message_id, k, seq, pid, after_previous)
VALUES (?, ?, ?, ?, ? = 1 OR EXISTS (SELECT 1 FROM effects WHERE k = ? AND seq = ? - 1))`,
			msg.ID.String(), msg.Key, seq, pid, seq, msg.Key, seq)
		return err
	}
	cfg := inbox.ConsumerConfig{KeepOrder: true, Concurrency: concurrency, MaxDeliveries: 1000, Group: groupedCommits,
		Backoff: courier.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond}, Logger: log}
	if wait, _ := time.ParseDuration(os.Getenv(envGroupAckWait)); wait > 0 {
		// Told too late that a slow handler is still at work: the broker
		// delivers its message again meanwhile.
		cfg.ExtendEvery = 2 * wait
	}
	return consume(ctx, db.Inbox(), "group", sub, db.ConsumerStore(), apply, cfg)
}

// slowStep is the type of the messages whose application takes
// envGroupSlow.
const slowStep = "SlowStep"

// groupSubscriber returns the instance's subscriber of the group's broker,
// with the run's timing, reaching the broker through the addresses
// envGroupDial gives.
func groupSubscriber(ctx context.Context, log *slog.Logger) (broker.Subscriber, error) {
	name, dial := os.Getenv(envGroupName), dialMap(os.Getenv(envGroupDial))
	url := redial(os.Getenv(envGroupURL), dial)
	tm, err := parseTiming(os.Getenv(envGroupTiming))
	if err != nil {
		return nil, err
	}
	ackWait, _ := time.ParseDuration(os.Getenv(envGroupAckWait))
	prefetch, _ := strconv.Atoi(os.Getenv(envGroupPrefetch))
	switch os.Getenv(envGroupKind) {
	case "nats":
		nc, err := couriernats.Connect(url)
		if err != nil {
			return nil, err
		}
		sub, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{
			Config: couriernats.Config{SubjectPrefix: "grp.", KeySubjects: true}, Stream: "GRP", Consumer: name, AckWait: ackWait, Prefetch: prefetch,
			Topics: []string{groupTopic}, Partitions: groupPartitions, MemberHeartbeat: tm.Heartbeat, MemberTimeout: tm.Timeout, Logger: log,
		})
		if err != nil {
			nc.Close()
			return nil, err
		}
		return testenv.Closing{Subscriber: sub, Also: nc.Close}, nil
	case "kafka":
		cfg, err := kafka.ParseURL(url)
		if err != nil {
			return nil, err
		}
		// The group's rebalance timeout (how long a rebalance waits for
		// the members to join again) in the same proportion to the session
		// as kgo's defaults (60s to 45s): a member that does not rejoin
		// holds the group back that long, a minute by default.
		var d net.Dialer
		return kafka.NewSubscriber(ctx, kafka.SubscriberConfig{Config: cfg, Group: name, Topics: []string{groupTopic}, Logger: log,
			Options: []kgo.Opt{kgo.SessionTimeout(tm.Timeout), kgo.HeartbeatInterval(tm.Heartbeat), kgo.RebalanceTimeout(tm.Timeout * 4 / 3),
				kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
					return d.DialContext(ctx, network, cmp.Or(dial[host], host))
				})}})
	case "amqp":
		cfg, err := amqp.ParseURL(url)
		if err != nil {
			return nil, err
		}
		// RabbitMQ closes a frozen instance's connection after two missed
		// heartbeats (half MemberTimeout by default), which hands its
		// partitions on.
		return amqp.NewSubscriber(ctx, amqp.SubscriberConfig{Config: cfg, Queue: name, Prefetch: 50,
			Partitions: groupPartitions, MemberHeartbeat: tm.Heartbeat, MemberTimeout: tm.Timeout, Logger: log})
	}
	return nil, fmt.Errorf("unknown %s %q", envGroupKind, os.Getenv(envGroupKind))
}

// formatTiming writes tm for envGroupTiming, which parseTiming reads.
func formatTiming(tm brokertest.Timing) string {
	return tm.Heartbeat.String() + "/" + tm.Timeout.String()
}

func parseTiming(s string) (brokertest.Timing, error) {
	h, to, _ := strings.Cut(s, "/")
	hb, err1 := time.ParseDuration(h)
	timeout, err2 := time.ParseDuration(to)
	if err := errors.Join(err1, err2); err != nil {
		return brokertest.Timing{}, fmt.Errorf("%s %q: %w", envGroupTiming, s, err)
	}
	return brokertest.Timing{Heartbeat: hb, Timeout: timeout}, nil
}

// dialMap reads envGroupDial: a=b,c=d.
func dialMap(s string) map[string]string {
	m := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		if from, to, ok := strings.Cut(pair, "="); ok {
			m[from] = to
		}
	}
	return m
}

// redial returns url with its host replaced as dial says (a Kafka URL's
// brokers are reached through the client's dialer instead).
func redial(url string, dial map[string]string) string {
	u, err := neturl.Parse(url)
	if err != nil || dial[u.Host] == "" || u.Scheme == "kafka" {
		return url
	}
	u.Host = dial[u.Host]
	return u.String()
}

// instance is one consumer process of a group run.
type instance struct {
	name    string
	cmd     *exec.Cmd
	done    chan struct{}    // closed once it exited
	proxies []*testenv.Proxy // between it and the broker, when the run cuts instances off
}

// groupRun is one run's state.
type groupRun struct {
	t     *testing.T
	tgt   groupTarget
	s     groupSettings
	env   []string
	logs  *os.File
	mu    sync.Mutex
	alive []*instance
	n     int // instances started
	// published[r][c] is when chunk c of round r (sequence r+1 of the
	// keys of the chunk) was handed to the publisher.
	published [][]time.Time
	faults    []groupFault
	slowRound int // the round whose first two keys' messages are slow to apply; 0: none
}

// groupChunks is how many calls a round is published in, spread over it.
const groupChunks = 10

// chunkOf returns the chunk of a round that key k (of keys) is published
// in.
func chunkOf(k, keys int) int { return k * groupChunks / keys }

// groupFault is one fault of a run: one in its schedule, or one it made.
type groupFault struct {
	kind string
	d    time.Duration // how long it lasts (a pause, a cut, a slow application)
	who  string
	at   time.Time
}

// groupSlow is how long applying a slowStep message takes in a run with
// settings s: longer than its NATS AckWait and its timeout.
func groupSlow(s groupSettings) time.Duration { return max(s.ackWait*3/2, s.timing.Timeout) }

func runGroup(t *testing.T, tgt groupTarget, s groupSettings) {
	consumer := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	_, err := consumer.Pool.Exec(ctx, `CREATE TABLE effects (n bigint GENERATED ALWAYS AS IDENTITY, message_id text NOT NULL, k text NOT NULL,
seq int NOT NULL, pid int NOT NULL, after_previous bool NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE INDEX ON effects (k, seq)`)
	testenv.Must(t, err, "effects table")
	logs, err := os.Create(filepath.Join(t.TempDir(), "consumers.log"))
	testenv.Must(t, err, "log file")
	r := &groupRun{t: t, tgt: tgt, s: s, logs: logs, env: []string{
		// A frozen instance's open transaction holds its message's inbox
		// marker, and so the key, until PostgreSQL ends it: after as long
		// as the others take to notice the instance is gone.
		envRole + "=" + groupConsumerRole, envDB + "=" + consumer.URL + fmt.Sprintf("&application_name=chaos_group&idle_in_transaction_session_timeout=%d", s.timing.Timeout.Milliseconds()),
		envGroupKind + "=" + tgt.kind, envGroupURL + "=" + tgt.url, envGroupName + "=" + tgt.name, envLogLevel + "=" + os.Getenv(envLogLevel),
		envGroupTiming + "=" + formatTiming(s.timing), envGroupSlow + "=" + groupSlow(s).String(),
		envGroupConcurrency + "=" + strconv.Itoa(s.concurrency),
	}}
	if s.ackWait > 0 {
		r.env = append(r.env, envGroupAckWait+"="+s.ackWait.String())
	}
	if s.prefetch > 0 {
		r.env = append(r.env, envGroupPrefetch+"="+strconv.Itoa(s.prefetch))
	}
	t.Cleanup(func() {
		r.stopAll()
		if t.Failed() {
			t.Logf("last lines of the consumers' log:\n%s", lastLines(logs.Name(), 60))
		}
		logs.Close()
	})
	for range s.instances {
		r.start()
	}
	t.Logf("%s: %d instances of one consumer, %d partitions, %d messages over %d keys, a round every %s, a fault every %s, heartbeat %s, timeout %s",
		tgt.kind, s.instances, groupPartitions, s.keys*s.rounds, s.keys, s.roundEvery, s.faultEvery, s.timing.Heartbeat, s.timing.Timeout)

	produced := make(chan struct{})
	go func() { defer close(produced); r.produce(ctx) }()
	r.makeFaults(produced)
	applied := r.settle(ctx, func(ctx context.Context, q string, args ...any) rowScanner {
		return consumer.Pool.QueryRow(ctx, q, args...)
	})
	r.stopAll()
	r.check(ctx, consumer, applied)
}

// start starts one more instance and returns its name.
func (r *groupRun) start() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), r.env...)
	var proxies []*testenv.Proxy
	if r.cuts() {
		var dial []string
		for _, addr := range r.tgt.addrs {
			p := testenv.StartProxy(r.t, addr)
			proxies = append(proxies, p)
			dial = append(dial, addr+"="+p.Addr())
		}
		cmd.Env = append(cmd.Env, envGroupDial+"="+strings.Join(dial, ","))
	}
	cmd.Stderr = r.logs
	testenv.Must(r.t, cmd.Start(), "start an instance")
	in := &instance{name: fmt.Sprintf("instance %d (pid %d)", r.n, cmd.Process.Pid), cmd: cmd, done: make(chan struct{}), proxies: proxies}
	go func() { _ = cmd.Wait(); close(in.done) }()
	r.alive = append(r.alive, in)
	return in.name
}

// cuts reports whether the run cuts instances off the broker.
func (r *groupRun) cuts() bool {
	for _, f := range r.s.schedule {
		if f.kind == "cut" {
			return true
		}
	}
	return false
}

// pick takes one instance out of the alive ones: the oldest, or the newest.
func (r *groupRun) pick(newest bool) *instance {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.alive) == 0 {
		return nil
	}
	i := 0
	if newest {
		i = len(r.alive) - 1
	}
	in := r.alive[i]
	r.alive = slices.Delete(r.alive, i, i+1)
	return in
}

// stopAll stops every instance with SIGTERM (SIGCONT first: it may be
// frozen), and waits for them.
func (r *groupRun) stopAll() {
	for in := r.pick(false); in != nil; in = r.pick(false) {
		_ = in.cmd.Process.Signal(syscall.SIGCONT)
		_ = in.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-in.done:
		case <-time.After(30 * time.Second):
			if r.tgt.describe != nil {
				r.t.Logf("the broker's view of the group:\n%s", r.tgt.describe())
			}
			r.t.Errorf("%s did not stop within 30s of SIGTERM; its goroutines:\n%s", in.name, r.stacks(in))
			r.dumpStacks() // the others', which it may wait for
		}
	}
}

// dumpStacks ends every instance alive with SIGQUIT and logs their
// goroutines.
func (r *groupRun) dumpStacks() {
	for in := r.pick(false); in != nil; in = r.pick(false) {
		r.t.Logf("%s's goroutines:\n%s", in.name, r.stacks(in))
	}
}

// produce publishes the rounds, one message per key each, a round every
// roundEvery in groupChunks calls spread over it: a key's next message only
// once its previous one is acknowledged, so the broker holds each key's
// messages in order.
func (r *groupRun) produce(ctx context.Context) {
	tick := time.NewTicker(r.s.roundEvery / groupChunks)
	defer tick.Stop()
	for round := range r.s.rounds {
		r.mu.Lock()
		r.published = append(r.published, make([]time.Time, groupChunks))
		r.mu.Unlock()
		for c := range groupChunks {
			r.mu.Lock()
			slow := round+1 == r.slowRound
			r.mu.Unlock()
			var msgs []courier.Message
			for k := range r.s.keys {
				if chunkOf(k, r.s.keys) == c {
					typ := "Step"
					if slow && k%(r.s.keys/groupChunks) < 2 {
						typ = slowStep // the first two keys of each chunk
					}
					msgs = append(msgs, courier.NewMessage(groupTopic, fmt.Sprintf("k%d", k), typ, []byte(strconv.Itoa(round+1))))
				}
			}
			r.mu.Lock()
			r.published[round][c] = time.Now()
			r.mu.Unlock()
			for len(msgs) > 0 {
				var again []courier.Message
				for i, err := range r.tgt.publisher.Publish(ctx, msgs) {
					if err != nil {
						again = append(again, msgs[i])
					}
				}
				if msgs = again; len(msgs) > 0 {
					time.Sleep(100 * time.Millisecond)
				}
			}
			<-tick.C
		}
	}
}

// makeFaults makes a fault every faultEvery until the producer is done:
// in turn an instance frozen past its heartbeat, one SIGKILLed (and
// another started a second later, as an orchestrator would), one added and
// one removed (SIGTERM).
func (r *groupRun) makeFaults(produced <-chan struct{}) {
	if r.s.schedule != nil {
		r.runSchedule(produced)
		return
	}
	kinds := []string{"freeze", "kill", "add", "remove"}
	for i := 0; ; i++ {
		select {
		case <-produced:
			return
		case <-time.After(r.s.faultEvery):
		}
		f := groupFault{kind: kinds[i%len(kinds)], at: time.Now()}
		if f.kind == "freeze" {
			f.d = groupFreeze
		}
		switch f.kind {
		case "freeze":
			in := r.pick(false)
			f.who = in.name
			_ = in.cmd.Process.Signal(syscall.SIGSTOP)
			time.AfterFunc(groupFreeze, func() { _ = in.cmd.Process.Signal(syscall.SIGCONT) })
			r.mu.Lock()
			r.alive = append(r.alive, in)
			r.mu.Unlock()
		case "kill":
			in := r.pick(false)
			f.who = in.name
			_ = in.cmd.Process.Kill()
			<-in.done
			time.Sleep(time.Second)
			r.start()
		case "add":
			f.who = r.start()
		case "remove":
			in := r.pick(true)
			f.who = in.name
			_ = in.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-in.done:
			case <-time.After(30 * time.Second):
				r.t.Errorf("%s did not stop within 30s of SIGTERM", in.name)
			}
		}
		r.mu.Lock()
		r.faults = append(r.faults, f)
		r.mu.Unlock()
	}
}

// settle waits until every message published was applied, or nothing
// moves for a minute, and returns how many were.
func (r *groupRun) settle(ctx context.Context, query func(context.Context, string, ...any) rowScanner) int {
	want, last, since := r.s.keys*r.s.rounds, -1, time.Now()
	for {
		var n int
		if err := query(ctx, `SELECT count(DISTINCT message_id) FROM effects`).Scan(&n); err != nil {
			r.t.Logf("settling: %v", err)
		}
		if n >= want {
			return n
		}
		if n != last {
			last, since = n, time.Now()
		}
		if time.Since(since) > time.Minute {
			r.t.Errorf("%d of %d messages applied, and none more for a minute", n, want)
			if r.tgt.describe != nil {
				r.t.Logf("the broker's view of the group:\n%s", r.tgt.describe())
			}
			r.dumpStacks()
			return n
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stacks ends in with SIGQUIT, which makes it write its goroutines' stacks
// to the log, and returns what it wrote there (with the other instances'
// lines of the moment).
func (r *groupRun) stacks(in *instance) string {
	from, _ := r.logs.Seek(0, io.SeekCurrent)
	_ = in.cmd.Process.Signal(syscall.SIGCONT)
	_ = in.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-in.done:
	case <-time.After(5 * time.Second):
		_ = in.cmd.Process.Kill()
		<-in.done
	}
	to, _ := r.logs.Seek(0, io.SeekCurrent)
	buf := make([]byte, min(to-from, 512<<10))
	n, _ := r.logs.ReadAt(buf, from)
	return string(buf[:n])
}

// rowScanner is a row of a query.
type rowScanner interface{ Scan(dest ...any) error }

// check verifies the promise and reports the rebalances.
func (r *groupRun) check(ctx context.Context, db *testenv.PG, applied int) {
	t := r.t
	var twice, early int
	err := db.Pool.QueryRow(ctx, `SELECT count(*) - count(DISTINCT message_id), count(*) FILTER (WHERE NOT after_previous) FROM effects`).Scan(&twice, &early)
	testenv.Must(t, err, "count")
	rows, err := db.Pool.Query(ctx, `SELECT k, seq, applied_at FROM effects ORDER BY n`)
	testenv.Must(t, err, "effects")
	next := map[string]int{}
	outOfOrder := 0
	appliedAt := map[string][]time.Time{} // key -> when each seq was applied
	for rows.Next() {
		var k string
		var seq int
		var at time.Time
		testenv.Must(t, rows.Scan(&k, &seq, &at), "scan")
		if seq != next[k]+1 {
			if outOfOrder < 5 {
				t.Errorf("key %s: sequence %d applied after %d", k, seq, next[k])
			}
			outOfOrder++
		}
		next[k] = max(next[k], seq)
		appliedAt[k] = append(appliedAt[k], at)
	}
	testenv.Must(t, rows.Err(), "effects")
	lost := r.s.keys*r.s.rounds - applied
	t.Logf("%s: %d messages published, %d lost, %d applied twice, %d out of key order, %d applied before their key's previous one committed; %d instances started",
		r.tgt.kind, r.s.keys*r.s.rounds, lost, twice, outOfOrder, early, r.n)
	if lost != 0 || twice != 0 || outOfOrder != 0 || early != 0 {
		t.Errorf("the promise broke: %d lost, %d applied twice, %d out of key order, %d before their key's previous message", lost, twice, outOfOrder, early)
	}
	if outOfOrder != 0 || early != 0 {
		r.explain(ctx, db)
	}
	r.reportRebalances(appliedAt)
}

// explain logs, for the first keys whose order broke, their effects around
// the break (who applied each, when) and the consumers' log lines that name
// those messages.
func (r *groupRun) explain(ctx context.Context, db *testenv.PG) {
	rows, err := db.Pool.Query(ctx, `SELECT DISTINCT k FROM effects e WHERE NOT after_previous
OR seq <> 1 + coalesce((SELECT max(seq) FROM effects p WHERE p.k = e.k AND p.n < e.n), 0) LIMIT 3`)
	testenv.Must(r.t, err, "broken keys")
	var keys []string
	for rows.Next() {
		var k string
		testenv.Must(r.t, rows.Scan(&k), "scan")
		keys = append(keys, k)
	}
	testenv.Must(r.t, rows.Err(), "broken keys")
	log := readFile(r.logs.Name())
	for _, k := range keys {
		rows, err := db.Pool.Query(ctx, `SELECT message_id, seq, pid, after_previous, applied_at FROM effects WHERE k = $1 ORDER BY n`, k)
		testenv.Must(r.t, err, "effects of "+k)
		var b strings.Builder
		var ids []string
		for rows.Next() {
			var id string
			var seq, pid int
			var after bool
			var at time.Time
			testenv.Must(r.t, rows.Scan(&id, &seq, &pid, &after, &at), "scan")
			fmt.Fprintf(&b, "  seq %3d  pid %d  after previous %-5v  at %s  %s\n", seq, pid, after, at.Format("15:04:05.000"), id)
			ids = append(ids, id)
		}
		testenv.Must(r.t, rows.Err(), "effects of "+k)
		for _, line := range strings.SplitAfter(log, "\n") {
			if slices.ContainsFunc(ids, func(id string) bool { return strings.Contains(line, id) }) {
				b.WriteString("  | " + line)
			}
		}
		r.t.Logf("key %s, its effects in the order inserted, and the log lines of its messages:\n%s", k, b.String())
	}
}

// reportRebalances logs, for each fault, the longest a message published
// in the half second after it waited to be applied, and the same for
// stretches without faults.
func (r *groupRun) reportRebalances(appliedAt map[string][]time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// worst returns the longest wait of a message published in [from, to).
	worst := func(from, to time.Time) time.Duration {
		var w time.Duration
		for key, ats := range appliedAt {
			k, _ := strconv.Atoi(strings.TrimPrefix(key, "k"))
			for round, at := range ats {
				if pub := r.published[round][chunkOf(k, r.s.keys)]; !pub.Before(from) && pub.Before(to) {
					w = max(w, at.Sub(pub))
				}
			}
		}
		return w
	}
	kinds := map[string]int{}
	var lines []string
	for _, f := range r.faults {
		kinds[f.kind]++
		lines = append(lines, fmt.Sprintf("  %-6s %-8s %-28s at %5.1fs: a message published in the next 500ms waited %s",
			f.kind, f.d, f.who, f.at.Sub(r.published[0][0]).Seconds(), worst(f.at, f.at.Add(500*time.Millisecond)).Round(time.Millisecond)))
	}
	var all []time.Duration
	for key, ats := range appliedAt {
		k, _ := strconv.Atoi(strings.TrimPrefix(key, "k"))
		for round, at := range ats {
			all = append(all, at.Sub(r.published[round][chunkOf(k, r.s.keys)]))
		}
	}
	slices.Sort(all)
	pct := func(p float64) time.Duration {
		return all[min(len(all)-1, int(p*float64(len(all))))].Round(time.Millisecond)
	}
	r.t.Logf("%s: rebalances (%v faults):\n%s\n  every message, from publish to applied: p50 %s, p99 %s, max %s",
		r.tgt.kind, kinds, strings.Join(lines, "\n"), pct(0.5), pct(0.99), pct(1))
	if r.s.schedule != nil {
		if len(r.faults) != len(r.s.schedule) {
			r.t.Errorf("the run made %d of its %d faults: make it longer", len(r.faults), len(r.s.schedule))
		}
		return
	}
	for _, k := range []string{"freeze", "kill", "add", "remove"} {
		if kinds[k] == 0 {
			r.t.Errorf("the run made no %q fault: make it longer", k)
		}
	}
}
