package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
)

// The transport runs (TestRelayKillsRabbitMQ, TestRelayKillsKafka,
// TestRabbitMQRestartMidDrain, TestWebhookEndpointFaults) run the courier
// command itself, `courier relay --broker-url …`, as the relays: several
// processes on one outbox, supervised and restarted like TestChaos's. An
// inbox consumer in the test process reads what reached the broker, in the
// order the broker delivers it, and applies each message once (by its id,
// as any inbox does) to the effects table that check reads.

// transportMaxAttempts is the relays' --max-attempts: small, so that an
// outage counted against the messages would soon show as dead letters.
const transportMaxAttempts = 3

// transportDatabases returns the producer's and the consumer's databases of
// a transport run: PostgreSQL when COURIER_TEST_POSTGRES_URL is set, SQLite
// files otherwise, so that the runs needing no broker service (Kafka runs
// in the test process, the webhook endpoint is the test's) need no service
// at all.
func transportDatabases(t *testing.T) (string, *databases) {
	if os.Getenv(testenv.EnvPostgres) != "" {
		return "postgres", setupPostgres(t)
	}
	return "sqlite", setupSQLite(t)
}

// target is the broker a transport run's relays publish to.
type target struct {
	name string   // in logs
	url  string   // the relays' --broker-url
	env  []string // added to the relays' environment
	// lease is the relays' --lease; a relay publishes a batch for half of
	// it at most.
	lease time.Duration
	// role, if set, runs the relays as this test binary in that role,
	// which has its own settings, instead of the courier command.
	role string
	// subscribe opens the consumer's subscription to what the relays
	// publish.
	subscribe func(ctx context.Context) (broker.Subscriber, error)
	// concurrency is the inbox consumer's.
	concurrency int
}

// relayRun is one transport run: relay processes publishing one outbox to
// a target, the producer writing meanwhile, and the inbox consumer.
type relayRun struct {
	*run
	relays  []*testenv.Proc
	logs    []string // the relays' logs, then the consumer's
	stop    chan struct{}
	stopped sync.Once
	procs   sync.WaitGroup
	written <-chan []written
}

// startRelays starts the consumer and s.relays relays on tgt, then the
// producer, which writes s.messages messages over four fifths of
// s.chaosFor.
func startRelays(t *testing.T, tgt target, s settings) *relayRun {
	dialect, db := transportDatabases(t)
	rr := &relayRun{stop: make(chan struct{}), run: &run{t: t, began: time.Now(), s: s,
		dialect: tgt.name + "/" + dialect, db: db, faults: map[string]int{}, delivered: &deliveryLog{}}}
	relays := fmt.Sprintf("courier relay processes (--lease %s, --max-attempts %d)", tgt.lease, transportMaxAttempts)
	if tgt.role != "" {
		relays = "relay processes of role " + tgt.role
	}
	t.Logf("%s run on %s: %d messages over %d keys and %d topics, %d %s, %s of faults",
		tgt.name, dialect, s.messages, s.keys, s.partitions, s.relays, relays, s.chaosFor)
	dir := t.TempDir()
	logFile := func(name string) *os.File {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		testenv.Must(t, err, "log file")
		t.Cleanup(func() { _ = f.Close() })
		rr.logs = append(rr.logs, path)
		return f
	}
	for i := range s.relays {
		p := &testenv.Proc{Name: fmt.Sprintf("relay %d", i), Stderr: logFile(fmt.Sprintf("relay%d.log", i)), Env: tgt.env}
		if tgt.role != "" {
			p.Env = append([]string{envRole + "=" + tgt.role, envDB + "=" + db.relayURL(i)}, tgt.env...)
		} else {
			p.Cmdline = []string{testenv.CourierBinary(t), "relay", "--log-format", "text", "--log-level", "warn", "--broker-url", tgt.url,
				"--database-url", db.relayURL(i), "--lease", tgt.lease.String(), "--max-attempts", strconv.Itoa(transportMaxAttempts),
				"--batch-size", "200"}
		}
		rr.relays = append(rr.relays, p)
	}

	// The consumer, in this process: it lives through the whole run.
	ctx, cancel := context.WithCancel(context.Background())
	cdb, err := openDatabase(ctx, db.consumerURL(0))
	testenv.Must(t, err, "open the consumer's database")
	sub, err := tgt.subscribe(ctx)
	testenv.Must(t, err, "subscribe")
	log := slog.New(slog.NewTextHandler(logFile("consumer.log"), &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := inbox.ConsumerConfig{KeepOrder: true, Concurrency: tgt.concurrency, MaxDeliveries: 1000, Group: groupedCommits,
		Backoff: courier.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond}, Logger: log}
	done := make(chan error, 1)
	go func() {
		done <- consume(ctx, cdb.Inbox(), "chaos", recordingSubscriber{sub, rr.delivered}, cdb.ConsumerStore(), applyEffect(cdb), cfg)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
		_ = sub.Close()
		cdb.Close()
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, path := range rr.logs {
				t.Logf("last lines of %s:\n%s", filepath.Base(path), lastLines(path, 15))
			}
		}
	})

	for _, p := range rr.relays {
		p.Supervise(t, rr.stop, &rr.procs)
	}
	t.Cleanup(rr.stopRelays)
	rr.written = rr.produce()
	return rr
}

// stopRelays stops the relays with SIGTERM and waits for them.
func (rr *relayRun) stopRelays() {
	rr.stopped.Do(func() { close(rr.stop) })
	rr.procs.Wait()
}

