package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/brokerkind"
	"github.com/courier-go/courier/internal/msgtrace"
	"github.com/courier-go/courier/internal/redact"
	"github.com/courier-go/courier/internal/setting"
	"github.com/courier-go/courier/internal/waits"
	"github.com/courier-go/courier/store"
)

// ConsumerConfig tunes a Consumer. Zero fields take the defaults given.
type ConsumerConfig struct {
	// Concurrency is how many messages are handled at once. Default
	// DefaultConcurrency (4).
	Concurrency int
	// KeepOrder handles the messages of one key one at a time, in the order
	// this instance receives them, and retries a failing message in place:
	// later messages of its key wait, while other keys go on (up to
	// Concurrency at once; a key that waits holds back the others only
	// once 32 deliveries per worker are held behind it).
	//
	// Across the instances of one consumer, a key's messages are applied in
	// order when the subscriber shares the keys among them
	// (broker.KeySharer: a Kafka consumer group, NATS and RabbitMQ
	// subscribers with Partitions): each key is delivered to one instance
	// at a time, and a key that moves to another instance (one joined,
	// left, died or froze) starts there at or before its oldest message not
	// acknowledged; a message that comes again is skipped by the inbox, and
	// one that an earlier owner is still applying waits for that
	// transaction. Without such a subscriber, order holds per instance
	// only. See the package documentation (Ordered consumer groups) for
	// what a frozen instance's open transaction costs.
	//
	// A delivery the broker loses in flight (a server crash) comes back
	// only after its ack wait, possibly behind later messages of its key.
	// A NATS subscriber with Partitions notices the gap in its partition's
	// delivery sequence and hands nothing on past it (broker/nats, Key
	// partitions); elsewhere, for order that survives that, keep one
	// delivery in flight per subscription (broker/nats
	// SubscriberConfig.MaxAckPending = 1) and scale with more partitions.
	KeepOrder bool
	// HoldKeys names the topics whose keys this consumer holds: when a
	// delivery of one of them is parked (malformed, failed MaxDeliveries
	// times, newer than the consumer knows), its ordering key stays held
	// for this consumer, across its instances, and every later delivery of
	// the key is parked behind it, unprocessed, with reason
	// store.ReasonHeld, and acknowledged, while other keys go on. Replaying
	// the parked delivery that holds the key (its cause, courier dlq
	// replay) applies it, then the deliveries held behind it in order, and
	// releases the key; a held delivery that fails on replay holds the key
	// in turn. Discarding the cause passes the hold on to the deliveries
	// behind it, which are then replayed in order (within ReplayEvery).
	// Asking to replay a held delivery replays its cause. "*" alone holds
	// the keys of every topic. It needs KeepOrder, and a consumer store
	// that holds keys (store.KeyHolds: every SQL dialect's). A delivery
	// that does not decode has no key and holds none. Topics not named
	// cost nothing; each delivery of a named topic costs one read of the
	// consumer's holds (an index lookup). Default: none.
	HoldKeys []string
	// MaxDeliveries is how many failed runs of the handler park a message.
	// Default DefaultMaxDeliveries (5). A run fails when the handler returns an error or panics;
	// each failure is recorded in the database (store.ConsumerStore
	// RecordFailure) after its transaction rolled back, so the count
	// outlives restarts and is shared by every instance of the consumer. A
	// delivery that never finished a run (the process crashed or was shut
	// down meanwhile) counts nothing. The limitation: a handler that
	// crashes the whole process without panicking (a fatal runtime error
	// such as a stack overflow, or os.Exit) is never counted, so its
	// message comes back until the handler is fixed.
	MaxDeliveries int
	// NewerVersionWait is how long a message newer than the consumer knows
	// (its handler returned an error wrapping courier.ErrNewerVersion: the
	// producer was deployed first) is retried before it is parked with
	// store.ReasonNewerVersion, counted from its first such run (recorded
	// as an uncounted failure, so the wait outlives restarts and is shared
	// by every instance). Such runs do not count toward MaxDeliveries.
	// Make it as long as a rolling deploy of the consumer takes; once it
	// is deployed, `courier dlq replay` applies what was parked. Default
	// DefaultNewerVersionWait (15m); negative parks at once.
	NewerVersionWait time.Duration
	// Backoff spaces retries. When it is entirely zero it takes the
	// defaults DefaultBackoffInitial (200ms) doubling to DefaultBackoffMax
	// (30s), jitter DefaultBackoffJitter (0.2).
	Backoff courier.Backoff
	// ExtendEvery tells the broker that a message received is still in
	// hand, waiting for a worker (behind its key, or for a group) or being
	// handled, so it is not redelivered meanwhile. Keep it under the
	// subscription's ack wait. Default DefaultExtendEvery (10s).
	ExtendEvery time.Duration
	// Retention is how long inbox markers (and the failures recorded of
	// messages whose record was not cleared) are kept; older ones are
	// deleted every CleanupEvery. A message redelivered after its marker was deleted
	// is applied again, so keep it longer than the longest a message can
	// take to come back (broker redelivery, relay republishing after an
	// outage, an operator's replay). Default DefaultRetention (7 days);
	// negative disables cleanup.
	Retention time.Duration
	// CleanupEvery is how often old markers are deleted. Default
	// DefaultCleanupEvery (1h).
	CleanupEvery time.Duration
	// ReplayEvery is how often the consumer looks for parked messages an
	// operator asked to replay (courier dlq replay). Default
	// DefaultReplayEvery (5s).
	ReplayEvery time.Duration
	// ShutdownTimeout bounds how long handlers in flight may finish after
	// Run's context ends. Default DefaultShutdownTimeout (10s).
	ShutdownTimeout time.Duration
	// Logger receives the consumer's logs. Default: discard.
	Logger *slog.Logger
	// Observer, if set, is told of every handler run and parked delivery:
	// package metrics implements it. Default: none.
	Observer Observer
	// TracerProvider makes the consumer's process spans, one per handler
	// run, linked to the trace context the message carries (the
	// producer's). Default otel.GetTracerProvider(), which records nothing
	// unless the program installed an SDK.
	TracerProvider trace.TracerProvider
	// Clock is the time the consumer reads: when a failed run happened
	// (the history a parked message keeps), when a retry in place
	// (KeepOrder) falls due, which markers and recorded failures are older
	// than Retention, and how long a run took. Default: the real clock. A
	// test sets a clock it moves (memstore.Clock's Now) to end a backoff
	// or age the markers without waiting; while a retry in place waits,
	// such a clock is read every 10ms. The redelivery delays the broker
	// keeps (retries without KeepOrder), ExtendEvery, CleanupEvery and
	// ReplayEvery run on real time.
	Clock courier.Clock
	// MessageContext, if set, returns the context in which the consumer
	// works on msg, derived from ctx (keep its deadline and cancellation):
	// the context of the handler's run and its inbox transaction, and of
	// the consumer store's calls about the message (RecordFailure,
	// ClearFailures, Park), for a delivery and for an operator's replay
	// alike. Stores that keep each message in a database of its own find
	// there which one it is: package tenant sets it to apply each
	// message in its tenant's database. It is not called for a delivery
	// that does not decode, which is parked with ctx itself. Default:
	// ctx.
	MessageContext func(ctx context.Context, msg courier.Message) context.Context
	// Group applies several deliveries in one database transaction: their
	// inbox markers in one statement, each handler's effects, one commit,
	// then their acknowledgements. It spares a commit (a WAL flush) per
	// message, the most of what applying a small message costs. See
	// GroupConfig. Default: off (each delivery in a transaction of its
	// own); Group.MaxMessages DefaultGroupMessages turns it on.
	Group GroupConfig
}

