package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/broker/brokerurl"
	"github.com/courier-go/courier/broker/webhook"
	"github.com/courier-go/courier/relay"
)

// The brokers section measures Courier's relay (only) draining the same
// PostgreSQL outbox to each broker Courier publishes to: NATS JetStream,
// Kafka, RabbitMQ and an HTTP webhook endpoint, over 10,000 keys and on one
// key. Everything but the broker is the drain section's Courier path: the
// schema, the fill, the store, the notifier and a relay with default
// settings in a child process; the child opens its publisher with
// brokerurl.Open, as the courier CLI does.

// benchBroker is a broker the brokers section drains to.
type benchBroker struct {
	name  string // as in -brokers; keys the results
	label string // as printed in tables
	// open readies a fresh destination for one drain of env's messages.
	open func(b *Bench, ctx context.Context, env *Env) (*brokerTarget, error)
	// stream: the drain publishes to env's JetStream stream, which
	// newEnv creates (the other brokers get a schema alone).
	stream bool
	// natsNodes: the stream is on nats-servers the bench starts from
	// -nats-server, this many of them (a cluster beyond one), replicated
	// on all; 0: on the -nats server.
	natsNodes int
}

// benchBrokers are the measured brokers, in the order of their table.
var benchBrokers = []benchBroker{
	{name: "nats", label: "NATS JetStream (-nats)", open: (*Bench).natsTarget, stream: true},
	{name: "nats-current", label: "NATS JetStream, current server", open: (*Bench).natsTarget, stream: true, natsNodes: 1},
	{name: "nats-r3", label: "NATS JetStream, current server, 3-node cluster (R3)", open: (*Bench).natsTarget, stream: true, natsNodes: 3},
	{name: "kafka", label: "Kafka (kfake, in-process fake)", open: (*Bench).kafkaTarget},
	{name: "amqp", label: "RabbitMQ", open: (*Bench).amqpTarget},
	{name: "webhook", label: "Webhook (loopback HTTP)", open: (*Bench).webhookTarget},
}

// brokerNames are the names of benchBrokers, the -brokers default.
var brokerNames = func() []string {
	names := make([]string, len(benchBrokers))
	for i, br := range benchBrokers {
		names[i] = br.name
	}
	return names
}()

// brokerByName returns the benchBroker named name.
func brokerByName(name string) (benchBroker, error) {
	i := slices.IndexFunc(benchBrokers, func(br benchBroker) bool { return br.name == name })
	if i < 0 {
		return benchBroker{}, fmt.Errorf("unknown broker %q (want %s)", name, strings.Join(brokerNames, ", "))
	}
	return benchBrokers[i], nil
}

// brokerLabel is a broker's name as printed in tables.
func brokerLabel(name string) string {
	if br, err := brokerByName(name); err == nil {
		return br.label
	}
	return name
}

// sweepKeys are the key counts a drain of the brokers and cdc sections may
// spread its messages over (-keys), interleaved as writers interleave
// them: message i has key i mod keys.
var sweepKeys = []int{1, 2, 10, 100, 500, 1000, 10000, 100000}

// drainKeys are the key counts of the drains of the brokers and cdc
// sections, in the order they run (-keys): by default 10,000 keys, then
// one.
var drainKeys = []int{10000, 1}

// brokerFigures are the brokers section's figures, one set per key count;
// their cells are keyed by broker name. CPU is per message, in
// microseconds.
var brokerFigures = func() []Figure {
	var figs []Figure
	for _, k := range sweepKeys {
		figs = append(figs,
			Figure{ID: brokerFigure("drain", k), Section: "brokers", Label: "Drain", Unit: "msg/s", Digits: -1},
			Figure{ID: brokerFigure("cpu_relay", k), Section: "brokers", Label: "Relay process CPU", Unit: "µs/msg", LowerIsBetter: true, Digits: 1},
			Figure{ID: brokerFigure("cpu_pg", k), Section: "brokers", Label: "PostgreSQL backends' CPU", Unit: "µs/msg", LowerIsBetter: true, Digits: 1},
			Figure{ID: brokerFigure("cpu_broker", k), Section: "brokers", Label: "Broker's (receiver's) CPU", Unit: "µs/msg", LowerIsBetter: true, Digits: 1},
			Figure{ID: brokerFigure("per_call", k), Section: "brokers", Label: "Messages per broker call", Unit: "msg", Digits: 0},
		)
	}
	return figs
}()

