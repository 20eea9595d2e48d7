package main

import (
	"fmt"
	"runtime"
	"strings"
)

// renderConsumers renders the consumers section's table: a row per broker
// and instance count, with the drain's ratio to one instance's, then the
// scaling per broker against its target.
func renderConsumers(sb *strings.Builder, fn *footnotes, res *Results, cfg config) {
	s := consumerSettings(cfg)
	w := func(format string, args ...any) { fmt.Fprintf(sb, format, args...) }
	w("Inbox consumers keeping each key's order, instances sharing the keys (%s messages over %s keys per drain; %d partitions; Concurrency %d per instance; one row inserted per message on PostgreSQL; latency at %s msg/s; CPU while draining, in cores of the machine's %d):\n\n",
		thousands(int64(s.n)), thousands(int64(s.keys)), s.partitions, s.concurrency, thousands(int64(s.rate)), runtime.NumCPU())
	w("| Broker | Instances | Drain (msg/s, ↑ better) | ÷ 1 instance | Publish→applied p50 (ms, ↓ better) | p99 (ms, ↓ better) | Rate offered (msg/s) | PostgreSQL backends (cores) | PostgreSQL backends (µs/msg, ↓ better) | Bench process (cores) | Broker (cores) | Machine busy (cores) |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, br := range consBrokerList {
		label := br
		if cb, err := consBrokerByName(br); err == nil {
			label = cb.label
		}
		for i, n := range consInstanceList {
			key := consKey(br, n)
			name := label
			if i > 0 {
				name = ""
			}
			c := func(id string) string {
				v, _, ok := cell(res, fn, figureByID(id), key, cfg.runs)
				if !ok && id == "cons_drain" && len(res.SkippedOf(id, key)) > 0 {
					return "not measured (" + strings.Join(res.SkippedOf(id, key), "; ") + ")"
				}
				if !ok && id == "cons_cpu_broker" && br == "kafka" {
					return "in the bench process"
				}
				return v
			}
			w("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name, n, c("cons_drain"), consRatio(res, br, n),
				c("cons_p50"), c("cons_p99"), c("cons_offered"), c("cons_cpu_pg"), c("cons_cpu_pg_msg"), c("cons_cpu_bench"), c("cons_cpu_broker"), c("cons_cpu_machine"))
		}
	}
	w("\n")
	renderConsumersScaling(sb, res)
}

// consRatio is the drain's median with n instances over one instance's, on
// broker br; "" for one instance or when either is missing.
func consRatio(res *Results, br string, n int) string {
	if n == 1 {
		return ""
	}
	one, ok1 := res.Stat("cons_drain", consKey(br, 1))
	many, ok2 := res.Stat("cons_drain", consKey(br, n))
	if !ok1 || !ok2 || one.Median <= 0 {
		return ""
	}
	return ratioText(many.Median / one.Median)
}