// GroupConfig says how a Consumer groups deliveries into one transaction
// (ConsumerConfig.Group).
//
// A worker takes the deliveries waiting for it, up to MaxMessages: of
// different keys, and with KeepOrder a key's consecutive deliveries in the
// order received. When nothing else waits the group is that one delivery,
// so a consumer at low load applies each message as soon as it comes, as
// without grouping; under load, deliveries wait while the workers apply,
// and groups fill.
//
// The guarantees are those of a transaction per message. A message is
// acknowledged only after its group committed. A handler that fails or
// panics rolls its group back; the group is then applied again without
// it, and it goes on alone under the usual rules, its failed run counted
// (recorded, retried after the backoff, parked, newer version, held keys),
// with KeepOrder before its key's later deliveries, which leave the group
// with it. A batch handler that fails (BatchHandler) fails for all its
// messages at once: each then runs alone, the batch's run uncounted, so
// that the one that fails is found. So one poison message costs its
// neighbours one more run, never their delivery, and a handler may run
// more than once for a message it applies once, as after any rollback
// (keep what it does outside the transaction idempotent, or set
// MaxMessages to 1). A handler that waits in a group is cut after SlowRun.
//
// Redeliveries (broker.Delivery Attempt above 1) are applied alone: a
// message that comes again may be held by an instance that still applies
// it (a handover), and waiting for that one should hold back no group.
// With MessageContext set (package tenant), each delivery is applied alone:
// its messages may live in different databases.
type GroupConfig struct {
	// MaxMessages is the most deliveries applied in one transaction.
	// Default 1: each delivery in a transaction of its own, as without
	// grouping. DefaultGroupMessages (100) is what the bench measured
	// best (bench/RESULTS.md, "Grouped commits").
	MaxMessages int
	// MaxWait is how long a worker that has fewer than MaxMessages
	// deliveries waits for more before it applies them. Default 0: a
	// group closes at once when nothing else waits, so grouping adds no
	// latency. A wait fills groups at moderate load, for fewer commits,
	// at the cost of up to MaxWait per message.
	MaxWait time.Duration
	// SlowRun is how long a handler may run in a group before the group
	// gives it up: its context is cancelled, the group rolls back and is
	// applied again without its message, which then runs alone, without
	// that limit, its cut run uncounted. So a handler that waits (a row
	// lock another instance holds, a slow call) holds back its group's
	// other keys for SlowRun at most, not for as long as it waits; a
	// handler that ignores its context's end is not cut. Make it longer
	// than the handler's usual runs: each message of a handler that always
	// runs longer runs twice. Marking the group's messages is cut after
	// SlowRun too: a marker another transaction holds (an instance
	// applying the message still, or frozen with it) makes each of the
	// group's deliveries go alone, so that only its own waits. Default
	// DefaultGroupSlowRun (1s).
	SlowRun time.Duration
}

// The defaults of ConsumerConfig's zero fields.
const (
	DefaultConcurrency      = 4
	DefaultMaxDeliveries    = 5
	DefaultNewerVersionWait = 15 * time.Minute
	DefaultBackoffInitial   = 200 * time.Millisecond
	DefaultBackoffMax       = 30 * time.Second
	DefaultBackoffJitter    = 0.2
	DefaultExtendEvery      = 10 * time.Second
	DefaultRetention        = 7 * 24 * time.Hour
	DefaultCleanupEvery     = time.Hour
	DefaultReplayEvery      = 5 * time.Second
	DefaultShutdownTimeout  = 10 * time.Second
	DefaultGroupMessages    = 100
	DefaultGroupSlowRun     = time.Second
)

