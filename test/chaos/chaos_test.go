// Package chaos drives relays, consumers and a NATS server, each a process
// of its own, through crashes and outages while a producer writes, then
// checks that nothing was lost, applied twice or reordered, on each SQL
// dialect (TestChaos/postgres, /mysql, /sqlite). It does the same to
// relays publishing to RabbitMQ, Kafka and a webhook endpoint (the
// transport runs, below), to relays killed while scheduled messages fall
// due (TestScheduledRelayKills), and to consumers upgraded to a new version
// of an event mid-stream (TestConsumersUpgradedMidStream). The reference
// shop's run under process kills is the shop's own
// (cmd/courier/internal/shop/chaos).
//
//	go test ./test/chaos                  # the short runs CI does (under a minute each)
//	go test ./test/chaos -run . -long     # 100,000 messages per dialect, 30,000 per transport, 100,000 per consumer group, 10 minutes of CDC kills per mode and 5 of scheduled messages, minutes of chaos
//
// TestChaos's faults: relays and consumers killed, relays stopped past their
// lease (by the test, and by themselves in the middle of a claim, see
// freezingStore), NATS killed, stalled and briefly down again and again,
// database sessions cut (pg_terminate_backend, KILL CONNECTION; SQLite has
// none, so every relay and consumer is killed at once), poison messages with
// a deep backlog on their key, and messages on a subject no stream binds.
// Besides loss, duplicates and per-key order it checks that the expected
// dead letters (and only they) exist, that the other relays keep publishing
// while one is stopped, and that other keys flow while a poison message is
// retried.
//
// It needs PostgreSQL (COURIER_TEST_POSTGRES_URL) and MySQL or MariaDB
// (COURIER_TEST_MYSQL_URL); SQLite runs on files, NATS embedded in a child
// process it can kill.
//
// The transport runs start several relay processes on one outbox, mostly
// `courier relay --broker-url …` itself (built from this module with the
// race detector when the tests have it, or the binary COURIER_CHAOS_COURIER
// names), and an inbox consumer in the test process that reads what
// reached the broker, in the order the broker delivers it, and applies
// each message once by its id:
//
//   - TestRelayKillsRabbitMQ and TestRelayKillsKafka SIGKILL relays one
//     after another, some just after a backlog was written at once, while
//     they publish to RabbitMQ (COURIER_TEST_AMQP_URL; a quorum queue with a
//     single active consumer) and to Kafka (kfake, franz-go's cluster,
//     started by the test and reached over its TCP listeners).
//   - TestRabbitMQRestartMidDrain stops RabbitMQ's application and starts
//     it again (rabbitmqctl stop_app, start_app) twice while the relays
//     drain a backlog, on a RabbitMQ node of its own
//     (COURIER_TEST_RABBITMQ_SERVER), so that the machine's broker, which
//     other packages' tests use meanwhile, stays up.
//   - TestWebhookEndpointFaults puts a webhook endpoint (a webhook.Handler
//     feeding the inbox) behind a server that for a while answers 503 with
//     Retry-After, stalls past the sender's timeout, resets connections
//     (before the handler, and after it applied the message), then
//     recovers, while relays are SIGKILLed now and then. Its relays are this
//     test binary's, with a one-second request timeout and circuit breaker;
//     with -long `courier relay` runs it too, with its defaults (10s
//     requests, a 30s breaker), and recovers in about a minute.
//
// TestOrderedGroupNATS, TestOrderedGroupKafka and TestOrderedGroupRabbitMQ
// run four instances of one consumer, each a process, that share a topic's
// keys (broker.KeySharer: NATS and RabbitMQ subscribers with Partitions, a
// Kafka consumer group) and keep their order (inbox KeepOrder), while the
// test publishes a steady stream and freezes one past its heartbeat, kills
// one, adds one and removes one: nothing lost, applied twice or applied
// before an earlier message of its key, and the wait each fault caused (see
// groups_test.go). NATS runs on COURIER_TEST_NATS_SERVER (partitions need
// nats-server 2.10 or later), RabbitMQ needs its consistent-hash plugin.
//
// TestCDCRelayKills does the same to `courier relay --mode cdc`: two relay
// processes at a time, each SIGKILLed 0.3–3s after it began relaying, walsenders
// terminated now and then, while writers commit to the table (rows) or to
// the log only (tableless); it compares the JetStream stream with what was
// committed (nothing lost, no duplicate, every key in commit order) and
// counts the publishes on the wire (fewer than 1.5 a message).
//
// Their relays count 3 failed attempts at most, so an outage counted
// against the messages would show as dead letters; the checker (check)
// wants none, nothing lost, nothing applied twice and every key in order.
// They run on PostgreSQL when COURIER_TEST_POSTGRES_URL is set and on SQLite
// files otherwise; Kafka's and the webhook's need no service.
//
// TestHeldKeys puts poison messages in the middle of 1,000 keys that
// `courier relay --hold-keys` processes (polling, and --mode cdc) and an
// inbox consumer with HoldKeys hold, kills them meanwhile, then replays
// some of the poison messages and discards the others under load: per-key
// order across the release, nothing published while held, nothing lost
// or applied twice (see held_test.go).
package chaos

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
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