// keysText is a key count as the tables say it: "1 key", "10,000 keys".
func keysText(keys int) string {
	if keys == 1 {
		return "1 key"
	}
	return thousands(int64(keys)) + " keys"
}

// brokerFigure is the ID of the brokers section's figure what for drains
// over keys keys.
func brokerFigure(what string, keys int) string { return fmt.Sprintf("broker_%s_keys%d", what, keys) }

// Settings of the brokers section.
const (
	// kafkaPartitions is the partition count of the kfake topic.
	kafkaPartitions = 4
	// defaultAMQPURL is the -amqp default when BENCH_AMQP_URL is not set.
	defaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
)

// brokerTarget is one drain's destination.
type brokerTarget struct {
	// url is the broker URL the drain child opens with brokerurl.Open.
	url string
	// secrets sign webhook requests (a fresh random key per drain).
	secrets []string
	// cpu reads the broker's CPU (nil: not read).
	cpu cpuProbe
	// count returns how many messages the broker holds (or the receiver
	// took) in all, duplicates included, and how many distinct ones (-1:
	// the broker cannot tell).
	count func(ctx context.Context) (total, distinct int64, err error)
	// close removes what open created.
	close func()
}

// runBrokerDrain measures one drain of Courier's relay to broker: drainN
// messages over keys keys, written beforehand into a fresh schema.
func (b *Bench) runBrokerDrain(ctx context.Context, broker string, keys int) error {
	br, err := brokerByName(broker)
	if err != nil {
		return err
	}
	sys := &courierSystem{}
	notMeasured := func(err error) bool {
		var nm errNotMeasured
		if !errors.As(err, &nm) {
			return false
		}
		logf("  %s not measured: %s", br.label, nm.why)
		b.results.Skip(brokerFigure("drain", keys), broker, nm.why)
		return true
	}
	var env *Env
	var allowAtomic bool // the stream allows atomic batches
	if br.stream {
		natsURL, replicas := b.cfg.natsURL, 1
		if br.natsNodes > 0 {
			g, err := b.startedNATS(ctx, br.natsNodes)
			if notMeasured(err) {
				return nil
			}
			natsURL, replicas = g.url, br.natsNodes
		}
		var tune func(*jetstream.StreamConfig)
		if tune, allowAtomic, err = brokerStreamTune(natsURL, replicas); err != nil {
			return err
		}
		env, err = newEnv(ctx, b.admin, b.cfg.pgURL, natsURL, sys.Name(), tune)
	} else {
		env, err = newSchemaEnv(ctx, b.admin, b.cfg.pgURL, b.cfg.natsURL, sys.Name())
	}
	if err != nil {
		return err
	}
	defer env.Close()
	if err := sys.Prepare(ctx, env); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	tgt, err := br.open(b, ctx, env)
	if notMeasured(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer tgt.close()
	n := b.cfg.brokersN
	if err := sys.Fill(ctx, env, n, keys); err != nil {
		return err
	}
	rd, err := b.drainInChild(ctx, drainSpec{Env: *env, N: n, BrokerURL: tgt.url, BrokerSecrets: tgt.secrets},
		b.backendsProbe(env), tgt.cpu)
	if err != nil {
		return err
	}
	fig := brokerFigure("drain", keys)
	switch total, distinct, err := tgt.count(ctx); {
	case err != nil:
		b.results.Flag(fig, broker, "messages at the broker not counted: "+err.Error())
	case total > int64(n) && (distinct == -1 || distinct == int64(n)):
		// At least once: the relay publishes again what it did not see
		// acknowledged in time.
		b.results.Flag(fig, broker, fmt.Sprintf("the broker got %d messages for %d written: duplicates", total, n))
	case total != int64(n) || (distinct != -1 && distinct != int64(n)):
		b.results.Flag(fig, broker, fmt.Sprintf("the broker got %d messages (%d distinct) for %d written", total, distinct, n))
	}
	var left int64
	if err := env.Pool.QueryRow(ctx, "SELECT count(*) FROM courier_outbox").Scan(&left); err != nil {
		b.results.Flag(fig, broker, "outbox not counted after the drain: "+err.Error())
	} else if left != 0 {
		b.results.Flag(fig, broker, fmt.Sprintf("%d messages left in the outbox after the drain", left))
	}
	b.results.Add(fig, broker, float64(n)/rd.Elapsed.Seconds())
	if rd.BrokerCalls > 0 {
		b.results.Add(brokerFigure("per_call", keys), broker, float64(n)/float64(rd.BrokerCalls))
	}
	if allowAtomic && !rd.KeepsKeyOrder {
		// The stream allows atomic batches: the publisher should have
		// said it keeps a key's order, and the relay pipelined.
		b.results.Flag(fig, broker, "the stream allows atomic batches but the publisher did not keep a key's order (KeepsKeyOrder false): not pipelined")
	}
	perMsg := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	b.results.Add(brokerFigure("cpu_relay", keys), broker, perMsg(rd.CPU))
	if rd.dbOK {
		b.results.Add(brokerFigure("cpu_pg", keys), broker, perMsg(rd.dbCPU))
	}
	if rd.brokerOK {
		b.results.Add(brokerFigure("cpu_broker", keys), broker, perMsg(rd.brokerCPU))
	}
	return nil
}

// natsTarget is env's stream, on the -nats server or on nats-servers the
// bench started.
func (b *Bench) natsTarget(_ context.Context, env *Env) (*brokerTarget, error) {
	cpu := b.natsProbe()
	for _, g := range b.natsGroups {
		if g.url == env.NATSURL {
			cpu = g.probe
		}
	}
	return &brokerTarget{
		url: env.NATSURL,
		cpu: cpu,
		count: func(ctx context.Context) (int64, int64, error) {
			nc, err := natsgo.Connect(env.NATSURL)
			if err != nil {
				return 0, 0, err
			}
			defer nc.Close()
			n, err := streamCount(ctx, nc, env.Stream)
			// JetStream drops a message id it holds already (duplicate
			// window), so what it holds is distinct.
			return int64(n), int64(n), err
		},
		close: func() {},
	}, nil
}

// kafkaTarget starts a fresh kfake cluster in this process: one broker,
// messages kept in memory, a topic of kafkaPartitions partitions; the drain
// child reaches it over loopback TCP.
func (b *Bench) kafkaTarget(ctx context.Context, env *Env) (*brokerTarget, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(kafkaPartitions, Topic))
	if err != nil {
		return nil, fmt.Errorf("start kfake: %w", err)
	}
	return &brokerTarget{
		url: "kafka://" + strings.Join(c.ListenAddrs(), ","),
		cpu: selfProbe,
		count: func(ctx context.Context) (int64, int64, error) {
			n, err := kafkaRecords(ctx, c.ListenAddrs(), Topic)
			return n, -1, err
		},
		close: c.Close,
	}, nil
}