// renderConsumersScaling says, per broker, how the drain scaled from one
// instance to the most measured and how busy the machine's CPUs and
// PostgreSQL were at the most.
func renderConsumersScaling(sb *strings.Builder, res *Results) {
	most := consInstanceList[len(consInstanceList)-1]
	if most == 1 {
		return
	}
	var lines []string
	for _, br := range consBrokerList {
		ratio := consRatio(res, br, most)
		if ratio == "" {
			continue
		}
		line := fmt.Sprintf("%s %s", br, ratio)
		machine, okM := res.Stat("cons_cpu_machine", consKey(br, most))
		pg, okP := res.Stat("cons_cpu_pg", consKey(br, most))
		if okM && okP {
			line += fmt.Sprintf(" (at %d instances the machine's CPUs were %.0f%% busy, PostgreSQL's backends %.2f cores of them)",
				most, 100*machine.Median/float64(runtime.NumCPU()), pg.Median)
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(sb, "Drain with %d instances ÷ 1 (medians): %s. Target: at least %.0f× where the database is not the limit.\n", most, strings.Join(lines, "; "), consScaleTarget)
}

// consumersSettingsText documents how the consumers section is measured.
func consumersSettingsText(cfg config) string {
	s := consumerSettings(cfg)
	return fmt.Sprintf(`- **Inbox consumers sharing the keys** (Courier alone): for each broker and each instance count (%s), a fresh PostgreSQL
  schema (`+"`postgres.Driver`"+`'s `+"`Migrate`"+` and a table `+"`effects`"+`) and a fresh destination; the instances run in the bench
  process, each with a broker connection, a subscriber, a pgx pool (Concurrency + 2 connections) and an `+"`inbox.NewConsumer`"+` of its own
  (`+"`inbox.ConsumerConfig{KeepOrder: true, Concurrency: %d}`"+`, every other setting its default) for one consumer (`+"`bench`"+`); the handler
  inserts one row (message id, key, number, instance, `+"`clock_timestamp()`"+`) in the inbox's transaction. **NATS**: a stream made by
  `+"`couriernats.EnsureStream`"+` on the current nats-server the bench starts from `+"`-nats-server`"+` (as the brokers section's
  nats-current), publisher and subscribers with `+"`Config.KeySubjects`"+`, `+"`SubscriberConfig{Partitions: %d}`"+` (the partition stream
  the first instance makes; Prefetch and MaxAckPending at their defaults, per partition). **Kafka**: kfake in the bench process, a topic of
  %d partitions, the instances one consumer group (`+"`kafka.SubscriberConfig`"+`, Prefetch at its default). **RabbitMQ**: `+"`amqp.EnsureTopology`"+`
  with `+"`Partitions: %d`"+` (a consistent-hash exchange on the key, quorum queues with a single active consumer) on `+"`-amqp`"+`, subscribers
  with `+"`Partitions: %d`"+` (Prefetch at its default, per partition). Group heartbeat %s, timeout %s (Kafka: heartbeat interval and session
  timeout). Once the instances hold the partitions evenly (each partitions÷instances, rounded), **drain**: %s messages over %s keys
  (message i has key i mod %s) are published in calls of at most %s, each call once the previous one was acknowledged, so each holds a key
  once and the broker keeps each key's order; the instances hold their deliveries back (a gate in front of the subscriber's Next) until the
  broker holds every message for them (NATS: the partition stream's count), then the clock runs until the consumers counted all applied
  (committed); msg/s. **Latency**: right after, with the same instances, %s msg/s published for %s of warm-up and %s measured (a call every
  %s with what fell due); from the moment a message's publish call began to its row's `+"`clock_timestamp()`"+` (the insert, just before
  the commit), p50 and p99. **Correctness**, or the run fails: every message published has exactly one row, each key's rows in the order
  published, nothing parked or retried. **CPU while draining**, in cores (CPU seconds over the drain's seconds): the PostgreSQL backends
  serving the instances' pools (/proc, by application_name; not PostgreSQL's WAL writer, checkpointer or other background processes),
  the bench process (getrusage: the instances, the publisher idle, and kfake for Kafka), the broker's process (nats-server; RabbitMQ's
  beam.smp, with any other client's load), and the machine's CPUs busy (/proc/stat: every process, other work on the machine included).
  Brokers run one after another in an order that rotates from run to run, each with its instance counts in increasing order; all is
  removed afterwards (schema, streams, kfake cluster, queues and exchanges).
`, joinInts(consInstanceList), s.concurrency, s.partitions, s.partitions, s.partitions, s.partitions, consHeartbeat, consTimeout,
		thousands(int64(s.n)), thousands(int64(s.keys)), thousands(int64(s.keys)), thousands(int64(min(consMaxCall, s.keys))),
		thousands(int64(s.rate)), s.warmup, s.window, consTick)
}

// joinInts joins ns with commas.
func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = fmt.Sprint(n)
	}
	return strings.Join(parts, ", ")
}