func TestMain(m *testing.M) {
	runRole()
	flag.Parse()
	code := testenv.M(m).Run()
	testenv.RemoveCourierBinary()
	os.Exit(code)
}

// settings of one run.
type settings struct {
	messages, keys, partitions, relays int
	chaosFor                           time.Duration
	// poisonBacklog is how many messages follow each poison message on its
	// key; maxPoisons caps the poison injections of a run.
	poisonBacklog, maxPoisons int
}

func (s settings) String() string {
	return fmt.Sprintf("%d messages over %d keys, %d relays, %d consumers, %s of faults, up to %d poison messages with %d behind each",
		s.messages, s.keys, s.relays, s.partitions, s.chaosFor, s.maxPoisons, s.poisonBacklog)
}

// The run's topics are the partitions part0…part{N-1}, which the stream
// binds, and unboundTopic, which no stream binds: a publish there can never
// succeed, so its messages must end as dead letters.
const unboundTopic = "unbound"

// poisonKey is the key of the poison messages, which the broker rejects on
// every attempt (their payload exceeds the stream's maxMsgSize), and of the
// backlog written behind each of them.
const poisonKey = "poison"

// maxMsgSize is the stream's limit on a message's size.
const maxMsgSize = 64 << 10

// measureFor is how long the test watches the others publish while a relay
// is stopped and its lease has run out.
const measureFor = 2 * time.Second

func TestChaos(t *testing.T) {
	t.Parallel()
	s := settings{messages: 5000, keys: 200, partitions: 2, relays: 2, chaosFor: 30 * time.Second, poisonBacklog: 1500, maxPoisons: 2}
	if testenv.Long() {
		s = settings{messages: 100000, keys: 1000, partitions: 4, relays: 3, chaosFor: 5 * time.Minute, poisonBacklog: 10000, maxPoisons: 5}
	}
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) { t.Parallel(); runChaos(t, d, s) })
	}
}

// run is the state of one dialect's chaos run.
type run struct {
	t       *testing.T
	began   time.Time
	s       settings
	dialect string
	db      *databases
	stream  string
	token   string              // held by the relay that is stopped (see takeFreezeToken)
	js      jetstream.JetStream // the test's own view of the stream
	// delivered is what the consumer received, in order, on a broker
	// whose log the test does not read back itself (js is nil then).
	delivered *deliveryLog

	natsProc          *testenv.Proc
	relays, consumers []*testenv.Proc

	// faultMu is held while a fault is under way and while the test
	// watches the others work during a relay's pause, so that no other
	// fault disturbs what it measures.
	faultMu sync.Mutex

	mu        sync.Mutex
	faults    map[string]int
	pauses    []pause
	poisons   []poisoning
	extra     []written // poison, backlog and unbound messages, as written
	poisonSeq int
	unbound   int
}

func (r *run) count(fault string, n int) {
	r.mu.Lock()
	r.faults[fault] += n
	r.mu.Unlock()
}