func (c *ConsumerConfig) setDefaults() {
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = DefaultMaxDeliveries
	}
	if c.NewerVersionWait == 0 {
		c.NewerVersionWait = DefaultNewerVersionWait
	}
	if c.Backoff == (courier.Backoff{}) {
		c.Backoff = courier.Backoff{Initial: DefaultBackoffInitial, Max: DefaultBackoffMax, Jitter: DefaultBackoffJitter}
	}
	if c.ExtendEvery == 0 {
		c.ExtendEvery = DefaultExtendEvery
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.CleanupEvery == 0 {
		c.CleanupEvery = DefaultCleanupEvery
	}
	if c.ReplayEvery == 0 {
		c.ReplayEvery = DefaultReplayEvery
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.Group.MaxMessages == 0 {
		c.Group.MaxMessages = 1
	}
	if c.Group.SlowRun == 0 {
		c.Group.SlowRun = DefaultGroupSlowRun
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
}

func (c *ConsumerConfig) validate() error {
	const cfg = "inbox: ConsumerConfig."
	return setting.First(
		setting.Positive(cfg+"Concurrency", c.Concurrency, DefaultConcurrency),
		setting.Positive(cfg+"MaxDeliveries", c.MaxDeliveries, DefaultMaxDeliveries),
		c.Backoff.Validate(cfg+"Backoff"),
		setting.Positive(cfg+"ExtendEvery", c.ExtendEvery, DefaultExtendEvery),
		setting.Positive(cfg+"CleanupEvery", c.CleanupEvery, DefaultCleanupEvery),
		setting.Positive(cfg+"ReplayEvery", c.ReplayEvery, DefaultReplayEvery),
		setting.Positive(cfg+"ShutdownTimeout", c.ShutdownTimeout, DefaultShutdownTimeout),
		setting.Positive(cfg+"Group.MaxMessages", c.Group.MaxMessages, 1),
		setting.Positive(cfg+"Group.SlowRun", c.Group.SlowRun, DefaultGroupSlowRun),
		c.checkGroupWait(),
		c.checkHoldKeys(),
	)
}

// checkGroupWait validates Group.MaxWait.
func (c *ConsumerConfig) checkGroupWait() error {
	if c.Group.MaxWait < 0 {
		return fmt.Errorf("inbox: ConsumerConfig.Group.MaxWait is %v: it must be 0 (a group closes when nothing else waits) or positive", c.Group.MaxWait)
	}
	return nil
}

// checkHoldKeys validates HoldKeys.
func (c *ConsumerConfig) checkHoldKeys() error {
	if _, err := setting.TopicSet("inbox: ConsumerConfig.HoldKeys", c.HoldKeys); err != nil {
		return err
	}
	if len(c.HoldKeys) > 0 && !c.KeepOrder {
		return errors.New("inbox: ConsumerConfig.HoldKeys needs KeepOrder: a key is held in the order its messages come; set KeepOrder: true, or leave HoldKeys empty")
	}
	return nil
}

// Validate reports whether NewConsumer would accept c: nil, or an error
// naming the field and the fix. Zero fields take their defaults first, as
// in NewConsumer; a negative NewerVersionWait (park at once) and a
// negative Retention (no cleanup) are valid. Programs that do work before
// NewConsumer call it first, so that a bad setting fails before anything
// happens.
func (c ConsumerConfig) Validate() error {
	c.setDefaults()
	return c.validate()
}

// ConsumerMetrics are a consumer's running totals.
type ConsumerMetrics struct {
	// Applied counts messages whose handler committed.
	Applied int64
	// Duplicates counts deliveries skipped because their marker existed.
	Duplicates int64
	// Retried counts failed handler runs that will be tried again.
	Retried int64
	// Parked counts messages parked as consume-side dead letters.
	Parked int64
	// Panicked counts handler runs that panicked (also counted as failed:
	// Retried or Parked).
	Panicked int64
	// Replayed counts parked messages applied on an operator's request.
	Replayed int64
	// Held counts the deliveries parked behind a parked message of their
	// key (ConsumerConfig.HoldKeys); Parked counts them too.
	Held int64
}

// Consumer handles a subscription's messages through an Inbox: each
// message's effects commit exactly once, and the delivery is acknowledged
// only after they committed (or after it was parked). A handler that panics
// is recovered: its transaction rolls back and the run counts as failed,
// with a [PanicError] holding the panic's value and stack, which the
// message's history keeps. Create it with NewConsumer and start it with
// Run.
type Consumer[TTx any] struct {
	ib  *Inbox[TTx]
	sub broker.Subscriber
	cs  store.ConsumerStore
	h   Handler[TTx]
	cfg ConsumerConfig
	log *slog.Logger

	tracer trace.Tracer
	system string // messaging.system of sub

	// holds is cs's holds of keys, nil when it keeps none; holdsTopic
	// tells the topics of HoldKeys, nil when it is empty.
	holds      store.KeyHolds
	holdsTopic func(topic string) bool

	// batchOf finds a message's batch handler (NewRouterConsumer); nil
	// when there is none.
	batchOf func(courier.Message) (courier.Message, BatchHandler[TTx], typeVersion, bool)

	applied, duplicates, retried, parked, replayed, panicked, held atomic.Int64
}

// NewConsumer returns a consumer that receives from sub and applies messages
// with h through ib, parking into cs.
func NewConsumer[TTx any](ib *Inbox[TTx], sub broker.Subscriber, cs store.ConsumerStore, h Handler[TTx], cfg ConsumerConfig) (*Consumer[TTx], error) {
	if ib == nil || sub == nil || cs == nil || h == nil {
		return nil, errors.New("inbox: NewConsumer needs an inbox, a subscriber, a consumer store and a handler")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	holds, _ := cs.(store.KeyHolds)
	holdsTopic, _ := setting.TopicSet("", cfg.HoldKeys) // validated
	if holdsTopic != nil && holds == nil {
		return nil, fmt.Errorf("inbox: ConsumerConfig.HoldKeys needs a consumer store that holds keys (store.KeyHolds); %T does not: use a SQL dialect's ConsumerStore, or leave HoldKeys empty", cs)
	}
	return &Consumer[TTx]{
		ib: ib, sub: sub, cs: cs, h: h, cfg: cfg,
		log:    cfg.Logger.With("consumer", ib.consumer),
		tracer: msgtrace.Tracer(cfg.TracerProvider), system: brokerkind.SystemOf(sub),
		holds: holds, holdsTopic: holdsTopic,
	}, nil
}

// NewRouterConsumer returns a consumer that receives from sub and applies
// messages with r's handlers through ib, parking into cs: NewConsumer with
// r.Handler(), except that the messages of a group (ConsumerConfig.Group)
// that go to one of r's batch handlers (Router.HandleBatch, OnBatch) are
// handed to it together.
func NewRouterConsumer[TTx any](ib *Inbox[TTx], sub broker.Subscriber, cs store.ConsumerStore, r *Router[TTx], cfg ConsumerConfig) (*Consumer[TTx], error) {
	if r == nil {
		return nil, errors.New("inbox: NewRouterConsumer needs a router")
	}
	c, err := NewConsumer(ib, sub, cs, r.Handler(), cfg)
	if err != nil {
		return nil, err
	}
	c.batchOf = r.batchOf
	return c, nil
}

// Metrics returns the consumer's running totals.
func (c *Consumer[TTx]) Metrics() ConsumerMetrics {
	return ConsumerMetrics{
		Applied: c.applied.Load(), Duplicates: c.duplicates.Load(), Retried: c.retried.Load(),
		Parked: c.parked.Load(), Replayed: c.replayed.Load(), Panicked: c.panicked.Load(), Held: c.held.Load(),
	}
}

type job struct {
	d   broker.Delivery
	msg courier.Message
	err error // decoding failed
	// waiting stops the extensions that keep the delivery while it waits
	// for a worker (nil when none do); see taken.
	waiting func()
}

// taken is g, taken by a worker: the extensions that kept its deliveries
// while they waited (behind their keys, for a worker or for a group) stop,
// and the worker's own keep them from here on (keepAlive).
func taken(g []job) []job {
	for _, j := range g {
		if j.waiting != nil {
			j.waiting()
		}
	}
	return g
}

// Run consumes until ctx ends, then lets handlers in flight finish (at most
// ShutdownTimeout) and returns nil. Messages received but not acknowledged
// are redelivered later. Errors are logged and retried, not returned.
func (c *Consumer[TTx]) Run(ctx context.Context) error {
	work, cancelWork := waits.Grace(ctx, c.cfg.ShutdownTimeout)
	defer cancelWork()

	var wg sync.WaitGroup
	wg.Go(func() { c.maintain(ctx, work) })
	c.log.Info("consumer started", "concurrency", c.cfg.Concurrency, "keep_order", c.cfg.KeepOrder,
		"keys_shared_by_instances", broker.SharesKeys(c.sub))
	limit, wait := c.groupMax(), c.cfg.Group.MaxWait
	if c.cfg.KeepOrder {
		q := newKeyQueue(max(keepOrderBuffer, limit) * c.cfg.Concurrency)
		stop := context.AfterFunc(ctx, q.close)
		defer stop()
		for range c.cfg.Concurrency {
			wg.Go(func() {
				for g, ok := q.takeGroup(limit, wait); ok; g, ok = q.takeGroup(limit, wait) {
					c.processGroup(ctx, work, taken(g), q.done)
				}
			})
		}
		c.receive(ctx, work, q.put)
		q.close()
	} else {
		// Grouping needs deliveries waiting: up to a group per worker.
		var waiting int
		if limit > 1 {
			waiting = limit * c.cfg.Concurrency
		}
		shared := make(chan job, waiting)
		for range c.cfg.Concurrency {
			wg.Go(func() {
				for j := range shared {
					c.processGroup(ctx, work, taken(c.collect(shared, j)), func(string, int) {})
				}
			})
		}
		c.receive(ctx, work, func(j job) bool {
			select {
			case shared <- j:
				return true
			case <-ctx.Done():
				return false
			}
		})
		close(shared)
	}
	wg.Wait()
	c.log.Info("consumer stopped")
	return nil
}

// keepOrderBuffer is how many deliveries a consumer that keeps order holds
// per worker, waiting behind earlier ones of their keys: a key that waits
// holds back the others only once that many are held.
const keepOrderBuffer = 32

// receiveRetry spaces the receives after a failed one.
var receiveRetry = courier.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}

// receive hands each delivery to put, until ctx ends or put refuses one.
// A delivery is extended every ExtendEvery, within work, from the moment
// it is received: a worker may take it long after (it waits behind its
// key, for a worker, for a group), and the broker must not bring it again
// meanwhile.
func (c *Consumer[TTx]) receive(ctx, work context.Context, put func(job) bool) {
	failures := 0 // consecutive failed receives
	for {
		d, err := c.sub.Next(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
			delay := receiveRetry.Delay(failures)
			c.log.Warn("receive failed; retrying", "error", err, "retry_in", delay)
			if !waits.Sleep(ctx, delay) {
				return
			}
			continue
		}
		failures = 0
		msg, derr := c.sub.Decode(d.Raw())
		j := job{d: d, msg: msg, err: derr, waiting: c.keepAlive(work, d)}
		if !put(j) {
			j.waiting()
			return
		}
	}
}

// process handles one delivery to the end: acknowledged, scheduled for
// redelivery or parked.
func (c *Consumer[TTx]) process(ctx, work context.Context, j job) {
	c.processAfter(ctx, work, j, nil)
}

// failedRun is a run of a handler that failed in a group
// (ConsumerConfig.Group): its error, and when it failed.
type failedRun struct {
	err error
	at  time.Time
}

// processAfter is process for a delivery whose handler may have failed
// already, in a group: first, when not nil, is that run, its first run
// here, after which it goes on as a failed run does (its key's hold was
// told before the group).
func (c *Consumer[TTx]) processAfter(ctx, work context.Context, j job, first *failedRun) {
	d := j.d
	if j.err != nil {
		c.park(work, j, store.ReasonMalformed, j.err, []store.Attempt{{At: c.cfg.Clock.Now().UTC(), Error: describe(j.err)}})
		return
	}
	work = c.messageContext(work, j.msg)
	if first == nil && c.holding(j) && c.heldBehind(ctx, work, j) {
		return
	}
	for runs := 1; ; runs++ {
		var res Result
		var err error
		var failedAt time.Time
		if runs == 1 && first != nil {
			err, failedAt = first.err, first.at
		} else {
			res, err = c.handle(work, d, j.msg)
			failedAt = c.cfg.Clock.Now()
		}
		if err == nil {
			c.succeeded(work, j, res)
			return
		}
		if work.Err() != nil {
			// Shutting down cut the run short: not the handler's failure.
			// The broker redelivers the message.
			return
		}
		var pe *PanicError
		if errors.As(err, &pe) {
			c.panicked.Add(1)
			c.log.Error("handler panicked; its transaction was rolled back", "message_id", j.msg.ID, "type", j.msg.Type,
				"key", j.msg.Key, "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
		}
		failure := store.Attempt{At: failedAt.UTC(), Error: describe(err), Uncounted: errors.Is(err, courier.ErrNewerVersion)}
		hist, rerr := c.cs.RecordFailure(work, c.ib.consumer, j.msg.ID, failure)
		if rerr != nil || len(hist) == 0 {
			// Not recorded, or cleared at once by another delivery of the
			// message that was applied or parked meanwhile: this run is
			// its history.
			hist = []store.Attempt{failure}
		}
		if errors.Is(err, courier.ErrMalformed) {
			c.park(work, j, store.ReasonMalformed, err, hist)
			return
		}
		delay, park := c.retryIn(j, err, failure, hist, rerr, runs)
		if park != "" {
			c.park(work, j, park, err, hist)
			return
		}
		c.retried.Add(1)
		if !c.cfg.KeepOrder {
			if err := d.Retry(work, delay); err != nil {
				c.log.Warn("could not schedule redelivery; the broker redelivers after its ack wait", "message_id", j.msg.ID, "error", err)
			}
			return
		}
		// In place, so the key's later messages keep waiting behind it. The
		// backoff counts from the failure.
		if !c.wait(ctx, d, failedAt.Add(delay)) {
			return // shutting down: the broker redelivers it
		}
	}
}

// messageContext is the context in which the consumer works on msg
// (ConsumerConfig.MessageContext).
func (c *Consumer[TTx]) messageContext(ctx context.Context, msg courier.Message) context.Context {
	if c.cfg.MessageContext == nil {
		return ctx
	}
	return c.cfg.MessageContext(ctx, msg)
}

// retryIn says when a failed run of j (err, recorded as failure) runs
// again, or why it is parked instead: its failures reached MaxDeliveries,
// or it waited for a consumer that knows its version for
// NewerVersionWait. hist is the message's recorded failures, normally this
// one included (another instance may have cleared them meanwhile), unless
// rerr says recording it failed; runs counts this delivery's runs here.
func (c *Consumer[TTx]) retryIn(j job, err error, failure store.Attempt, hist []store.Attempt, rerr error, runs int) (delay time.Duration, park string) {
	failedAt := failure.At
	failures, waitingSince := store.Counted(hist)
	if rerr != nil {
		// Uncounted: the database is likely unreachable, which may also be
		// why the handler failed. Retry without parking.
		c.log.Warn("could not record the handler's failure; retrying without counting it", "message_id", j.msg.ID, "error", rerr)
		failures = runs
	} else if failures >= c.cfg.MaxDeliveries && !failure.Uncounted {
		return 0, store.ReasonFailed
	}
	if rerr != nil || !failure.Uncounted {
		delay = c.cfg.Backoff.Delay(failures)
		c.log.Warn("handler failed; will retry", "message_id", j.msg.ID, "type", j.msg.Type, "key", j.msg.Key,
			"failures", failures, "retry_in", delay, "error", redact.Text(err.Error()))
		return delay, ""
	}
	if waitingSince.IsZero() {
		waitingSince = failedAt
	}
	waited, left := failedAt.Sub(waitingSince), c.cfg.NewerVersionWait-failedAt.Sub(waitingSince)
	if left <= 0 {
		return 0, store.ReasonNewerVersion
	}
	delay = min(c.cfg.Backoff.Delay(len(hist)-failures), left)
	c.log.Warn("message newer than this consumer knows; waiting for its deploy", "message_id", j.msg.ID, "type", j.msg.Type,
		"version", j.msg.Version, "key", j.msg.Key, "waited", waited, "parked_in", left, "retry_in", delay, "error", redact.Text(err.Error()))
	return delay, ""
}

// succeeded finishes a delivery whose handler committed (or that was a
// duplicate): it counts it and acknowledges it. The failures earlier runs
// recorded, here or in another instance, went in the transaction that
// committed (store.Inbox.Mark).
func (c *Consumer[TTx]) succeeded(ctx context.Context, j job, res Result) {
	d := j.d
	if res == Duplicate {
		c.duplicates.Add(1)
		c.log.Info("duplicate delivery skipped", "message_id", j.msg.ID, "type", j.msg.Type, "delivery", d.Attempt())
	} else {
		c.applied.Add(1)
	}
	if err := d.Ack(ctx); err != nil {
		c.log.Warn("ack failed; the message will come again and be skipped", "message_id", j.msg.ID, "error", err)
	}
}

// PanicError is the error of a handler run that panicked. The Consumer
// recovers the panic inside the run's transaction, which then rolls back,
// and counts the run as failed.
type PanicError struct {
	// Value is what the handler passed to panic.
	Value any
	// Stack is the panicking goroutine's stack trace.
	Stack []byte
	// Site is where the handler panicked: the function and the file and
	// line of the frame that called panic (or failed, for a runtime
	// error), such as "payment.(*Service).charge (charge.go:42)"; empty
	// when it could not be told.
	Site string
}

// Error returns the panic's site and value, such as "handler panicked at
// payment.(*Service).charge (charge.go:42): card declined"; the stack is
// in Stack. The site is what package failgroup groups panics by.
func (e *PanicError) Error() string {
	if e.Site == "" {
		return fmt.Sprintf("handler panicked: %v", e.Value)
	}
	return fmt.Sprintf("handler panicked at %s: %v", e.Site, e.Value)
}

// panicSite returns the site of the panic being recovered, for a deferred
// function (skip counts the frames above it to leave out): the first frame
// under the runtime's own.
func panicSite(skip int) string {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(skip, pcs)])
	for {
		f, more := frames.Next()
		if f.Function != "" && !strings.HasPrefix(f.Function, "runtime.") {
			return fmt.Sprintf("%s (%s:%d)", path.Base(f.Function), path.Base(f.File), f.Line)
		}
		if !more {
			return ""
		}
	}
}

// Unwrap returns the panic's value when it is an error, so that a handler
// panicking with an error wrapping courier.ErrMalformed is parked at once.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// describe is err as a message's history keeps it: with the stack when the
// handler panicked, and the secrets of what it quotes hidden (package
// internal/redact: a handler's error may hold the URL of a database or an
// API, with its password or token), since it is stored and shown by
// courier dlq and the dashboard.
func describe(err error) string {
	var pe *PanicError
	if errors.As(err, &pe) {
		return redact.Text(err.Error() + "\n\n" + string(pe.Stack))
	}
	return redact.Text(err.Error())
}

// run is the handler, with a panic turned into a *PanicError. It runs
// inside the inbox's transaction, which therefore rolls back.
func (c *Consumer[TTx]) run(ctx context.Context, tx TTx, msg courier.Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack(), Site: panicSite(3)}
		}
	}()
	return c.h(ctx, tx, msg)
}

