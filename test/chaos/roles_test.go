package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
)

// The test binary plays every process of a chaos run: COURIER_CHAOS_ROLE
// says which. Settings come in the environment.
const (
	envRole        = "COURIER_CHAOS_ROLE"
	envDB          = "COURIER_CHAOS_DB"     // producer's (relays) or consumer's (consumers) database URL (see store/dburl)
	envNATS        = "COURIER_CHAOS_NATS"   // client URL
	envDir         = "COURIER_CHAOS_DIR"    // NATS store (role nats)
	envPort        = "COURIER_CHAOS_PORT"   // NATS port (role nats)
	envPrefix      = "COURIER_CHAOS_PREFIX" // subject prefix
	envStream      = "COURIER_CHAOS_STREAM"
	envTopic       = "COURIER_CHAOS_TOPIC"        // consumer's topic
	envFail        = "COURIER_CHAOS_FAIL"         // relays: fraction of publishes that fail
	envFreeze      = "COURIER_CHAOS_FREEZE"       // relays: fraction of claims during which the process stops itself
	envFreezeWhile = "COURIER_CHAOS_FREEZE_WHILE" // relays: … while this file exists
	envDup         = "COURIER_CHAOS_DUP"          // consumers: fraction of deliveries handed over twice
	envReorder     = "COURIER_CHAOS_REORDER"      // consumers: fraction of deliveries swapped with the next of another key
	envLogLevel    = "COURIER_CHAOS_LOG_LEVEL"    // debug to see everything
)

// Relays' settings, which the test's timing depends on.
const (
	// relayLease is the relays' LeaseDuration: a stopped relay's rows go
	// to the others this long after its claim.
	relayLease = 3 * time.Second
	// relayMaxAttempts is small so that a message the broker always
	// rejects becomes a dead letter within a second or two. The chaos
	// publisher's counted failures (1 publish in 200) never add up to it.
	relayMaxAttempts = 5
	// A freezing relay process freezes no sooner than freezeAfterStart
	// after it started (1–2 times that, at random) and freezeCooldown after
	// it was resumed (1–2 times that), so that a short run sees a few
	// freezes and still has time for the other faults.
	freezeAfterStart = 4 * time.Second
	freezeCooldown   = 12 * time.Second
)

// runRole runs the process's role (testenv.RunRole) and exits; it returns
// when there is none.
func runRole() {
	testenv.RunRole(envRole, envLogLevel, roleLogLevel, map[string]testenv.Role{
		"nats":                testenv.NATSRole(envDir, envPort),
		"relay":               runRelay,
		"consumer":            runConsumer,
		versionedConsumerRole: runVersionedConsumer,
		groupConsumerRole:     runGroupConsumer,
		webhookRelayRole:      runWebhookRelay,
		heldConsumerRole:      runHeldConsumer,
	})
}

// roleLogLevel is the level a role logs at: errors only, but for the roles
// whose log is kept in a file, shown when the test fails.
func roleLogLevel(role string) slog.Level {
	switch role {
	case webhookRelayRole, versionedConsumerRole, heldConsumerRole:
		return slog.LevelWarn
	case groupConsumerRole:
		return slog.LevelInfo // the partitions it takes and gives up
	}
	return slog.LevelError
}

func runRelay(ctx context.Context, log *slog.Logger) error {
	st, notifier, closeStore, err := openRelayStore(ctx, os.Getenv(envDB), log)
	if err != nil {
		return err
	}
	defer closeStore()
	freeze, _ := strconv.ParseFloat(os.Getenv(envFreeze), 64)
	if freeze > 0 {
		st = newFreezingStore(st, freeze, os.Getenv(envFreezeWhile))
	}
	nc, err := couriernats.Connect(os.Getenv(envNATS))
	if err != nil {
		return err
	}
	defer nc.Close()
	mapping := couriernats.Config{SubjectPrefix: os.Getenv(envPrefix)}
	// The test created the stream, binding only some topics' subjects.
	if err := couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: os.Getenv(envStream)}); err != nil {
		return err
	}
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping, AckTimeout: 2 * time.Second})
	if err != nil {
		return err
	}
	fail, _ := strconv.ParseFloat(os.Getenv(envFail), 64)
	cfg := relay.Config{
		BatchSize: 500, LeaseDuration: relayLease, PublishTimeout: time.Second, MaxAttempts: relayMaxAttempts,
		Backoff:      courier.Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Jitter: 0.2},
		PollInterval: 200 * time.Millisecond, Logger: log,
	}
	if notifier != nil {
		cfg.Notifier = notifier
	}
	r, err := relay.New(st, failingPublisher{pub, fail}, cfg)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// freezingStore stops its whole process (SIGSTOP) in the middle of some