func runChaos(t *testing.T, d dialect, s settings) {
	began := time.Now()
	t.Logf("chaos run on %s: %s", d.name, s)
	ctx := context.Background()
	r := &run{t: t, began: began, s: s, dialect: d.name, db: d.setup(t), faults: map[string]int{}}

	port := testenv.FreePort(t)
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", port)
	r.stream = testenv.Name("CHAOS")
	prefix := strings.ToLower(r.stream) + "."
	common := []string{envNATS + "=" + natsURL, envPrefix + "=" + prefix, envStream + "=" + r.stream}
	// Relays freeze themselves mid-claim while this file exists.
	freezeFlag := filepath.Join(t.TempDir(), "freeze")
	testenv.Must(t, os.WriteFile(freezeFlag, nil, 0o600), "freeze flag")
	r.token = freezeFlag + ".token"

	all := r.describeProcs(port, freezeFlag, common)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	r.natsProc.Supervise(t, stop, &wg)
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	r.createStream(ctx, natsURL, prefix)
	for _, p := range all[1:] {
		p.Supervise(t, stop, &wg)
	}

	// The producer writes at a pace that spreads the messages over the chaos.
	written := r.produce()

	stopSampling := testenv.Every(500*time.Millisecond, func() {
		for _, p := range all {
			p.Sample()
		}
	})
	defer stopSampling()
	watching := make(chan struct{})
	var watcher sync.WaitGroup
	watcher.Go(func() { r.watchFreezes(ctx, watching) })
	stopWatching := sync.OnceFunc(func() { close(watching); watcher.Wait() })
	defer stopWatching()

	r.runFaults(ctx)
	testenv.Must(t, os.Remove(freezeFlag), "end the freezes")
	msgs := <-written
	r.mu.Lock()
	msgs = append(msgs, r.extra...)
	t.Logf("faults on %s: %v", d.name, r.faults)
	r.mu.Unlock()

	// Everything written must come out the other end, once, in key order,
	// or be a dead letter where one is expected.
	res := check(t, ctx, r, msgs)
	stopWatching()
	close(stop)
	wg.Wait()
	stopSampling()
	for _, p := range all {
		t.Logf("%-12s %2d runs, peak RSS %6.1f MiB", p.Name, p.Runs(), float64(p.PeakKiB())/1024)
	}
	r.reportPauses()
	r.reportPoisons()
	r.mu.Lock()
	t.Logf("summary %s: %s; faults %v; %s; %s of faults, settled %s later, %s in all",
		d.name, res.messages, r.faults, res, s.chaosFor, res.settled.Round(100*time.Millisecond),
		time.Since(began).Round(100*time.Millisecond))
	r.mu.Unlock()
}

// describeProcs describes the run's processes: NATS on port, the relays
// (which freeze themselves while freezeFlag exists) and the consumers, the
// last two with common in their environment. It returns them all, NATS
// first.
func (r *run) describeProcs(port int, freezeFlag string, common []string) []*testenv.Proc {
	r.natsProc = &testenv.Proc{Name: "nats", Env: []string{envRole + "=nats", envDir + "=" + filepath.Join(r.t.TempDir(), "nats"), envPort + "=" + strconv.Itoa(port)}}
	for i := range r.s.relays {
		r.relays = append(r.relays, &testenv.Proc{Name: fmt.Sprintf("relay %d", i), Env: append([]string{envRole + "=relay",
			envDB + "=" + r.db.relayURL(i), envFail + "=0.02", envFreeze + "=0.02", envFreezeWhile + "=" + freezeFlag}, common...)})
	}
	for i := range r.s.partitions {
		r.consumers = append(r.consumers, &testenv.Proc{Name: fmt.Sprintf("consumer %d", i), Env: append([]string{envRole + "=consumer",
			envDB + "=" + r.db.consumerURL(i), envTopic + "=" + fmt.Sprintf("part%d", i),
			envDup + "=0.02", envReorder + "=0.02"}, common...)})
	}
	return append(append([]*testenv.Proc{r.natsProc}, r.relays...), r.consumers...)
}

