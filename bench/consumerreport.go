package main

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"github.com/courier-go/courier/inbox"
)

// renderConsumers renders the consumers section's table: a row per
// broker, shape and instance count, with the drain's ratio to one
// instance's and to group 1's, then the scaling per broker and shape and
// what grouping changed.
func renderConsumers(sb *strings.Builder, fn *footnotes, res *Results, cfg config) {
	s := consumerSettings(cfg)
	w := func(format string, args ...any) { fmt.Fprintf(sb, format, args...) }
	w("Inbox consumers keeping each key's order, instances sharing the keys (%s messages over %s keys per drain; %d partitions; one row inserted per message on PostgreSQL, synchronous_commit %s; groups of at most the Group column's messages per transaction, Group.MaxWait %s; latency at %s msg/s; CPU while draining, in cores of the machine's %d):\n\n",
		thousands(int64(s.n)), thousands(int64(s.keys)), s.partitions, consSyncCommit, consGroupWait, thousands(int64(s.rate)), runtime.NumCPU())
	w("Messages per transaction: the drain's messages over the transactions that applied them (inbox.Observer.Grouped counts the groups). Publish→applied ends at the effect row's insert, publish→acknowledged when the consumer acknowledges the delivery, after its transaction committed: in a group, the second includes the group's other messages and the commit.\n\n")
	w("| Broker | Concurrency | Group | Instances | Drain (msg/s, ↑ better) | ÷ 1 instance | ÷ group 1 | Messages per transaction | Publish→applied p50 (ms, ↓ better) | p99 (ms, ↓ better) | Publish→acknowledged p50 (ms, ↓ better) | p99 (ms, ↓ better) | Rate offered (msg/s) | PostgreSQL backends (cores) | PostgreSQL backends (µs/msg, ↓ better) | Bench process (cores) | Broker (cores) | Those three (µs/msg, ↓ better) | Machine busy (cores) |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, br := range consBrokerList {
		label := br
		if cb, err := consBrokerByName(br); err == nil {
			label = cb.label
		}
		for _, sh := range consShapes() {
			for _, n := range consInstanceList {
				w("| %s | %d | %s | %d | %s |\n", label, sh.concurrency, groupText(sh), n, consumersRow(res, fn, cfg.runs, br, sh, n))
				label = ""
			}
		}
	}
	w("\n")
	var notes []string
	for _, text := range []string{consumersScalingText(res), consumersGroupingText(res)} {
		if text != "" {
			notes = append(notes, text)
		}
	}
	sb.WriteString(strings.Join(notes, "\n"))
}

// groupText is a shape's Group cell: its Group.MaxMessages, and the batch
// handler when it has one.
func groupText(sh consShape) string {
	if sh.batch {
		return fmt.Sprintf("%d, batch handler", sh.group)
	}
	return fmt.Sprint(sh.group)
}

// consumersRow renders the cells of one row of the consumers table after
// its first four.
func consumersRow(res *Results, fn *footnotes, runs int, br string, sh consShape, n int) string {
	key := consKey(br, sh, n)
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
	cells := []string{c("cons_drain"), consRatio(res, br, sh, n), groupRatio(res, "cons_drain", br, sh, n)}
	for _, id := range []string{"cons_per_tx", "cons_p50", "cons_p99", "cons_ack_p50", "cons_ack_p99", "cons_offered", "cons_cpu_pg", "cons_cpu_pg_msg", "cons_cpu_bench", "cons_cpu_broker", "cons_cpu_msg", "cons_cpu_machine"} {
		cells = append(cells, c(id))
	}
	return strings.Join(cells, " | ")
}

// consRatio is the drain's median with n instances over one instance's, on
// broker br with shape sh; "" for one instance or when either is missing.
func consRatio(res *Results, br string, sh consShape, n int) string {
	if n == 1 {
		return ""
	}
	one, ok1 := res.Stat("cons_drain", consKey(br, sh, 1))
	many, ok2 := res.Stat("cons_drain", consKey(br, sh, n))
	if !ok1 || !ok2 || one.Median <= 0 {
		return ""
	}
	return ratioText(many.Median / one.Median)
}

// ungrouped is sh's baseline: the same concurrency, each message in a
// transaction of its own, one row per message.
func ungrouped(sh consShape) consShape { return consShape{concurrency: sh.concurrency, group: 1} }

// groupRatio is figure id's median with shape sh over its baseline's
// (ungrouped), on broker br with n instances; "" for the baseline itself
// or when either is missing.
func groupRatio(res *Results, id, br string, sh consShape, n int) string {
	base := ungrouped(sh)
	if sh == base {
		return ""
	}
	one, ok1 := res.Stat(id, consKey(br, base, n))
	grouped, ok2 := res.Stat(id, consKey(br, sh, n))
	if !ok1 || !ok2 || one.Median <= 0 {
		return ""
	}
	return ratioText(grouped.Median / one.Median)
}

