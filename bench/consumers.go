package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// The consumers section measures an inbox consumer that keeps each key's
// order (inbox.ConsumerConfig.KeepOrder) run as 1, 2 and 4 instances that
// share a topic's keys (broker.KeySharer): NATS JetStream with
// SubscriberConfig.Partitions on a current nats-server the bench starts,
// Kafka (kfake) with a consumer group, RabbitMQ with partition queues.
// Every instance runs in the bench process with a broker connection, a
// subscriber, an inbox.Consumer and a PostgreSQL pool of its own; its
// handler inserts one row per message in the inbox's transaction (or, as a
// batch handler, a group's rows in one statement). Per broker, consumer
// shape (concurrency, group size, handler) and instance count: the drain
// of a backlog published beforehand,
// the latency from publish to applied at a steady rate below what one
// instance drains, the CPU of PostgreSQL, of the bench process, of the
// broker and of the whole machine while draining; and whether every
// message was applied once, each key's in order.

// The consumers section's flags, registered here so that the section
// keeps its settings to itself.
var (
	consBrokerList   = consBrokerNames
	consInstanceList = []int{1, 2, 4}
	// consConcurrencyList are the inbox.ConsumerConfig.Concurrency values
	// measured, each with every instance count.
	consConcurrencyList = []int{8}
	// consGroupList are the inbox.ConsumerConfig.Group.MaxMessages values
	// measured, each with every concurrency and instance count; 1 applies
	// each message in a transaction of its own.
	consGroupList = []int{1}
	// consGroupWait is the instances' Group.MaxWait.
	consGroupWait time.Duration
	// consHandlerList are the handlers measured (consHandlers), each with
	// every group size.
	consHandlerList = []string{consHandlerMessage}
	// consN and consKeys are the drain's messages and keys (0: the
	// defaults, smaller with -quick).
	consN, consKeys int
	consPartitions  = 16
	consRate        = 1000
	// consWindow is how long the latency run is measured, after its
	// warm-up (0: 5 s, 2 s with -quick).
	consWindow time.Duration
	// consSyncCommit is synchronous_commit of the instances' sessions.
	consSyncCommit = "on"
)

const (
	consDefaultN    = 20000
	consQuickN      = 4000
	consDefaultKeys = 2000
	consQuickKeys   = 400
	// consMaxCall is the most messages one Publish call carries.
	consMaxCall = 1000
	// consStall is how long a drain or the latency run may apply nothing
	// before it is given up.
	consStall = time.Minute
	// consScaleTarget is the 4 instances ÷ 1 drain ratio aimed at where
	// the database is not the limit.
	consScaleTarget = 3.0
)

func init() {
	flag.Func("consumers-brokers", "comma-separated brokers of the consumers section: "+strings.Join(consBrokerNames, ", ")+" (default all)",
		func(s string) error {
			list := splitList(s)
			for _, br := range list {
				if _, err := consBrokerByName(br); err != nil {
					return err
				}
			}
			consBrokerList = list
			return nil
		})
	intListFlag("consumers-instances", "comma-separated instance counts of the consumers section (default 1,2,4)", "instance count", &consInstanceList)
	intListFlag("consumers-concurrency", "comma-separated inbox.ConsumerConfig.Concurrency values of each instance in the consumers section, each measured with every instance count (default 8)",
		"Concurrency", &consConcurrencyList)
	intListFlag("consumers-group", "comma-separated inbox.ConsumerConfig.Group.MaxMessages values of each instance in the consumers section, each measured with every concurrency and instance count; 1 applies each message alone, as the library does by default (default 1)",
		"group size", &consGroupList)
	flag.DurationVar(&consGroupWait, "consumers-group-wait", 0, "inbox.ConsumerConfig.Group.MaxWait of the consumers section's instances (default 0: a group closes when nothing else waits)")
	flag.Func("consumers-handlers", "comma-separated handlers of the consumers section: "+consHandlerMessage+" (a Handler inserting one row per message), "+consHandlerBatch+
		" (inbox.OnBatch with inbox.NewRouterConsumer, a group's rows in one statement) (default "+consHandlerMessage+")",
		func(s string) error {
			var list []string
			for _, h := range splitList(s) {
				if h != consHandlerMessage && h != consHandlerBatch {
					return fmt.Errorf("unknown handler %q (want %s or %s)", h, consHandlerMessage, consHandlerBatch)
				}
				if !slices.Contains(list, h) {
					list = append(list, h)
				}
			}
			if len(list) == 0 {
				return errors.New("no handler given")
			}
			consHandlerList = list
			return nil
		})
	flag.IntVar(&consN, "consumers-n", 0, fmt.Sprintf("messages per drain in the consumers section (default %d, %d with -quick)", consDefaultN, consQuickN))
	flag.IntVar(&consKeys, "consumers-keys", 0, fmt.Sprintf("keys the consumers section's messages are spread over (default %d, %d with -quick)", consDefaultKeys, consQuickKeys))
	flag.IntVar(&consPartitions, "consumers-partitions", consPartitions, "partitions the consumers section's keys are spread over (NATS and RabbitMQ Partitions, the Kafka topic's)")
	flag.IntVar(&consRate, "consumers-rate", consRate, "messages per second offered in the consumers section's latency run")
	flag.StringVar(&consSyncCommit, "consumers-sync-commit", consSyncCommit, "synchronous_commit of the consumers section's instance sessions (on holds each commit until the WAL is flushed)")
	flag.DurationVar(&consWindow, "consumers-window", 0, "how long the consumers section's latency run is measured after a warm-up (default 5s, 2s with -quick)")
}