// runFaults runs faults, at random, until the run's time is up; every kind
// at least once.
func (r *run) runFaults(ctx context.Context) {
	faults := r.faultKinds()
	total := 0
	for _, f := range faults {
		total += f.weight
	}
	// Pauses take their time: the first round may overrun a little.
	deadline := time.Now().Add(r.s.chaosFor)
	for round := 0; time.Now().Before(deadline) || round < len(faults) && time.Now().Before(deadline.Add(r.s.chaosFor/3)); round++ {
		time.Sleep(time.Duration(300+rand.IntN(1200)) * time.Millisecond)
		f := faults[round%len(faults)]
		if round >= len(faults) {
			n := rand.IntN(total)
			for _, f = range faults {
				if n -= f.weight; n < 0 {
					break
				}
			}
		}
		r.faultMu.Lock()
		f.do(ctx)
		r.faultMu.Unlock()
	}
}

// createStream waits for the NATS process, then creates the run's stream:
// it binds the partitions' subjects only, and refuses messages over
// maxMsgSize. The relays' EnsureStream leaves it as it is.
func (r *run) createStream(ctx context.Context, url, prefix string) {
	t := r.t
	var nc *natsgo.Conn
	var err error
	deadline := time.Now().Add(20 * time.Second)
	for {
		nc, err = natsgo.Connect(url, natsgo.MaxReconnects(-1), natsgo.ReconnectWait(100*time.Millisecond))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	testenv.Must(t, err, "connect to the NATS process")
	t.Cleanup(nc.Close)
	r.js, err = jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	subjects := make([]string, r.s.partitions)
	for i := range subjects {
		subjects[i] = fmt.Sprintf("%spart%d", prefix, i)
	}
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = r.js.CreateStream(cctx, jetstream.StreamConfig{Name: r.stream, Subjects: subjects, Storage: jetstream.FileStorage,
			Duplicates: 2 * time.Minute, MaxMsgSize: maxMsgSize})
		cancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	testenv.Must(t, err, "create the stream")
}

// streamMsgs returns how many messages the stream holds: every message
// published so far, once (JetStream drops re-publications by message id).
func (r *run) streamMsgs(ctx context.Context) (uint64, bool) {
	for range 30 {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := r.js.Stream(cctx, r.stream)
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = st.Info(cctx); err == nil {
				cancel()
				return info.State.Msgs, true
			}
		}
		cancel()
		time.Sleep(100 * time.Millisecond)
	}
	return 0, false
}

// pendingWork counts the outbox rows other than the poison key's and the
// unbound topic's, which the relays can publish. Where rows have locks, it
// leaves out those another transaction holds: a relay stopped while it
// records its batch holds that batch's rows, which it has published, until
// it resumes; the others publish them again and leave them to it (see
// store/mysql, lockRowsSQL), so they are no work left for the others.
func (r *run) pendingWork(ctx context.Context) int64 {
	const rows = ` FROM courier_outbox WHERE topic <> '` + unboundTopic + `' AND ordering_key <> '` + poisonKey + `'`
	var n int64
	err := func() error {
		if r.db.producerDB.SerialWrites() { // SQLite: no row locks
			return r.db.producer.QueryRowContext(ctx, `SELECT count(*)`+rows).Scan(&n)
		}
		tx, err := r.db.producer.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // it only locked, to count
		ids, err := tx.QueryContext(ctx, `SELECT id`+rows+` FOR UPDATE SKIP LOCKED`)
		if err != nil {
			return err
		}
		defer ids.Close()
		for ids.Next() {
			n++
		}
		return ids.Err()
	}()
	if err != nil {
		r.t.Logf("count pending work: %v", err)
		return -1
	}
	return n
}

// A fault kind of the random mix. do runs it (under faultMu) and counts it.
type faultKind struct {
	name   string
	weight int
	do     func(ctx context.Context)
}