// runBatch is the batch handler h over msgs, with a panic turned into a
// *PanicError, inside a group's transaction, which therefore rolls back.
func (c *Consumer[TTx]) runBatch(ctx context.Context, tx TTx, h BatchHandler[TTx], msgs []courier.Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack(), Site: panicSite(3)}
		}
	}()
	return h(ctx, tx, msgs)
}

// handle runs the handler through the inbox, telling the broker every
// ExtendEvery that the message is still in progress.
func (c *Consumer[TTx]) handle(ctx context.Context, d broker.Delivery, msg courier.Message) (Result, error) {
	defer c.keepAlive(ctx, d)()
	return c.traced(ctx, d, msg)
}

// keepAlive tells the broker every ExtendEvery that d is still in
// progress, until the returned stop is called: an extension under way
// then is the last, and a timer that fired as it stopped extends no more.
// ExtendEvery is real time, as the broker's ack wait is.
func (c *Consumer[TTx]) keepAlive(ctx context.Context, d broker.Delivery) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	isStopped := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return stopped
	}
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(c.cfg.ExtendEvery, func() {
		if isStopped() {
			return
		}
		_ = d.Extend(ctx)
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			t.Reset(c.cfg.ExtendEvery)
		}
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// wait waits until the consumer's clock reads until, keeping the delivery
// alive; false when ctx ended.
func (c *Consumer[TTx]) wait(ctx context.Context, del broker.Delivery, until time.Time) bool {
	defer c.keepAlive(ctx, del)()
	return waits.Until(ctx, c.cfg.Clock, until)
}

// park stores the delivery as a consume-side dead letter, with the failed
// runs in hist, and stops its redelivery. If the store is unreachable, the
// delivery is left for the broker to bring back: nothing is dropped
// unparked.
func (c *Consumer[TTx]) park(ctx context.Context, j job, reason string, cause error, hist []store.Attempt) {
	raw := j.d.Raw()
	p := store.Parked{
		Consumer: c.ib.consumer, Subject: raw.Subject, Headers: raw.Headers, Payload: raw.Data,
		Reason: reason, Error: redact.Text(cause.Error()), Attempts: max(len(hist), 1), History: hist,
	}
	if j.err == nil {
		p.MessageID = j.msg.ID.String()
	}
	var err error
	if c.holding(j) {
		p.Key = j.msg.Key
		p, _, err = c.holds.ParkHolding(ctx, p, false)
	} else {
		err = c.cs.Park(ctx, p)
	}
	if err != nil {
		c.log.Error("could not park message; leaving it for redelivery", "message_id", p.MessageID, "error", err)
		_ = j.d.Retry(ctx, c.cfg.Backoff.Max)
		return
	}
	if j.err == nil {
		if err := c.cs.ClearFailures(ctx, c.ib.consumer, j.msg.ID); err != nil {
			c.log.Warn("could not clear the failures of a parked message", "message_id", p.MessageID, "error", err)
		}
	}
	c.parked.Add(1)
	c.cfg.Observer.Parked(c.ib.consumer, p.Reason)
	switch {
	case p.Behind != 0:
		// Its key was held meanwhile (by an instance that does not share
		// the keys with this one).
		c.held.Add(1)
		c.log.Error("message parked behind the parked message that holds its key", "message_id", p.MessageID,
			"key", p.Key, "parked_id", p.ID, "behind", p.Behind, "failed", reason, "error", p.Error)
	case p.Key != "":
		c.log.Error("message parked; its key is held until it is replayed or discarded", "message_id", p.MessageID,
			"subject", raw.Subject, "key", p.Key, "parked_id", p.ID, "reason", reason, "attempts", p.Attempts, "error", p.Error)
	default:
		c.log.Error("message parked", "message_id", p.MessageID, "subject", raw.Subject, "reason", reason,
			"attempts", p.Attempts, "error", p.Error)
	}
	if err := j.d.Drop(ctx); err != nil {
		c.log.Warn("could not stop redelivery of a parked message; it will be parked again or skipped", "message_id", p.MessageID, "error", err)
	}
}

// holding reports whether the consumer holds the key of j's message
// (ConsumerConfig.HoldKeys). A delivery that did not decode has no key.
func (c *Consumer[TTx]) holding(j job) bool {
	return c.holdsTopic != nil && j.err == nil && j.msg.Key != "" && c.holdsTopic(j.msg.Topic)
}

// heldBehind parks j behind the parked message that holds its key, if one
// does, and acknowledges it: true when it did, or when ctx ended before it
// could tell (the broker redelivers j). A failed read of the holds is
// retried in place, so the key's later messages keep waiting behind j.
func (c *Consumer[TTx]) heldBehind(ctx, work context.Context, j job) bool {
	for failures := 1; ; failures++ {
		p, ok, err := c.parkBehind(work, j)
		if err == nil {
			if ok {
				c.heldParked(work, j, p)
			}
			return ok
		}
		if work.Err() != nil {
			return true
		}
		delay := c.cfg.Backoff.Delay(failures)
		c.log.Warn("could not tell whether the message's key is held; retrying", "message_id", j.msg.ID, "key", j.msg.Key,
			"retry_in", delay, "error", err)
		if !c.wait(ctx, j.d, c.cfg.Clock.Now().Add(delay)) {
			return true
		}
	}
}

// parkBehind parks j behind the parked message that holds its key, if
// one does: ok is then true.
func (c *Consumer[TTx]) parkBehind(ctx context.Context, j job) (p store.Parked, ok bool, err error) {
	cause, err := c.holds.HoldOf(ctx, c.ib.consumer, j.msg.Key)
	if err != nil || cause == 0 {
		return p, false, err
	}
	// A message applied before its key was held that comes again (the
	// broker redelivers it) is a duplicate, not held: it goes on, and is
	// skipped.
	if applied, err := c.isApplied(ctx, j.msg.ID); err != nil || applied {
		return p, false, err
	}
	raw := j.d.Raw()
	p = store.Parked{
		Consumer: c.ib.consumer, MessageID: j.msg.ID.String(), Subject: raw.Subject, Headers: raw.Headers, Payload: raw.Data,
		Reason: store.ReasonHeld, Error: fmt.Sprintf("key held by parked message %d", cause), Attempts: 0, Key: j.msg.Key,
	}
	// The hold may be released meanwhile: then the message is processed.
	return c.holds.ParkHolding(ctx, p, true)
}

// isApplied says whether the inbox holds message id's marker: it marks id in
// a transaction it rolls back.
func (c *Consumer[TTx]) isApplied(ctx context.Context, id uuid.UUID) (bool, error) {
	fresh := true
	err := c.ib.st.InTx(ctx, func(tx TTx) error {
		var err error
		if fresh, err = c.ib.st.Mark(ctx, tx, c.ib.consumer, id); err != nil {
			return err
		}
		return errRollBack
	})
	if errors.Is(err, errRollBack) {
		err = nil
	}
	return err == nil && !fresh, err
}

// heldParked finishes a delivery parked behind the parked message that
// holds its key: it counts it and acknowledges it.
func (c *Consumer[TTx]) heldParked(ctx context.Context, j job, p store.Parked) {
	c.parked.Add(1)
	c.held.Add(1)
	c.cfg.Observer.Parked(c.ib.consumer, store.ReasonHeld)
	c.log.Warn("message held: parked behind the parked message that holds its key", "message_id", p.MessageID,
		"key", p.Key, "parked_id", p.ID, "behind", p.Behind)
	if err := j.d.Ack(ctx); err != nil {
		c.log.Warn("ack of a held message failed; it will come again and be parked again or skipped", "message_id", p.MessageID, "error", err)
	}
}

// maintain deletes old markers and replays parked messages on request.
func (c *Consumer[TTx]) maintain(ctx, work context.Context) {
	cleanup := time.NewTicker(c.cfg.CleanupEvery)
	defer cleanup.Stop()
	replay := time.NewTicker(c.cfg.ReplayEvery)
	defer replay.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-cleanup.C:
			if c.cfg.Retention > 0 {
				c.cleanup(ctx)
			}
		case <-replay.C:
			c.replay(ctx, work)
		}
	}
}