// kafkaRecords sums the end offsets of topic's partitions: the records
// the cluster took (a fresh topic, nothing deleted).
func kafkaRecords(ctx context.Context, seeds []string, topic string) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range int32(kafkaPartitions) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p
		rp.Timestamp = -1 // the end offset
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return 0, fmt.Errorf("partition %d: %w", p.Partition, err)
			}
			n += p.Offset
		}
	}
	return n, nil
}

// amqpTarget declares a fresh exchange on the -amqp server and a durable
// quorum queue bound to the benchmark's topic (without a bound queue
// RabbitMQ returns every message as unroutable). An unreachable server is
// errNotMeasured.
func (b *Bench) amqpTarget(ctx context.Context, _ *Env) (*brokerTarget, error) {
	if b.cfg.amqpURL == "" {
		return nil, errNotMeasured{"no RabbitMQ URL (-amqp is empty)"}
	}
	name := "bench_courier_" + randomToken(4)
	u, err := url.Parse(b.cfg.amqpURL)
	if err != nil {
		return nil, errNotMeasured{fmt.Sprintf("-amqp is not a URL: %v", err)}
	}
	q := u.Query()
	q.Set("exchange", name)
	u.RawQuery = q.Encode()
	cfg, err := amqp.ParseURL(u.String())
	if err != nil {
		return nil, errNotMeasured{fmt.Sprintf("-amqp: %v", err)}
	}
	topo := amqp.Topology{Queue: name, Topics: []string{Topic}}
	if err := amqp.EnsureTopology(ctx, cfg, topo); err != nil {
		return nil, errNotMeasured{fmt.Sprintf("cannot declare an exchange and a queue on RabbitMQ: %v", err)}
	}
	onChannel := func(f func(ch *amqp091.Channel) error) error {
		conn, err := amqp091.Dial(cfg.URL)
		if err != nil {
			return err
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		defer ch.Close()
		return f(ch)
	}
	return &brokerTarget{
		url: u.String(),
		cpu: pidProbe(findProcess("beam.smp")),
		count: func(context.Context) (int64, int64, error) {
			var n int64
			err := onChannel(func(ch *amqp091.Channel) error {
				qi, err := ch.QueueDeclarePassive(name, true, false, false, false, topo.QueueArgs())
				n = int64(qi.Messages)
				return err
			})
			return n, -1, err
		},
		close: func() {
			err := onChannel(func(ch *amqp091.Channel) error {
				if _, err := ch.QueueDelete(name, false, false, false); err != nil {
					return err
				}
				return ch.ExchangeDelete(name, false, false)
			})
			if err != nil {
				logf("warning: delete RabbitMQ queue and exchange %s: %v", name, err)
			}
		},
	}, nil
}

// webhookTarget serves a webhook receiver on a loopback port of this
// process: it verifies each request's Standard Webhooks signature
// (webhook.Verifier), notes its webhook-id and answers 204. It runs no
// webhook.Handler and no inbox: what is measured is the relay and its
// publisher, not a consumer's database.
func (b *Bench) webhookTarget(context.Context, *Env) (*brokerTarget, error) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	secret := webhook.SecretPrefix + base64.StdEncoding.EncodeToString(key)
	v, err := webhook.NewVerifier(webhook.VerifierConfig{Secrets: []string{secret}})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rcv := &webhookReceiver{v: v, seen: map[string]struct{}{}}
	srv := &http.Server{Handler: rcv, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	return &brokerTarget{
		url:     "http://" + ln.Addr().String() + "/" + Topic,
		secrets: []string{secret},
		cpu:     selfProbe,
		count: func(context.Context) (int64, int64, error) {
			total, distinct, refused := rcv.counts()
			if refused > 0 {
				return total, distinct, fmt.Errorf("%d requests failed verification", refused)
			}
			return total, distinct, nil
		},
		close: func() {
			_ = srv.Close()
			<-served
		},
	}, nil
}

// webhookReceiver is the webhook drain's endpoint.
type webhookReceiver struct {
	v       *webhook.Verifier
	mu      sync.Mutex
	seen    map[string]struct{} // webhook-ids received
	total   int64               // requests verified
	refused int64               // requests that failed verification
}

// ServeHTTP implements http.Handler.
func (r *webhookReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if _, err := r.v.Verify(req); err != nil {
		r.mu.Lock()
		r.refused++
		r.mu.Unlock()
		status := http.StatusBadRequest
		var ve *webhook.VerifyError
		if errors.As(err, &ve) {
			status = ve.Status
		}
		http.Error(w, err.Error(), status)
		return
	}
	r.mu.Lock()
	r.seen[req.Header.Get(webhook.HeaderID)] = struct{}{}
	r.total++
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// counts returns the verified requests, the distinct message ids among
// them and the requests refused.
func (r *webhookReceiver) counts() (total, distinct, refused int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total, int64(len(r.seen)), r.refused
}

// brokerRelayStarter returns what starts a drain child's Courier relay on
// env's schema (the drain section's store and notifier) publishing to
// s.BrokerURL with the publisher brokerurl.Open makes, with nothing created
// (the parent made the stream, topic, exchange and queue) and NATS subjects
// under env's prefix.
func brokerRelayStarter(s *drainSpec) (func(context.Context) (Relay, error), error) {
	return func(ctx context.Context) (Relay, error) {
		st, cfg, closeDB, err := openCourierStore(ctx, &s.Env)
		if err != nil {
			return nil, err
		}
		br, err := brokerurl.Open(ctx, s.BrokerURL, brokerurl.Options{
			Flag:           "broker URL",
			NoCreate:       true,
			SubjectPrefix:  s.Env.Prefix,
			WebhookSecrets: s.BrokerSecrets,
		})
		if err != nil {
			closeDB()
			return nil, err
		}
		// The Broker, as courier relay hands it: it passes its
		// publisher's broker.OrderKeeper on. The observer counts the
		// relay's calls to the publisher: a key's run in one call when
		// the relay pipelines, one message per call and key otherwise.
		calls := &callCounter{}
		cfg.Observer = calls
		r, err := runCourierRelay(st, br, cfg, func() {
			_ = br.Close()
			closeDB()
		})
		if err != nil {
			return nil, err
		}
		cr := r.(*courierRelay)
		cr.calls, cr.keeps = calls, func() bool { return broker.KeepsKeyOrder(br) }
		return cr, nil
	}, nil
}

// callCounter is a relay.Observer that counts the relay's calls to its
// publisher.
type callCounter struct {
	relay.NopObserver
	n atomic.Int64
}

// Published implements relay.Observer.
func (c *callCounter) Published([]courier.Message, []error, time.Duration) { c.n.Add(1) }

// rabbitMQVersion describes the -amqp server for the report.
func rabbitMQVersion(amqpURL string) string {
	if amqpURL == "" {
		return "not configured (-amqp is empty)"
	}
	cfg, err := amqp.ParseURL(amqpURL)
	if err != nil {
		return "bad URL: " + err.Error()
	}
	conn, err := amqp091.DialConfig(cfg.URL, amqp091.Config{Dial: amqp091.DefaultDial(10 * time.Second)})
	if err != nil {
		return brokerurl.Redact(amqpURL) + " unreachable: " + err.Error()
	}
	defer conn.Close()
	product, _ := conn.Properties["product"].(string)
	version, _ := conn.Properties["version"].(string)
	return fmt.Sprintf("%s %s at %s", product, version, brokerurl.Redact(amqpURL))
}

// renderBrokers renders the brokers section's table: per broker, a row for
// the drain over each key count (-keys), with its ratio to the drain over
// 10,000 keys.
func renderBrokers(sb *strings.Builder, fn *footnotes, res *Results, cfg config) {
	w := func(format string, args ...any) { fmt.Fprintf(sb, format, args...) }
	w("Courier's relay drain per broker (PostgreSQL outbox, %s messages per drain; CPU per message, µs):\n\n", thousands(int64(cfg.brokersN)))
	w("| Broker | Keys | Drain (msg/s, ↑ better) | ÷ 10,000 keys | Messages per broker call | Relay process CPU (µs/msg, ↓ better) | PostgreSQL backends' CPU (µs/msg, ↓ better) | Broker's (receiver's) CPU (µs/msg, ↓ better) |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, br := range cfg.brokers {
		for i, k := range drainKeys {
			name := brokerLabel(br)
			if i > 0 {
				name = ""
			}
			c := func(what string) string {
				s, _, ok := cell(res, fn, figureByID(brokerFigure(what, k)), br, cfg.runs)
				if !ok && what == "drain" && len(res.SkippedOf(brokerFigure(what, k), br)) > 0 {
					return "not measured (" + strings.Join(res.SkippedOf(brokerFigure(what, k), br), "; ") + ")"
				}
				return s
			}
			ratio := ""
			if k != 10000 {
				one, ok1 := res.Stat(brokerFigure("drain", k), br)
				many, ok2 := res.Stat(brokerFigure("drain", 10000), br)
				if ok1 && ok2 && many.Median > 0 {
					ratio = ratioText(one.Median / many.Median)
				}
			}
			w("| %s | %s | %s | %s | %s | %s | %s | %s |\n", name, thousands(int64(k)), c("drain"), ratio, c("per_call"), c("cpu_relay"), c("cpu_pg"), c("cpu_broker"))
		}
	}
	w("\n")
	if slices.Contains(cfg.brokers, "kafka") {
		w("Kafka here is **kfake**, franz-go's in-process fake cluster (one broker, records in memory, a topic of %d partitions), running in the bench's parent process and reached by the relay over loopback TCP: **not a Kafka server**. ", kafkaPartitions)
	}
	if slices.Contains(cfg.brokers, "webhook") {
		w("The webhook receiver runs in the parent process and only verifies each request's signature and answers 204: no `webhook.Handler`, no inbox. ")
	}
	if slices.ContainsFunc(cfg.brokers, func(name string) bool { return strings.HasPrefix(name, "nats-") }) {
		w("The current NATS server's rows run on nats-servers the bench started from `-nats-server` (one node; a 3-node cluster whose stream has 3 replicas), their streams allowing atomic batches, so that the relay hands the publisher a key's run in one call (Messages per broker call). ")
	}
	w("Broker's CPU: nats-server and RabbitMQ (beam.smp), the whole server process (with any other client's load; all three nodes for the cluster); kfake and the webhook receiver, the parent process during the drain (getrusage).\n")
}

// brokerSettingsText documents how the brokers section is measured.
func brokerSettingsText(cfg config) string {
	return fmt.Sprintf(`- **Courier relay drain per broker** (Courier alone): %s messages over 10,000 keys, and then %s on one key, written beforehand
  into a fresh PostgreSQL schema with Courier's outbox writer (transactions of 1000, the drain section's fill), then drained by a
  child process running the drain section's relay (`+"`"+`postgres.Driver`+"`"+`'s `+"`"+`RelayStore`+"`"+` with default settings, the LISTEN/NOTIFY notifier,
  `+"`"+`relay.Config`+"`"+` otherwise default: batches of 1000, 2 in flight) with the publisher `+"`"+`brokerurl.Open`+"`"+` makes (the
  `+"`"+`Broker`+"`"+`'s `+"`"+`Publisher`+"`"+` field, whose optional interfaces such as `+"`"+`broker.OrderKeeper`+"`"+` the relay sees; nothing
  created), the clock stopped when every message is acknowledged and marked; a relay.Observer counts the relay's calls to
  the publisher (messages per broker call: a key's run in one call when the relay pipelines, one message per key and call
  otherwise). Destinations, fresh for each drain: **NATS**, a stream on the `+"`"+`-nats`+"`"+` server (file storage, 2-minute
  duplicate window, as in every other drain, and allowing atomic batches on nats-server 2.12 and later, as `+"`"+`EnsureStream`+"`"+`
  creates it); **NATS, current server**, the same stream on a nats-server started by the bench from `+"`"+`-nats-server`+"`"+` (one
  node on loopback ports, its store in a temporary directory, every other setting its default, sync_interval included), and
  **NATS, 3-node cluster (R3)**, the same stream with 3 replicas on three such servers forming one cluster (the relay connects
  to all three URLs); on a stream that allows atomic batches the publisher must report `+"`"+`KeepsKeyOrder`+"`"+` true at the end of
  the drain, else the cell is flagged;
  **Kafka**, a kfake cluster (`+"`"+`github.com/twmb/franz-go/pkg/kfake`+"`"+`, one broker, in memory, topic `+"`"+`events`+"`"+` with %d
  partitions) started in the parent process, published to with Courier's Kafka publisher (franz-go, acks=all, idempotent, the rest as
  `+"`"+`kafka.NewPublisher`+"`"+` sets it); **RabbitMQ**, an exchange and a durable quorum queue bound to `+"`"+`events`+"`"+` on the
  `+"`"+`-amqp`+"`"+` server (publisher confirms, 2 channels); **webhook**, an HTTP server on a loopback port of the parent process that
  verifies each request (`+"`"+`webhook.Verifier`+"`"+`) and answers 204, with Courier's webhook publisher (16 requests in flight per
  batch, one key's messages one at a time). Afterwards the broker must hold exactly the messages written (stream count, the
  topic's end offsets, the queue's depth, the distinct webhook-ids and requests received) and the outbox must be empty; a cell is
  flagged otherwise. The ÷ 10,000 keys column divides the medians. CPU per message: the relay child's user+sys time, the
  PostgreSQL backends serving it, and the broker's process (nats-server, RabbitMQ's beam.smp; for kfake and the webhook receiver,
  the parent process), each over the drain.
`, thousands(int64(cfg.brokersN)), thousands(int64(cfg.brokersN)), kafkaPartitions)
}

// ratioText prints a ratio with two significant digits below 0.1.
func ratioText(r float64) string {
	if r < 0.1 {
		return fmt.Sprintf("%.2g×", r)
	}
	return fmt.Sprintf("%.2f×", r)
}