// claims, at a random moment while the claim runs, to show what a relay that
// freezes there (a stopped VM, a GC pause, a swapped-out process) does to the
// others. The test resumes the process after more than a lease.
type freezingStore struct {
	store.RelayStore
	chance float64
	while  string // a file: no freezes once it is gone; while+".token" is held by the one relay that may be stopped

	mu        sync.Mutex
	notBefore time.Time     // no freeze before (just started, just resumed)
	typical   time.Duration // moving average of a claim's duration
}

func newFreezingStore(st store.RelayStore, chance float64, while string) *freezingStore {
	return &freezingStore{RelayStore: st, chance: chance, while: while, notBefore: time.Now().Add(freezeAfterStart + rand.N(freezeAfterStart)), typical: time.Millisecond}
}

// takeFreezeToken creates the token file next to the freeze flag; it
// fails when another relay holds it (is stopped, or about to be). One
// stopped relay at a time leaves the others to show what they do meanwhile.
// The test removes the token when it resumes the relay.
func takeFreezeToken(flag string) bool {
	f, err := os.OpenFile(flag+".token", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return false
	}
	_, _ = fmt.Fprint(f, os.Getpid())
	return f.Close() == nil
}

// Claim implements store.RelayStore.
func (s *freezingStore) Claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	var done atomic.Bool
	var wg sync.WaitGroup
	s.mu.Lock()
	armed := time.Now().After(s.notBefore) && rand.Float64() < s.chance
	typical := s.typical
	s.mu.Unlock()
	if armed {
		_, err := os.Stat(s.while)
		armed = err == nil && takeFreezeToken(s.while)
	}
	if armed {
		delay := rand.N(typical)
		wg.Go(func() {
			time.Sleep(delay)
			if done.Load() {
				_ = os.Remove(s.while + ".token")
				return // the claim was quicker: no freeze this time
			}
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			// kill may return before the process stops: the cool-down
			// counts from a moment surely after the resumption.
			time.Sleep(50 * time.Millisecond)
			s.mu.Lock()
			s.notBefore = time.Now().Add(freezeCooldown + rand.N(freezeCooldown))
			s.mu.Unlock()
		})
	}
	start := time.Now()
	b, err := s.RelayStore.Claim(ctx, owner, limit, lease)
	done.Store(true)
	took := time.Since(start)
	s.mu.Lock()
	if took < 10*s.typical { // a frozen claim says nothing about the usual one
		s.typical = (7*s.typical + took) / 8
	}
	s.mu.Unlock()
	wg.Wait()
	return b, err
}

// failingPublisher makes a fraction of publishes fail: most as if the
// broker were away, some as message errors (counted attempts).
type failingPublisher struct {
	pub  broker.Publisher
	fail float64
}

func (p failingPublisher) Publish(ctx context.Context, msgs []courier.Message) []error {
	errs := p.pub.Publish(ctx, msgs)
	for i := range errs {
		if errs[i] == nil && rand.Float64() < p.fail {
			if rand.IntN(4) == 0 {
				errs[i] = errors.New("chaos: publisher rejected the message")
			} else {
				errs[i] = broker.Unavailable(errors.New("chaos: publisher lost the ack"))
			}
		}
	}
	return errs
}