// cleanupChunk is how many markers or failures one delete removes at most.
const cleanupChunk = 10000

// replayBatch is how many replay requests one pass reads at most.
const replayBatch = 100

// cleanup deletes inbox markers and recorded failures older than the
// retention window now, in chunks, and returns how many markers it deleted.
func (c *Consumer[TTx]) cleanup(ctx context.Context) int64 {
	var total int64
	before := c.cfg.Clock.Now().Add(-c.cfg.Retention)
	for {
		n, err := c.cs.DeleteFailures(ctx, before, cleanupChunk)
		if err != nil {
			c.log.Warn("deleting old recorded failures failed", "error", err)
		}
		if err != nil || n < cleanupChunk {
			break
		}
	}
	for {
		n, err := c.cs.DeleteMarkers(ctx, before, cleanupChunk)
		total += n
		if err != nil {
			c.log.Warn("inbox cleanup failed", "error", err)
			return total
		}
		if n < cleanupChunk {
			if total > 0 {
				c.log.Info("inbox markers deleted", "count", total, "older_than", c.cfg.Retention)
			}
			return total
		}
	}
}

// replay applies the parked messages an operator asked to replay, and
// those a hold of their key was passed on to (ConsumerConfig.HoldKeys),
// until none is left.
func (c *Consumer[TTx]) replay(ctx, work context.Context) {
	if c.holdsTopic != nil {
		n, err := c.holds.RepairHolds(work, c.ib.consumer)
		if err != nil {
			c.log.Warn("could not pass on the holds of discarded parked messages", "error", err)
		} else if n > 0 {
			c.log.Info("holds of discarded parked messages passed on to the messages held behind them", "holds", n)
		}
	}
	for c.replayPass(ctx, work) && ctx.Err() == nil {
	}
}