// faultKinds lists the faults, the ones that matter most first (the first
// round of the run goes through them in order).
func (r *run) faultKinds() []faultKind {
	pick := func(ps []*testenv.Proc) *testenv.Proc { return ps[rand.IntN(len(ps))] }
	return []faultKind{
		{"poison message with a backlog", 1, r.injectPoison},
		{"messages on an unbound subject", 1, r.injectUnbound},
		{"short NATS outages", 3, func(context.Context) {
			// Down for 0.5–1s, up for 1–1.5s, two to four times.
			for i := range 2 + rand.IntN(3) {
				if i > 0 {
					time.Sleep(time.Duration(1000+rand.IntN(500)) * time.Millisecond)
				}
				r.natsDown(time.Duration(500+rand.IntN(500)) * time.Millisecond)
				r.count("NATS down for 0.5–1s", 1)
			}
		}},
		{"relay paused past its lease", 1, r.pauseRelay},
		{"database sessions cut", 2, r.cutSessions},
		{"relay SIGKILL", 2, func(context.Context) {
			pick(r.relays).Signal(syscall.SIGKILL)
			r.count("relay SIGKILL", 1)
		}},
		{"consumer SIGKILL", 1, func(context.Context) {
			pick(r.consumers).Signal(syscall.SIGKILL)
			r.count("consumer SIGKILL", 1)
		}},
		{"NATS killed", 1, func(context.Context) {
			r.natsDown(time.Duration(500+rand.IntN(2500)) * time.Millisecond)
			r.count("NATS down for 0.5–3s", 1)
		}},
		{"NATS stalled", 1, func(context.Context) {
			// Connections stay up, nothing answers: publishes time out.
			r.natsProc.Signal(syscall.SIGSTOP)
			time.Sleep(time.Duration(500+rand.IntN(500)) * time.Millisecond)
			r.natsProc.Signal(syscall.SIGCONT)
			r.count("NATS stalled (SIGSTOP) for 0.5–1s", 1)
		}},
		// Breathing room: faults need quiet moments to be survived.
		{"nothing", 1, func(context.Context) {}},
	}
}

// natsDown kills the NATS process and restarts it after d.
func (r *run) natsDown(d time.Duration) {
	p := r.natsProc
	p.Hold(true)
	p.Signal(syscall.SIGKILL)
	time.Sleep(d)
	p.Hold(false)
}

// cutSessions ends every relay's and consumer's database sessions; SQLite
// has none, so there the processes themselves are killed, all at once.
func (r *run) cutSessions(ctx context.Context) {
	if r.db.terminate == nil {
		for _, p := range append(append([]*testenv.Proc(nil), r.relays...), r.consumers...) {
			p.Signal(syscall.SIGKILL)
		}
		r.count("every relay and consumer SIGKILLed at once", 1)
		return
	}
	n, err := r.db.terminate(ctx)
	if err != nil {
		r.t.Logf("cut database sessions: %v", err)
	}
	r.count(r.db.terminated, n)
	r.count("database session cuts", 1)
}

// written is one message as the test committed it. dead says why it is
// expected to end as a dead letter instead of being applied ("" when it
// must be applied).
type written struct {
	id   string
	key  string
	seq  int
	dead string
}

// Reasons for expected dead letters.
const (
	deadPoison  = "poison"
	deadUnbound = "unbound subject"
)

func partition(key string, partitions int) string {
	return fmt.Sprintf("part%d", fnv(key)%uint32(partitions))
}

// produce writes s.messages messages, seq increasing per key, in small
// transactions from one goroutine, spread over s.chaosFor; the channel
// yields them when done.
func (r *run) produce() <-chan []written {
	s := r.s
	out := make(chan []written, 1)
	go func() {
		var all []written
		seq := map[string]int{}
		pace := s.chaosFor * 8 / 10 / time.Duration(s.messages/10)
		for len(all) < s.messages {
			n := min(10, s.messages-len(all))
			msgs := make([]courier.Message, n)
			batch := make([]written, n)
			for i := range msgs {
				k := fmt.Sprintf("k%d", rand.IntN(s.keys))
				seq[k]++
				msgs[i] = courier.NewMessage(partition(k, s.partitions), k, "Step", []byte(strconv.Itoa(seq[k])))
				batch[i] = written{id: msgs[i].ID.String(), key: k, seq: seq[k]}
			}
			if err := r.db.write(context.Background(), msgs); err != nil {
				// Not written: take the sequence numbers back and retry.
				for _, b := range batch {
					seq[b.key]--
				}
				time.Sleep(50 * time.Millisecond)
				continue
			}
			all = append(all, batch...)
			time.Sleep(pace)
		}
		out <- all
	}()
	return out
}

