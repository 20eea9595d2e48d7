package main

import (
	"fmt"
	"runtime"
	"strings"
)

// renderConsumers renders the consumers section's table: a row per
// broker, concurrency and instance count, with the drain's ratio to one
// instance's, then the scaling per broker and concurrency.
func renderConsumers(sb *strings.Builder, fn *footnotes, res *Results, cfg config) {
	s := consumerSettings(cfg)
	w := func(format string, args ...any) { fmt.Fprintf(sb, format, args...) }
	w("Inbox consumers keeping each key's order, instances sharing the keys (%s messages over %s keys per drain; %d partitions; one row inserted per message on PostgreSQL, synchronous_commit %s; latency at %s msg/s; CPU while draining, in cores of the machine's %d):\n\n",
		thousands(int64(s.n)), thousands(int64(s.keys)), s.partitions, consSyncCommit, thousands(int64(s.rate)), runtime.NumCPU())
	w("| Broker | Concurrency | Instances | Drain (msg/s, ↑ better) | ÷ 1 instance | Publish→applied p50 (ms, ↓ better) | p99 (ms, ↓ better) | Rate offered (msg/s) | PostgreSQL backends (cores) | PostgreSQL backends (µs/msg, ↓ better) | Bench process (cores) | Broker (cores) | Those three (µs/msg, ↓ better) | Machine busy (cores) |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, br := range consBrokerList {
		label := br
		if cb, err := consBrokerByName(br); err == nil {
			label = cb.label
		}
		for _, conc := range consConcurrencyList {
			for _, n := range consInstanceList {
				w("| %s | %d | %d | %s |\n", label, conc, n, consumersRow(res, fn, cfg.runs, br, conc, n))
				label = ""
			}
		}
	}
	w("\n")
	renderConsumersScaling(sb, res)
}

// consumersRow renders the cells of one row of the consumers table after
// its first three.
func consumersRow(res *Results, fn *footnotes, runs int, br string, conc, n int) string {
	key := consKey(br, conc, n)
	c := func(id string) string {
		v, _, ok := cell(res, fn, figureByID(id), key, runs)
		switch {
		case ok:
		case id == "cons_drain" && len(res.SkippedOf(id, key)) > 0:
			v = "not measured (" + strings.Join(res.SkippedOf(id, key), "; ") + ")"
		case id == "cons_cpu_broker" && br == "kafka":
			v = "in the bench process"
		}
		return v
	}
	cells := []string{c("cons_drain"), consRatio(res, br, conc, n)}
	for _, id := range []string{"cons_p50", "cons_p99", "cons_offered", "cons_cpu_pg", "cons_cpu_pg_msg", "cons_cpu_bench", "cons_cpu_broker", "cons_cpu_msg", "cons_cpu_machine"} {
		cells = append(cells, c(id))
	}
	return strings.Join(cells, " | ")
}

// consRatio is the drain's median with n instances over one instance's, on
// broker br at concurrency conc; "" for one instance or when either is
// missing.
func consRatio(res *Results, br string, conc, n int) string {
	if n == 1 {
		return ""
	}
	one, ok1 := res.Stat("cons_drain", consKey(br, conc, 1))
	many, ok2 := res.Stat("cons_drain", consKey(br, conc, n))
	if !ok1 || !ok2 || one.Median <= 0 {
		return ""
	}
	return ratioText(many.Median / one.Median)
}

// renderConsumersScaling says, per broker and concurrency, how the drain
// scaled from one instance to the most measured and how busy the machine's
// CPUs and PostgreSQL's backends were with one instance and with the most.
func renderConsumersScaling(sb *strings.Builder, res *Results) {
	most := consInstanceList[len(consInstanceList)-1]
	if most == 1 {
		return
	}
	busy := func(key string) string {
		machine, okM := res.Stat("cons_cpu_machine", key)
		pg, okP := res.Stat("cons_cpu_pg", key)
		if !okM || !okP {
			return "?"
		}
		s := fmt.Sprintf("%.0f%% (PostgreSQL's backends %.2f cores", 100*machine.Median/float64(runtime.NumCPU()), pg.Median)
		if per, ok := res.Stat("cons_cpu_msg", key); ok && per.Median > 0 {
			s += fmt.Sprintf("; at %.0f µs of CPU per message, %d cores drain at most %s msg/s", per.Median, runtime.NumCPU(),
				thousands(int64(float64(runtime.NumCPU())*1e6/per.Median)))
		}
		return s + ")"
	}
	var lines []string
	for _, br := range consBrokerList {
		for _, conc := range consConcurrencyList {
			ratio := consRatio(res, br, conc, most)
			if ratio == "" {
				continue
			}
			lines = append(lines, fmt.Sprintf("- %s, concurrency %d: %s; the machine's CPUs busy with 1 instance %s, with %d %s",
				br, conc, ratio, busy(consKey(br, conc, 1)), most, busy(consKey(br, conc, most))))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(sb, "Drain with %d instances ÷ 1 (medians; target: at least %.0f× where the database is not the limit):\n\n%s\n",
		most, consScaleTarget, strings.Join(lines, "\n"))
}

// consumersSettingsText documents how the consumers section is measured.
func consumersSettingsText(cfg config) string {
	s := consumerSettings(cfg)
	return fmt.Sprintf(`- **Inbox consumers sharing the keys** (Courier alone): for each broker and each instance count (%s), a fresh PostgreSQL
  schema (`+"`postgres.Driver`"+`'s `+"`Migrate`"+` and a table `+"`effects`"+`) and a fresh destination; the instances run in the bench
  process, each with a broker connection, a subscriber, a pgx pool (Concurrency + 2 connections, synchronous_commit %s) and an `+"`inbox.NewConsumer`"+` of its own
  (`+"`inbox.ConsumerConfig{KeepOrder: true, Concurrency: c}`"+` for c in %s, every other setting its default) for one consumer (`+"`bench`"+`); the handler
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
  broker holds every message for them (NATS: the partition stream's count; the subscribers have pulled up to their prefetch meanwhile), then the clock runs until the consumers counted all applied
  (committed); msg/s. **Latency**: right after, with the same instances, %s msg/s published for %s of warm-up and %s measured (a call every
  %s with what fell due); from the moment a message's publish call began to its row's `+"`clock_timestamp()`"+` (the insert, just before
  the commit), p50 and p99. **Correctness**, or the run fails: every message published has exactly one row, each key's rows in the order
  published, nothing parked or retried. **CPU while draining**, in cores (CPU seconds over the drain's seconds): the PostgreSQL backends
  serving the instances' pools (/proc, by application_name; not PostgreSQL's WAL writer, checkpointer or other background processes),
  the bench process (getrusage: the instances, the publisher idle, and kfake for Kafka), the broker's process (nats-server; RabbitMQ's
  beam.smp, with any other client's load), and the machine's CPUs busy (/proc/stat: every process, other work on the machine included).
  Brokers run one after another in an order that rotates from run to run, each concurrency with its instance counts in increasing order; all is
  removed afterwards (schema, streams, kfake cluster, queues and exchanges).
`, joinInts(consInstanceList), consSyncCommit, joinInts(consConcurrencyList), s.partitions, s.partitions, s.partitions, s.partitions, consHeartbeat, consTimeout,
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
