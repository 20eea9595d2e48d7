package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/broker/nats/embedded"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/postgres"
)

// The test binary plays every process of a chaos run: COURIER_CHAOS_ROLE
// says which. Settings come in the environment.
const (
	envRole     = "COURIER_CHAOS_ROLE"
	envPG       = "COURIER_CHAOS_PG"     // producer schema (relays) or consumer schema (consumers)
	envNATS     = "COURIER_CHAOS_NATS"   // client URL
	envDir      = "COURIER_CHAOS_DIR"    // NATS store (role nats)
	envPort     = "COURIER_CHAOS_PORT"   // NATS port (role nats)
	envPrefix   = "COURIER_CHAOS_PREFIX" // subject prefix
	envStream   = "COURIER_CHAOS_STREAM"
	envTopic    = "COURIER_CHAOS_TOPIC"     // consumer's topic
	envFail     = "COURIER_CHAOS_FAIL"      // relays: fraction of publishes that fail
	envDup      = "COURIER_CHAOS_DUP"       // consumers: fraction of deliveries handed over twice
	envReorder  = "COURIER_CHAOS_REORDER"   // consumers: fraction of deliveries swapped with the next of another key
	envLogLevel = "COURIER_CHAOS_LOG_LEVEL" // debug to see everything
)

// runRole runs the process's role and exits; it returns when there is none.
func runRole() {
	role := os.Getenv(envRole)
	if role == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	lv := slog.LevelError
	if role == "shop" {
		lv = slog.LevelWarn // its log is kept in a file, shown when the test fails
	}
	if os.Getenv(envLogLevel) == "debug" {
		lv = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv})).With("role", role, "pid", os.Getpid())
	var err error
	switch role {
	case "nats":
		err = runNATS(ctx)
	case "relay":
		err = runRelay(ctx, log)
	case "consumer":
		err = runConsumer(ctx, log)
	case "shop":
		err = runShopService(ctx, log)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		log.Error("role failed", "error", err)
		os.Exit(3)
	}
	os.Exit(0)
}

func runNATS(ctx context.Context) error {
	port, _ := strconv.Atoi(os.Getenv(envPort))
	srv, err := embedded.Start(embedded.Config{Dir: os.Getenv(envDir), Port: port})
	if err != nil {
		return err
	}
	<-ctx.Done()
	srv.Shutdown()
	return nil
}

func runRelay(ctx context.Context, log *slog.Logger) error {
	pool, err := pgxpool.New(ctx, os.Getenv(envPG))
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := postgres.NewStore(ctx, pool, postgres.StoreConfig{})
	if err != nil {
		return err
	}
	nc, err := couriernats.Connect(os.Getenv(envNATS))
	if err != nil {
		return err
	}
	defer nc.Close()
	mapping := couriernats.Config{SubjectPrefix: os.Getenv(envPrefix)}
	if err := couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: os.Getenv(envStream)}); err != nil {
		return err
	}
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping, AckTimeout: 2 * time.Second})
	if err != nil {
		return err
	}
	fail, _ := strconv.ParseFloat(os.Getenv(envFail), 64)
	notifier, err := postgres.NewNotifier(os.Getenv(envPG), log)
	if err != nil {
		return err
	}
	r, err := relay.New(st, failingPublisher{pub, fail}, relay.Config{
		BatchSize: 500, LeaseDuration: 3 * time.Second, PublishTimeout: time.Second, MaxAttempts: 1000,
		Backoff:  courier.Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Jitter: 0.2},
		Notifier: notifier, PollInterval: 200 * time.Millisecond, Logger: log,
	})
	if err != nil {
		return err
	}
	return r.Run(ctx)
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
	pool, err := pgxpool.New(ctx, os.Getenv(envPG))
	if err != nil {
		return err
	}
	defer pool.Close()
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
	ib, err := inbox.New(postgres.PgxInbox(pool), topic)
	if err != nil {
		return err
	}
	dup, _ := strconv.ParseFloat(os.Getenv(envDup), 64)
	reorder, _ := strconv.ParseFloat(os.Getenv(envReorder), 64)
	c, err := inbox.NewConsumer(ib, &chaosSubscriber{Subscriber: sub, dup: dup, reorder: reorder}, postgres.ConsumerStore(pool), applyEffect,
		inbox.ConsumerConfig{KeepOrder: true, Concurrency: 8, MaxDeliveries: 1000,
			Backoff: courier.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond}, Logger: log})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// applyEffect is the consumer's side effect: one row per application, in
// the order applied.
func applyEffect(ctx context.Context, tx pgx.Tx, msg courier.Message) error {
	var seq int
	if _, err := fmt.Sscan(string(msg.Payload), &seq); err != nil {
		return fmt.Errorf("%w: payload %q", courier.ErrMalformed, msg.Payload)
	}
	_, err := tx.Exec(ctx, "INSERT INTO effects (message_id, key, seq) VALUES ($1, $2, $3)", msg.ID, msg.Key, seq)
	return err
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