// intListFlag registers a flag of comma-separated positive integers (what
// names one of them), kept distinct and sorted in *dst.
func intListFlag(name, usage, what string, dst *[]int) {
	flag.Func(name, usage, func(s string) error {
		var list []int
		for _, f := range splitList(s) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				return fmt.Errorf("%q is not a %s: use 1 or more", f, what)
			}
			if !slices.Contains(list, n) {
				list = append(list, n)
			}
		}
		if len(list) == 0 {
			return fmt.Errorf("no %s given", what)
		}
		slices.Sort(list)
		*dst = list
		return nil
	})
}

// The section's handlers (-consumers-handlers).
const (
	// consHandlerMessage is a Handler inserting one row per message
	// (effectHandler).
	consHandlerMessage = "message"
	// consHandlerBatch is a batch handler (inbox.OnBatch, with
	// inbox.NewRouterConsumer) inserting a group's rows in one statement
	// (effectBatchHandler).
	consHandlerBatch = "batch"
)

// consShape is how a measurement's instances apply messages: their
// inbox.ConsumerConfig.Concurrency and Group.MaxMessages, and the handler.
type consShape struct {
	concurrency, group int
	// batch: the batch handler (consHandlerBatch), else one row per
	// message (consHandlerMessage).
	batch bool
}

// consShapes returns the shapes the flags ask for, in the order of the
// section's table: by concurrency, then group size, then handler.
func consShapes() []consShape {
	var out []consShape
	for _, c := range consConcurrencyList {
		for _, g := range consGroupList {
			for _, h := range consHandlerList {
				out = append(out, consShape{concurrency: c, group: g, batch: h == consHandlerBatch})
			}
		}
	}
	return out
}

// String names the shape in keys and progress lines ("c8/g100",
// "c8/g100/batch").
func (sh consShape) String() string {
	s := fmt.Sprintf("c%d/g%d", sh.concurrency, sh.group)
	if sh.batch {
		s += "/" + consHandlerBatch
	}
	return s
}

// handlerName is the shape's handler, as in -consumers-handlers.
func (sh consShape) handlerName() string {
	if sh.batch {
		return consHandlerBatch
	}
	return consHandlerMessage
}

// consSettings are one measurement's settings of the section.
type consSettings struct {
	n, keys, partitions, rate int
	warmup, window            time.Duration
	// shape is how the instances apply messages.
	shape consShape
	// heartbeat and timeout are the instances' group timing.
	heartbeat, timeout time.Duration
}

// consumerSettings returns the section's settings, from the flags and
// -quick, but for the shape.
func consumerSettings(cfg config) consSettings {
	s := consSettings{n: consN, keys: consKeys, partitions: consPartitions, rate: consRate,
		warmup: time.Second, window: consWindow, heartbeat: consHeartbeat, timeout: consTimeout}
	if cfg.quick {
		s.warmup = 500 * time.Millisecond
	}
	pick := func(v *int, def, quick int) {
		if *v <= 0 {
			*v = def
			if cfg.quick {
				*v = quick
			}
		}
	}
	pick(&s.n, consDefaultN, consQuickN)
	pick(&s.keys, consDefaultKeys, consQuickKeys)
	if s.window <= 0 {
		s.window = 5 * time.Second
		if cfg.quick {
			s.window = 2 * time.Second
		}
	}
	return s
}