// writeAll commits msgs in one transaction, retrying with fresh message ids
// until it succeeds; build makes the messages.
func (r *run) writeAll(ctx context.Context, build func() ([]courier.Message, []written)) {
	for attempt := 0; ; attempt++ {
		msgs, ws := build()
		err := r.db.write(ctx, msgs)
		if err == nil {
			r.mu.Lock()
			r.extra = append(r.extra, ws...)
			r.mu.Unlock()
			return
		}
		if attempt == 100 {
			r.t.Fatalf("write %d messages: %v", len(msgs), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// poisoning is what became of one poison message.
type poisoning struct {
	deadAfter time.Duration // from its commit to its dead letter; 0: not seen dead
	published uint64        // messages of other keys published meanwhile
	pending   int64         // other work pending when it was written
}

// injectPoison writes a message of poisonKey that the broker rejects on
// every attempt, then a backlog of s.poisonBacklog messages of the same key
// behind it, and watches the poison become a dead letter while other keys
// keep flowing.
func (r *run) injectPoison(ctx context.Context) {
	r.mu.Lock()
	if len(r.poisons) >= r.s.maxPoisons {
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	topic := partition(poisonKey, r.s.partitions)
	next := func(dead string, payload []byte) (courier.Message, written) {
		r.poisonSeq++
		m := courier.NewMessage(topic, poisonKey, "Step", append([]byte(strconv.Itoa(r.poisonSeq)), payload...))
		return m, written{id: m.ID.String(), key: poisonKey, seq: r.poisonSeq, dead: dead}
	}
	var id string
	c0, _ := r.streamMsgs(ctx)
	pending := r.pendingWork(ctx)
	r.writeAll(ctx, func() ([]courier.Message, []written) {
		r.poisonSeq = r.lastPoisonSeq()
		m, w := next(deadPoison, append([]byte(" "), make([]byte, 2*maxMsgSize)...))
		id = w.id
		return []courier.Message{m}, []written{w}
	})
	wrote := time.Now()
	for left := r.s.poisonBacklog; left > 0; {
		n := min(left, 100)
		r.writeAll(ctx, func() ([]courier.Message, []written) {
			r.poisonSeq = r.lastPoisonSeq()
			msgs, ws := make([]courier.Message, n), make([]written, n)
			for i := range n {
				msgs[i], ws[i] = next("", nil)
			}
			return msgs, ws
		})
		left -= n
	}
	// The broker rejects it for good, so its first attempt makes it a dead
	// letter: a few seconds at most, unless relays are down meanwhile.
	p := poisoning{pending: pending}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if r.isDead(ctx, id) {
			p.deadAfter = time.Since(wrote)
			break
		}
	}
	if c1, ok := r.streamMsgs(ctx); ok && c1 > c0 {
		p.published = c1 - c0
	}
	r.mu.Lock()
	r.poisons = append(r.poisons, p)
	r.mu.Unlock()
	r.count("poison message with a backlog of "+strconv.Itoa(r.s.poisonBacklog), 1)
}

// lastPoisonSeq is the seq of the last poison-key message written; a failed
// write's numbers are reused.
func (r *run) lastPoisonSeq() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := 0
	for _, w := range r.extra {
		if w.key == poisonKey {
			last = max(last, w.seq)
		}
	}
	return last
}

func (r *run) isDead(ctx context.Context, id string) bool {
	dls, err := r.db.producerAdmin.DeadLetters(ctx, 10000)
	if err != nil {
		return false
	}
	for _, d := range dls {
		if d.MessageID == id {
			return true
		}
	}
	return false
}

// injectUnbound writes three messages, each of a key of its own, on a topic
// whose subject no stream binds.
func (r *run) injectUnbound(ctx context.Context) {
	r.writeAll(ctx, func() ([]courier.Message, []written) {
		msgs, ws := make([]courier.Message, 3), make([]written, 3)
		for i := range msgs {
			k := fmt.Sprintf("unbound-%d", r.unbound+i)
			msgs[i] = courier.NewMessage(unboundTopic, k, "Step", []byte("1"))
			ws[i] = written{id: msgs[i].ID.String(), key: k, seq: 1, dead: deadUnbound}
		}
		return msgs, ws
	})
	r.unbound += 3
	r.count("messages on an unbound subject", 3)
}

// pause is one stopped relay, and what the others published meanwhile.
type pause struct {
	relay, how string
	at         time.Time     // when it stopped
	stopped    time.Duration // in all
	published  uint64        // during the measureFor after its lease ran out
	pending    int64         // publishable rows when that began
	invalid    string        // why nothing can be concluded, if so
}

// pauseRelay stops a relay from outside, at whatever point it is, for
// longer than its lease.
func (r *run) pauseRelay(ctx context.Context) {
	if !takeFreezeToken(strings.TrimSuffix(r.token, ".token")) {
		return // a relay is stopping itself: one at a time
	}
	defer os.Remove(r.token)
	p := r.relays[rand.IntN(len(r.relays))]
	p.MarkStopped(true)
	p.Signal(syscall.SIGSTOP)
	pa := r.measurePause(ctx, p, time.Now(), "stopped by the test")
	p.Signal(syscall.SIGCONT)
	p.MarkStopped(false)
	r.mu.Lock()
	r.pauses = append(r.pauses, pa)
	r.mu.Unlock()
	r.count("relay paused past its lease", 1)
}

// watchFreezes finds relays that stopped themselves (see freezingStore),
// measures what the others publish meanwhile, and resumes them.
func (r *run) watchFreezes(ctx context.Context, done <-chan struct{}) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		r.dropStaleToken()
		for _, p := range r.relays {
			if pid, st := p.State(); st == 'T' && !p.StoppedByTest() {
				since := time.Now()
				r.faultMu.Lock()
				if pid2, st2 := p.State(); pid2 == pid && st2 == 'T' && !p.StoppedByTest() {
					pa := r.measurePause(ctx, p, since, "froze itself mid-claim")
					p.Signal(syscall.SIGCONT)
					_ = os.Remove(r.token)
					r.mu.Lock()
					r.pauses = append(r.pauses, pa)
					r.mu.Unlock()
					r.count("relay froze itself mid-claim", 1)
				}
				r.faultMu.Unlock()
			}
		}
	}
}

// dropStaleToken removes a freeze token whose relay died (a SIGKILL)
// between taking it and stopping: a holder stops within milliseconds.
func (r *run) dropStaleToken() {
	b, err := os.ReadFile(r.token)
	if err != nil {
		return
	}
	pid, _ := strconv.Atoi(string(b))
	if pid == os.Getpid() {
		return // pauseRelay's
	}
	for _, p := range r.relays {
		if q, st := p.State(); q == pid && (st == 'T' || p.StoppedByTest()) {
			return
		}
	}
	if fi, err := os.Stat(r.token); err == nil && time.Since(fi.ModTime()) > 2*time.Second {
		_ = os.Remove(r.token)
	}
}

// measurePause waits until p's lease has run out (p stopped at since), then
// counts what the other relays publish in measureFor. p stays stopped.
func (r *run) measurePause(ctx context.Context, p *testenv.Proc, since time.Time, how string) pause {
	pa := pause{relay: p.Name, how: how, at: since}
	// Other faults during the pause (NATS down or frozen, another relay
	// stopped, killed or restarted, whose leases then hold their keys for
	// a while) leave nothing to judge.
	pids := map[*testenv.Proc]int{}
	for _, o := range r.relays {
		pids[o], _ = o.State()
	}
	natsPid, _ := r.natsProc.State()
	overlap := func() {
		if pa.invalid != "" {
			return
		}
		if pid, st := r.natsProc.State(); pid != natsPid || st == 'T' || st == 0 {
			pa.invalid = "NATS was down or frozen meanwhile"
			return
		}
		for _, o := range r.relays {
			if o == p {
				continue
			}
			if pid, st := o.State(); pid != pids[o] || st == 'T' || st == 0 {
				pa.invalid = o.Name + " was stopped, killed or restarted meanwhile"
				return
			}
		}
	}
	for until := since.Add(relayLease + 500*time.Millisecond); time.Now().Before(until); time.Sleep(50 * time.Millisecond) {
		overlap()
	}
	pa.pending = r.pendingWork(ctx)
	c0, ok0 := r.streamMsgs(ctx)
	for end := time.Now().Add(measureFor); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		overlap()
	}
	c1, ok1 := r.streamMsgs(ctx)
	if !ok0 || !ok1 {
		pa.invalid = "stream not readable"
	}
	if c1 > c0 {
		pa.published = c1 - c0
	}
	if pa.invalid == "" && pa.published == 0 && pa.pending > 0 && r.db.producerDB.SerialWrites() && r.writeLockHeld(ctx) {
		pa.invalid = "it froze holding SQLite's write lock, which stops every writer of the file (documented in store/sqlite)"
	}
	pa.stopped = time.Since(since)
	return pa
}