func runConsumer(ctx context.Context, log *slog.Logger) error {
	nc, err := couriernats.Connect(os.Getenv(envNATS))
	if err != nil {
		return err
	}
	defer nc.Close()
	topic := os.Getenv(envTopic)
	sub, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{
		Config: couriernats.Config{SubjectPrefix: os.Getenv(envPrefix)}, Stream: os.Getenv(envStream),
		Consumer: topic, Topics: []string{topic}, AckWait: 3 * time.Second,
		// Strict order: JetStream redelivers a delivery lost in flight
		// (a server crash) only after AckWait, after later messages of its
		// key unless nothing else is in flight.
		MaxAckPending: 1,
	})
	if err != nil {
		return err
	}
	defer sub.Close()
	dup, _ := strconv.ParseFloat(os.Getenv(envDup), 64)
	reorder, _ := strconv.ParseFloat(os.Getenv(envReorder), 64)
	csub := &chaosSubscriber{Subscriber: sub, dup: dup, reorder: reorder}
	cfg := inbox.ConsumerConfig{KeepOrder: true, Concurrency: 8, MaxDeliveries: 1000, Group: groupedCommits,
		Backoff: courier.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond}, Logger: log}
	db, err := openDatabase(ctx, os.Getenv(envDB))
	if err != nil {
		return err
	}
	defer db.Close()
	return consume(ctx, db.Inbox(), topic, csub, db.ConsumerStore(), applyEffect(db), cfg)
}

// groupedCommits is the Group of every consumer in this package: the
// suite runs with grouping on, a worker applying up to
// DefaultGroupMessages deliveries waiting for it in one transaction, so
// kills between commit and acks, pauses and failing handlers hit whole
// groups; a group of one is the transaction-per-message path, which the
// suite runs whenever a single delivery waits.
var groupedCommits = inbox.GroupConfig{MaxMessages: inbox.DefaultGroupMessages}

func consume[TTx any](ctx context.Context, st store.Inbox[TTx], name string, sub broker.Subscriber, cs store.ConsumerStore,
	h inbox.Handler[TTx], cfg inbox.ConsumerConfig) error {
	ib, err := inbox.New(st, name)
	if err != nil {
		return err
	}
	c, err := inbox.NewConsumer(ib, sub, cs, h, cfg)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// applyEffect is the consumer's side effect on db: one row per
// application, in the order applied.
func applyEffect[TTx any](db store.Driver[TTx]) inbox.Handler[TTx] {
	return func(ctx context.Context, tx TTx, msg courier.Message) error {
		seq, err := payloadSeq(msg)
		if err != nil {
			return err
		}
		_, err = db.Exec(ctx, tx, "INSERT INTO effects (message_id, k, seq) VALUES (?, ?, ?)", msg.ID.String(), msg.Key, seq)
		return err
	}
}

func payloadSeq(msg courier.Message) (int, error) {
	var seq int
	if _, err := fmt.Sscan(string(msg.Payload), &seq); err != nil {
		return 0, fmt.Errorf("%w: payload %q", courier.ErrMalformed, msg.Payload)
	}
	return seq, nil
}

// chaosSubscriber hands some deliveries over twice and swaps some with the
// next delivery of another key: the inbox must absorb the first, and per-key
// order survive the second (a broker reorders across keys, never within one
// subscription's key).
type chaosSubscriber struct {
	broker.Subscriber
	dup, reorder float64
	queue        []broker.Delivery // handed over before anything new
}

func (s *chaosSubscriber) Next(ctx context.Context) (broker.Delivery, error) {
	if len(s.queue) > 0 {
		d := s.queue[0]
		s.queue = s.queue[1:]
		return d, nil
	}
	d, err := s.Subscriber.Next(ctx)
	if err != nil {
		return nil, err
	}
	switch r := rand.Float64(); {
	case r < s.dup:
		s.queue = append(s.queue, onceAcked{d})
	case r < s.dup+s.reorder:
		// With one delivery in flight (strict order) the next one never
		// comes while d is held: wait briefly, then go on without swapping.
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		next, err := s.Subscriber.Next(wctx)
		cancel()
		if err != nil {
			return d, nil
		}
		if key(next) != key(d) {
			s.queue = append(s.queue, d)
			return next, nil
		}
		s.queue = append(s.queue, next)
	}
	return d, nil
}

func key(d broker.Delivery) string {
	if vs := d.Raw().Headers[couriernats.HeaderKey]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// onceAcked is a second hand-over of a delivery: its acknowledgement was
// given by the first.
type onceAcked struct{ broker.Delivery }

func (onceAcked) Ack(context.Context) error                  { return nil }
func (onceAcked) Retry(context.Context, time.Duration) error { return nil }
func (onceAcked) Drop(context.Context) error                 { return nil }