// consumerFigures are the section's figures; their cells are keyed by
// consKey (broker, shape and instance count).
var consumerFigures = []Figure{
	{ID: "cons_drain", Section: "consumers", Label: "Drain", Unit: "msg/s", Digits: -1},
	{ID: "cons_per_tx", Section: "consumers", Label: "Messages per transaction, draining", Unit: "msg", Digits: 1},
	{ID: "cons_p50", Section: "consumers", Label: "Publish→applied p50", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "cons_p99", Section: "consumers", Label: "Publish→applied p99", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "cons_ack_p50", Section: "consumers", Label: "Publish→acknowledged p50", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "cons_ack_p99", Section: "consumers", Label: "Publish→acknowledged p99", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "cons_offered", Section: "consumers", Label: "Rate actually offered", Unit: "msg/s", Digits: -1},
	{ID: "cons_cpu_pg", Section: "consumers", Label: "PostgreSQL backends' CPU, draining", Unit: "cores", Digits: 2},
	{ID: "cons_cpu_pg_msg", Section: "consumers", Label: "PostgreSQL backends' CPU per message", Unit: "µs/msg", LowerIsBetter: true, Digits: 1},
	{ID: "cons_cpu_bench", Section: "consumers", Label: "Bench process's CPU, draining", Unit: "cores", Digits: 2},
	{ID: "cons_cpu_broker", Section: "consumers", Label: "Broker's CPU, draining", Unit: "cores", Digits: 2},
	{ID: "cons_cpu_msg", Section: "consumers", Label: "CPU per message: PostgreSQL's backends, the bench process and the broker", Unit: "µs/msg", LowerIsBetter: true, Digits: 1},
	{ID: "cons_cpu_machine", Section: "consumers", Label: "Machine's CPUs busy, draining", Unit: "cores", Digits: 2},
}

// consKey keys a cell of the section: broker, shape and instance count
// ("nats/c8/g100/i4", "nats/c8/g100/batch/i1").
func consKey(broker string, sh consShape, instances int) string {
	return fmt.Sprintf("%s/%s/i%d", broker, sh, instances)
}

// runConsumers runs the section once: every broker (in an order that
// rotates from run to run), each with every shape and every instance
// count, fewest first. A broker's shapes run in an order that rotates
// from run to run too, so that no group size always runs first.
func (b *Bench) runConsumers(ctx context.Context, try func(string, func() error), run int) {
	shapes := consShapes()
	for _, br := range rotate(consBrokerList, run-1) {
		for _, sh := range rotate(shapes, run-1) {
			for _, n := range consInstanceList {
				try(fmt.Sprintf("consumers: %s, %d instance(s) of concurrency %d, group %d, %s handler", br, n, sh.concurrency, sh.group, sh.handlerName()),
					func() error { return b.runConsumerGroup(ctx, br, sh, n) })
			}
		}
	}
}

// runConsumerGroup measures instances instances of one consumer of shape
// sh on brokerName: a fresh schema and destination, the instances started
// and sharing the partitions, then the drain and the latency run; the
// figures are recorded only if every message was applied once and each
// key's in order.
func (b *Bench) runConsumerGroup(ctx context.Context, brokerName string, sh consShape, instances int) error {
	br, err := consBrokerByName(brokerName)
	if err != nil {
		return err
	}
	s := consumerSettings(b.cfg)
	s.shape = sh
	key := consKey(brokerName, sh, instances)
	env, tgt, err := b.openConsumers(ctx, br, "consumers", s, "cons_drain", key)
	if err != nil || tgt == nil {
		return err
	}
	defer env.Close()
	defer tgt.close()
	grp, err := startConsumerGroup(ctx, env, tgt, s, instances)
	if err != nil {
		return err
	}
	defer grp.stop()
	if err := grp.waitShared(ctx, s.partitions); err != nil {
		return err
	}
	dr, err := b.consumerDrain(ctx, env, tgt, grp, s)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	lat, err := consumerLatency(ctx, env, tgt, grp, s)
	if err != nil {
		return fmt.Errorf("latency: %w", err)
	}
	if err := checkEffects(ctx, env, grp, s, s.n+lat.total); err != nil {
		return err
	}
	b.recordConsumers(key, tgt.inProcess, s, dr, lat)
	return nil
}

// openConsumers readies a measurement of section on br: a fresh schema
// with the effects table, and a fresh destination. A broker that cannot be
// measured here is recorded as skipped under figure and key, and returns
// no target and no error.
func (b *Bench) openConsumers(ctx context.Context, br consBroker, section string, s consSettings, figure, key string) (*Env, *consTarget, error) {
	env, err := newSchemaEnv(ctx, b.admin, b.cfg.pgURL, b.cfg.natsURL, section)
	if err != nil {
		return nil, nil, err
	}
	if err := prepareEffects(ctx, env); err != nil {
		env.Close()
		return nil, nil, err
	}
	tgt, err := br.open(b, ctx, env, s)
	if err != nil {
		env.Close()
		var nm errNotMeasured
		if errors.As(err, &nm) {
			logf("  %s not measured: %s", br.label, nm.why)
			b.results.Skip(figure, key, nm.why)
			return nil, nil, nil
		}
		return nil, nil, err
	}
	return env, tgt, nil
}