// writeLockHeld reports whether another connection holds SQLite's write
// lock on the producer's file: BEGIN IMMEDIATE fails within half a second.
func (r *run) writeLockHeld(ctx context.Context) bool {
	conn, err := r.db.producer.Conn(ctx)
	if err != nil {
		return false
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = 500"); err != nil {
		return false
	}
	defer conn.ExecContext(ctx, "PRAGMA busy_timeout = 10000") //nolint:errcheck // best effort
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return true
	}
	_, _ = conn.ExecContext(ctx, "ROLLBACK")
	return false
}

// reportPauses logs every relay pause and fails the run when the other
// relays published nothing while one was stopped although work was pending.
func (r *run) reportPauses() {
	r.mu.Lock()
	defer r.mu.Unlock()
	stalled := 0
	for _, pa := range r.pauses {
		verdict := "ok"
		switch {
		case pa.invalid != "":
			verdict = "not judged: " + pa.invalid
		case pa.published == 0 && pa.pending > 0:
			verdict = "STALLED"
			stalled++
			r.t.Errorf("%s: %s %s %s; in the %s after its lease ran out the other relays published nothing, with %d messages pending",
				r.dialect, pa.relay, pa.how, pa.stopped.Round(100*time.Millisecond).String()+" in all", measureFor, pa.pending)
		}
		r.t.Logf("pause %s: %-8s %-23s at +%5.1fs, stopped %5s; %5d published during the %s after its lease, %5d pending: %s",
			r.dialect, pa.relay, pa.how, pa.at.Sub(r.began).Seconds(), pa.stopped.Round(100*time.Millisecond), pa.published, measureFor, pa.pending, verdict)
	}
	r.t.Logf("pauses %s: %d relay pauses, %d with no progress by the other relays", r.dialect, len(r.pauses), stalled)
}

// reportPoisons logs how each poison message ended.
func (r *run) reportPoisons() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, p := range r.poisons {
		dead := "not a dead letter within 10s"
		if p.deadAfter > 0 {
			dead = "dead letter after " + p.deadAfter.Round(10*time.Millisecond).String()
		}
		r.t.Logf("poison %s #%d: %s; meanwhile %d messages of other keys published (%d pending when it was written)",
			r.dialect, i+1, dead, p.published, p.pending)
		if p.published == 0 && p.pending > 0 && (p.deadAfter == 0 || p.deadAfter >= time.Second) {
			r.t.Errorf("%s: while poison message #%d was retried, no message of another key was published, with %d pending", r.dialect, i+1, p.pending)
		}
	}
}

func fnv(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}