// replayPass replays up to replayBatch parked messages of the consumer
// whose replay was requested, oldest first, and reports whether another
// pass has some to replay: a hold passed on, or a replay request moved to
// a held message's cause.
func (c *Consumer[TTx]) replayPass(ctx, work context.Context) (again bool) {
	ps, err := c.cs.ReplayRequested(ctx, c.ib.consumer, replayBatch)
	if err != nil {
		c.log.Warn("could not read replay requests", "error", err)
		return false
	}
	for _, p := range ps {
		if p.Behind != 0 && c.holds != nil {
			// A held message is applied after its cause: replay that.
			if err := c.holds.RequestCause(work, p.ID, p.Behind); err != nil {
				c.log.Warn("could not request the replay of a held message's cause", "parked_id", p.ID, "cause", p.Behind, "error", err)
				continue
			}
			c.log.Info("replay of a held message requested: replaying the parked message that holds its key first",
				"parked_id", p.ID, "cause", p.Behind)
			again = true
			continue
		}
		msg, err := c.sub.Decode(broker.Raw{Subject: p.Subject, Headers: p.Headers, Data: p.Payload})
		var res Result
		if err == nil {
			res, err = c.ib.Handle(c.messageContext(work, msg), msg, c.run)
		}
		if err != nil {
			c.log.Warn("replay failed; the message stays parked", "parked_id", p.ID, "error", redact.Text(err.Error()))
			if err := c.cs.ReplayFailed(work, p.ID, describe(err)); err != nil {
				c.log.Warn("could not record the failed replay", "parked_id", p.ID, "error", err)
			}
			continue
		}
		if p.Key != "" && c.holds != nil {
			// Applied: unpark it and pass its key's hold on to the next
			// message held behind it, or release the key.
			next, err := c.holds.PassHold(work, c.ib.consumer, p.Key, p.ID)
			if err != nil {
				// Applied but still parked: a second replay is a duplicate.
				c.log.Warn("replayed message could not be unparked", "parked_id", p.ID, "error", err)
				continue
			}
			if next != 0 {
				again = true
				c.log.Info("hold of the key passed on to the next message held behind it", "parked_id", p.ID, "key", p.Key, "next", next)
			} else {
				c.log.Info("replayed message unparked; no message of its key is held behind it", "parked_id", p.ID, "key", p.Key)
			}
		} else if err := c.cs.Unpark(work, p.ID); err != nil {
			// Applied but still parked: a second replay is a duplicate.
			c.log.Warn("replayed message could not be unparked", "parked_id", p.ID, "error", err)
			continue
		}
		if res == Duplicate {
			// Another instance of the consumer replayed it meanwhile (each
			// reads the requests), or it was applied before it was parked:
			// counted where it was applied.
			continue
		}
		c.replayed.Add(1)
		c.cfg.Observer.Replayed(c.ib.consumer, msg)
		c.log.Info("parked message replayed", "parked_id", p.ID, "message_id", msg.ID)
	}
	return again
}