// recordConsumers records one measurement's figures under key;
// brokerInProcess says the broker runs in the bench process (kfake), whose
// CPU is counted already.
func (b *Bench) recordConsumers(key string, brokerInProcess bool, s consSettings, dr consDrainResult, lat consLatencyResult) {
	secs := dr.elapsed.Seconds()
	cores := func(d time.Duration) float64 { return d.Seconds() / secs }
	b.results.Add("cons_drain", key, float64(s.n)/secs)
	if dr.transactions > 0 {
		b.results.Add("cons_per_tx", key, float64(s.n)/float64(dr.transactions))
	}
	if dr.moved {
		b.results.Flag("cons_drain", key, "partitions moved between instances during the drain")
	}
	b.results.Add("cons_p50", key, lat.p50)
	b.results.Add("cons_p99", key, lat.p99)
	b.results.Add("cons_ack_p50", key, lat.ackP50)
	b.results.Add("cons_ack_p99", key, lat.ackP99)
	b.results.Add("cons_offered", key, lat.offered)
	if lat.offered < 0.95*float64(s.rate) {
		b.results.Flag("cons_p99", key, fmt.Sprintf("offered load not held: %.0f of %d msg/s published", lat.offered, s.rate))
	}
	if dr.pgOK {
		b.results.Add("cons_cpu_pg", key, cores(dr.pg))
		b.results.Add("cons_cpu_pg_msg", key, float64(dr.pg.Microseconds())/float64(s.n))
	}
	b.results.Add("cons_cpu_bench", key, cores(dr.bench))
	if dr.brokerOK {
		b.results.Add("cons_cpu_broker", key, cores(dr.broker))
	}
	if dr.machineOK {
		b.results.Add("cons_cpu_machine", key, dr.machineCores)
	}
	if dr.pgOK && (dr.brokerOK || brokerInProcess) {
		b.results.Add("cons_cpu_msg", key, float64((dr.pg+dr.bench+dr.broker).Microseconds())/float64(s.n))
	}
}

// consMessage is message i of a measurement: key keyFor(i, keys), the
// bench's payload carrying i.
func consMessage(i, keys int) courier.Message {
	return courierMessage(keyFor(i, keys), payloadFor(i))
}

// publishRange publishes messages from to to-1 (consMessage) in calls of
// at most min(consMaxCall, keys) consecutive messages, each call once the
// previous one was acknowledged: a call holds a key at most once and a
// key's next message goes only after its previous one was stored, so the
// broker keeps each key's order.
func publishRange(ctx context.Context, pub broker.Publisher, from, to, keys int) error {
	step := min(consMaxCall, keys)
	for i := from; i < to; i += step {
		msgs := make([]courier.Message, 0, step)
		for j := i; j < min(i+step, to); j++ {
			msgs = append(msgs, consMessage(j, keys))
		}
		if err := publishAll(ctx, pub, msgs); err != nil {
			return err
		}
	}
	return nil
}

// publishAll publishes msgs in one call, and those that failed again
// (at most 10 times, 100 ms apart), before it returns.
func publishAll(ctx context.Context, pub broker.Publisher, msgs []courier.Message) error {
	for attempt := 1; ; attempt++ {
		var again []courier.Message
		var last error
		for i, err := range pub.Publish(ctx, msgs) {
			if err != nil {
				again, last = append(again, msgs[i]), err
			}
		}
		if len(again) == 0 {
			return nil
		}
		if attempt == 10 {
			return fmt.Errorf("publish: %d of %d messages failed 10 times: %w", len(again), len(msgs), last)
		}
		msgs = again
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// seqOf returns the number i a message of the bench carries in its
// payload (payloadFor).
func seqOf(payload []byte) (int, error) {
	rest, ok := strings.CutPrefix(string(payload), `{"seq":`)
	if !ok {
		return 0, fmt.Errorf("%w: payload %.20q", courier.ErrMalformed, payload)
	}
	digits, _, _ := strings.Cut(rest, ",")
	n, err := strconv.Atoi(digits)
	if err != nil {
		return 0, fmt.Errorf("%w: payload %.20q", courier.ErrMalformed, payload)
	}
	return n, nil
}