// killRelays SIGKILLs a relay picked at random every 0.3–1.5s (times
// every) until ctx ends. Every third kill or so comes a moment after
// a backlog was written at once, to catch relays in the middle of
// publishing it, between the broker's ack and the mark.
func (rr *relayRun) killRelays(ctx context.Context, every float64) {
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(float64(300+rand.IntN(1200))*every) * time.Millisecond):
		}
		if rand.IntN(3) == 0 {
			rr.writeBacklog(fmt.Sprintf("kill%d", i), 200, 20)
			time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond)
			rr.count("relay SIGKILL after a backlog of 200", 1)
		} else {
			rr.count("relay SIGKILL", 1)
		}
		rr.relays[rand.IntN(len(rr.relays))].Signal(syscall.SIGKILL)
	}
}

// writeBacklog writes n messages at once over keys keys of their own,
// named after name.
func (rr *relayRun) writeBacklog(name string, n, keys int) {
	rr.writeAll(context.Background(), func() ([]courier.Message, []written) {
		msgs, ws := make([]courier.Message, n), make([]written, n)
		for j := range msgs {
			k, seq := fmt.Sprintf("%s-%d", name, j%keys), j/keys+1
			msgs[j] = courier.NewMessage(partition(k, rr.s.partitions), k, "Step", []byte(strconv.Itoa(seq)))
			ws[j] = written{id: msgs[j].ID.String(), key: k, seq: seq}
		}
		return msgs, ws
	})
}

// finish waits for the producer, checks the run (see check: nothing lost,
// applied twice or out of key order, no dead letters, nothing parked),
// stops the relays and logs what was done and found.
func (rr *relayRun) finish() {
	t := rr.t
	msgs := <-rr.written
	rr.mu.Lock()
	msgs = append(msgs, rr.extra...)
	t.Logf("faults on %s: %v", rr.dialect, rr.faults)
	rr.mu.Unlock()
	res := check(t, context.Background(), rr.run, msgs)
	rr.stopRelays()
	for i, p := range rr.relays {
		log := readFile(rr.logs[i])
		t.Logf("%s: %d runs; longest pause for the broker: %s", p.Name, p.Runs(), longestPause(log).Round(time.Millisecond))
		if n := strings.Count(log, "WARNING: DATA RACE"); n > 0 {
			report, _, _ := strings.Cut(log[strings.Index(log, "WARNING: DATA RACE"):], "\n==================")
			t.Errorf("%s: the race detector reported %d data races; the first:\n%s", p.Name, n, report)
		}
	}
	deliveries, distinct := rr.delivered.counts()
	rr.mu.Lock()
	defer rr.mu.Unlock()
	t.Logf("summary %s: %s; faults %v; %s; %d deliveries of %d messages (%d more than once, skipped by the inbox); %s of faults, settled %s later, %s in all",
		rr.dialect, res.messages, rr.faults, res, deliveries, distinct, deliveries-distinct, rr.s.chaosFor,
		res.settled.Round(100*time.Millisecond), time.Since(rr.began).Round(100*time.Millisecond))
}

// pauseRE finds how long a relay paused claiming, in its log, after whole
// batches failed with the broker unavailable.
var pauseRE = regexp.MustCompile(`msg="broker unavailable; pausing" .*\bpause=(\S+)`)

// longestPause returns the longest pause a relay's log shows.
func longestPause(log string) time.Duration {
	var longest time.Duration
	for _, m := range pauseRE.FindAllStringSubmatch(log, -1) {
		if d, err := time.ParseDuration(m[1]); err == nil {
			longest = max(longest, d)
		}
	}
	return longest
}

// readFile returns the file at path, empty when there is none, or the error
// reading it.
func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err.Error()
	}
	return string(b)
}

// lastLines returns the last n lines of the file at path.
func lastLines(path string, n int) string {
	lines := strings.SplitAfter(readFile(path), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "")
}

// recordingSubscriber writes down every delivery, in the order the broker
// hands them over, before the inbox consumer sees it.
type recordingSubscriber struct {
	broker.Subscriber
	log *deliveryLog
}

func (s recordingSubscriber) Next(ctx context.Context) (broker.Delivery, error) {
	d, err := s.Subscriber.Next(ctx)
	if err == nil {
		if m, derr := s.Decode(d.Raw()); derr == nil {
			seq, _ := payloadSeq(m)
			s.log.add(m.ID.String(), m.Key, seq)
		}
	}
	return d, err
}

// deliveryLog is every delivery the consumer received, in order.
type deliveryLog struct {
	mu      sync.Mutex
	entries []delivery
}

type delivery struct {
	id, key string
	seq     int
}

func (l *deliveryLog) add(id, key string, seq int) {
	l.mu.Lock()
	l.entries = append(l.entries, delivery{id, key, seq})
	l.mu.Unlock()
}

// counts returns how many deliveries there were, and of how many messages.
func (l *deliveryLog) counts() (deliveries, messages int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := make(map[string]bool, len(l.entries))
	for _, e := range l.entries {
		seen[e.id] = true
	}
	return len(l.entries), len(seen)
}

// byKey returns, for each of keys, its messages' first deliveries in the
// order they came, as "seq@delivery number" (what sorted reads).
func (l *deliveryLog) byKey(keys map[string]bool) map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]string{}
	seen := map[string]bool{}
	for i, e := range l.entries {
		if keys[e.key] && !seen[e.id] {
			seen[e.id] = true
			out[e.key] = append(out[e.key], fmt.Sprintf("%d@%d", e.seq, i))
		}
	}
	return out
}