// consumersScalingText says, per broker and shape, how the drain
// scaled from one instance to the most measured and how busy the machine's
// CPUs and PostgreSQL's backends were with one instance and with the most.
func consumersScalingText(res *Results) string {
	most := consInstanceList[len(consInstanceList)-1]
	if most == 1 {
		return ""
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
		for _, sh := range consShapes() {
			ratio := consRatio(res, br, sh, most)
			if ratio == "" {
				continue
			}
			lines = append(lines, fmt.Sprintf("- %s, concurrency %d, group %s: %s; the machine's CPUs busy with 1 instance %s, with %d %s",
				br, sh.concurrency, groupText(sh), ratio, busy(consKey(br, sh, 1)), most, busy(consKey(br, sh, most))))
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return fmt.Sprintf("Drain with %d instances ÷ 1 (medians; target: at least %.0f× where the database is not the limit):\n\n%s\n",
		most, consScaleTarget, strings.Join(lines, "\n"))
}

// consGroupTarget is the drain of group DefaultGroupMessages over group
// 1's aimed at, with one instance, at a p99 no worse.
const consGroupTarget = 3.0

// consumersGroupingText says, per broker, shape and instance count, what
// grouping changed against each message in a transaction of its own: the
// drain, PostgreSQL's backends' CPU per message and the latency's p99.
func consumersGroupingText(res *Results) string {
	median := func(id, key string, digits int) string {
		st, ok := res.Stat(id, key)
		if !ok {
			return "?"
		}
		if digits < 0 {
			return thousands(int64(st.Median + 0.5))
		}
		return strconv.FormatFloat(st.Median, 'f', digits, 64)
	}
	var lines []string
	for _, br := range consBrokerList {
		for _, sh := range consShapes() {
			for _, n := range consInstanceList {
				drain := groupRatio(res, "cons_drain", br, sh, n)
				if drain == "" {
					continue
				}
				key, base := consKey(br, sh, n), consKey(br, ungrouped(sh), n)
				lines = append(lines, fmt.Sprintf("- %s, concurrency %d, %d instance(s), group %s: drain %s (%s against %s msg/s); PostgreSQL's backends %s against %s µs/msg (%s); p99 at the latency run's rate, publish→applied %s against %s ms (%s), publish→acknowledged %s against %s ms (%s)",
					br, sh.concurrency, n, groupText(sh), drain, median("cons_drain", key, -1), median("cons_drain", base, -1),
					median("cons_cpu_pg_msg", key, 1), median("cons_cpu_pg_msg", base, 1), groupRatio(res, "cons_cpu_pg_msg", br, sh, n),
					median("cons_p99", key, 2), median("cons_p99", base, 2), groupRatio(res, "cons_p99", br, sh, n),
					median("cons_ack_p99", key, 2), median("cons_ack_p99", base, 2), groupRatio(res, "cons_ack_p99", br, sh, n)))
			}
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return fmt.Sprintf("Grouped ÷ each message in a transaction of its own (group 1, one row per message; medians; target: with one instance, a drain at least %.0f× with group %d, at a p99 no worse):\n\n%s\n",
		consGroupTarget, inbox.DefaultGroupMessages, strings.Join(lines, "\n"))
}

// consumersSettingsText documents how the consumers section is measured.
func consumersSettingsText(cfg config) string {
	s := consumerSettings(cfg)
	return fmt.Sprintf(`- **Inbox consumers sharing the keys** (Courier alone): for each broker, each shape and each instance count (%s), a fresh PostgreSQL
  schema (`+"`postgres.Driver`"+`'s `+"`Migrate`"+` and a table `+"`effects`"+`) and a fresh destination; the instances run in the bench
  process, each with a broker connection, a subscriber, a pgx pool (Concurrency + 2 connections, synchronous_commit %s) and an `+"`inbox.NewConsumer`"+` of its own
  (`+"`inbox.ConsumerConfig{KeepOrder: true, Concurrency: c, Group: inbox.GroupConfig{MaxMessages: g, MaxWait: %s}}`"+` for c in %s and g in %s, every other setting its default) for one consumer (`+"`bench`"+`); the handler
  inserts one row (message id, key, number, instance, `+"`clock_timestamp()`"+`) in the inbox's transaction (handlers %s: "message", an `+"`inbox.Handler`"+`
  with one `+"`INSERT … VALUES`"+` per message; "batch", `+"`inbox.OnBatch`"+` registered on a router given to `+"`inbox.NewRouterConsumer`"+`, which decodes
  each JSON payload and inserts a group's rows in one `+"`INSERT … SELECT … FROM unnest($1::uuid[], $2::text[], $3::int[]) WITH ORDINALITY`"+`, in the group's order). **NATS**: a stream made by
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
  (committed); msg/s, and messages per transaction (the drain's messages over its transactions: the groups `+"`inbox.Observer.Grouped`"+` told, and each message applied alone). **Latency**: right after, with the same instances, %s msg/s published for %s of warm-up and %s measured (a call every
  %s with what fell due); from the moment a message's publish call began to its row's `+"`clock_timestamp()`"+` (the insert, just before
  the commit with one message per transaction; before the group's other messages and the commit in a group), p50 and p99, and to the moment the consumer calls the delivery's `+"`Ack`"+` (after the commit; a wrapper of the delivery notes it), p50 and p99. **Correctness**, or the run fails: every message published has exactly one row, each key's rows in the order
  published, nothing parked or retried. **CPU while draining**, in cores (CPU seconds over the drain's seconds): the PostgreSQL backends
  serving the instances' pools (/proc, by application_name; not PostgreSQL's WAL writer, checkpointer or other background processes),
  the bench process (getrusage: the instances, the publisher idle, and kfake for Kafka), the broker's process (nats-server; RabbitMQ's
  beam.smp, with any other client's load), and the machine's CPUs busy (/proc/stat: every process, other work on the machine included).
  Brokers run one after another in an order that rotates from run to run, each shape (concurrency, group, handler; in an order that rotates from run to run too) with its instance counts in increasing order; all is
  removed afterwards (schema, streams, kfake cluster, queues and exchanges).
`, joinInts(consInstanceList), consSyncCommit, consGroupWait, joinInts(consConcurrencyList), joinInts(consGroupList), strings.Join(consHandlerList, ", "), s.partitions, s.partitions, s.partitions, s.partitions, consHeartbeat, consTimeout,
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
