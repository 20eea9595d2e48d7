package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	courieramqp "github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/broker/kafka"
	"github.com/courier-go/courier/broker/nats/embedded"
	"github.com/courier-go/courier/cmd/courier/internal/shop"
	"github.com/courier-go/courier/store/dburl"
)

// demoCmd runs the reference shop (cmd/courier/internal/shop) in-process under load
// and faults, then audits it.
type demoCmd struct {
	Orders      int           `help:"Orders to place." default:"1000" env:"COURIER_DEMO_ORDERS"`
	Concurrency int           `help:"POSTs in flight at once." default:"16" env:"COURIER_DEMO_CONCURRENCY"`
	InFlight    int           `help:"Most orders placed and not yet ended at once (0: no bound), so that latency measures the saga rather than a queue." default:"50" env:"COURIER_DEMO_IN_FLIGHT"`
	DataDir     string        `help:"Where the SQLite files, the embedded NATS server's stream and the log go: a new or empty directory, or one an earlier run made (its files of that run are deleted unless --keep; nothing else in it is). Default: a temporary directory, removed after a successful run." type:"path" env:"COURIER_DEMO_DATA_DIR"`
	Keep        bool          `help:"Keep what an earlier run left in --data-dir (and the PostgreSQL schemas, stream, topics or queues), run on a stream, topics, queues or schemas of the demo's names as they are, and leave this run's behind: delete nothing." env:"COURIER_DEMO_KEEP"`
	DatabaseURL string        `name:"database-url" help:"Run on PostgreSQL instead of SQLite files: postgres://… (one schema per service, courier_demo_orders and so on, created with the demo's mark and dropped; schemas of those names it did not create are refused)." env:"COURIER_DEMO_DATABASE_URL"`
	Broker      string        `help:"How the services' messages travel: nats (NATS JetStream, in this process unless --broker-url), kafka (an in-process Kafka cluster, kfake, unless --broker-url), amqp (RabbitMQ at --broker-url, default amqp://guest:guest@127.0.0.1:5672/) or webhook (signed HTTP POSTs to each service's loopback port)." default:"nats" enum:"nats,kafka,amqp,webhook" env:"COURIER_DEMO_BROKER"`
	BrokerURL   string        `name:"broker-url" help:"Use this broker instead of one in this process: nats://… with --broker nats, kafka://host:9092 with --broker kafka, amqp://user:password@host:5672/ with --broker amqp; what the demo creates there is deleted at its end, and an earlier run's marked stream at its start (unless --keep); a stream, topics or queues of its names it did not create are refused." env:"COURIER_DEMO_BROKER_URL"`
	Timeout     time.Duration `help:"How long to wait for every saga to end." default:"3m" env:"COURIER_DEMO_TIMEOUT"`

	DeclineRate         float64        `help:"Probability that payment declines a charge." default:"0.05" env:"COURIER_DEMO_DECLINE_RATE"`
	FailureRate         float64        `help:"Probability that a message handler fails (transient error; the inbox retries)." default:"0.05" env:"COURIER_DEMO_FAILURE_RATE"`
	Latency             time.Duration  `help:"Latency added to every message handler." default:"0s" env:"COURIER_DEMO_LATENCY"`
	DuplicateRate       float64        `help:"Probability that a delivery is duplicated." default:"0.05" env:"COURIER_DEMO_DUPLICATE_RATE"`
	ReorderRate         float64        `help:"Probability that a delivery is reordered." default:"0.05" env:"COURIER_DEMO_REORDER_RATE"`
	ShipmentFailureRate float64        `help:"Probability that shipping cannot prepare a shipment." default:"0.02" env:"COURIER_DEMO_SHIPMENT_FAILURE_RATE"`
	ReplayRate          float64        `help:"Probability that a placed order is POSTed again with the same Idempotency-Key." default:"0.05" env:"COURIER_DEMO_REPLAY_RATE"`
	Stock               map[string]int `help:"Initial stock per SKU, sku=qty,… (default: mug, tee, cap and poster with plenty, vinyl with too little)." mapsep:"," env:"COURIER_DEMO_STOCK"`
	Crash               string         `help:"Service one instance of which is crashed and restarted when half the orders are placed, the other going on: orders, payment, inventory, shipping or none." default:"orders" enum:"orders,payment,inventory,shipping,none" env:"COURIER_DEMO_CRASH"`
	StepTimeout         time.Duration  `help:"How long each saga step waits for its reply before it is compensated." default:"30s" env:"COURIER_DEMO_STEP_TIMEOUT"`
	Deploy              string         `help:"How version 2 of ChargeRequested is deployed once a third of the orders are placed, the shop starting with version 1: producer-first (orders, then payment: version 2 requests wait, uncounted, for payment's deploy), producer-first-late (the same, payment deployed only once one waited --newer-version-wait and was parked; the demo replays what was parked), consumer-first (payment with an upcaster from version 1, then orders) or none (version 2 throughout)." default:"producer-first-late" enum:"producer-first,producer-first-late,consumer-first,none" env:"COURIER_DEMO_DEPLOY"`
	NewerVersionWait    time.Duration  `help:"How long payment retries a request of a version newer than it knows before parking it." default:"2s" env:"COURIER_DEMO_NEWER_VERSION_WAIT"`
	consumerGroupFlags  `embed:"" envprefix:"COURIER_DEMO_"`
	Stream              string `help:"JetStream stream of the demo, created with the demo's mark (its description); a stream of that name without it is refused." default:"COURIER_DEMO" env:"COURIER_DEMO_STREAM"`
}

const demoSubjectPrefix = "courier-demo."

func (c *demoCmd) Run(e *env) (err error) {
	if err := c.validate(); err != nil {
		return err
	}
	// Schemas the demo did not create are refused before anything is
	// written.
	if err := c.checkSchemas(e.ctx); err != nil {
		return err
	}
	// An external broker is reached before anything is written, so that a
	// wrong --broker-url leaves nothing behind.
	external, err := c.externalTransport(e.ctx)
	if err != nil {
		return err
	}
	if external != nil && !c.Keep {
		defer teardownExternal(e, external)
	}
	dir, release, err := c.dataDir()
	if err != nil {
		return err
	}
	defer release()
	if c.DataDir == "" {
		defer func() {
			// The temporary directory is the demo's, all of it; a failed
			// run keeps its logs, which its error names.
			if err == nil && !c.Keep {
				_ = os.RemoveAll(dir)
			}
		}()
	}
	logPath := filepath.Join(dir, "demo.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	defer logFile.Close()
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))

	dbs, where, dropSchemas, err := c.databases(e, dir)
	if err != nil {
		return err
	}
	defer dropSchemas()
	tr, brokerWhere, stop, err := c.transport(external, dir)
	if err != nil {
		return err
	}
	defer stop()

	cfg := c.demoConfig(dbs, tr)
	cfg.Progress, cfg.Logger = e.stderr, log
	c.header(e.stdout, where, brokerWhere, logPath, cfg.Stock, cfg.Crash)
	return runDemo(e, cfg, logPath)
}

// validate checks the flags' values, and that --broker-url and
// --database-url name what the demo runs on, without connecting.
func (c *demoCmd) validate() error {
	if c.Orders < 1 || c.Concurrency < 1 || c.InFlight < 0 {
		return errors.New("--orders and --concurrency must be 1 or more, --in-flight 0 or more")
	}
	for name, v := range map[string]float64{"--decline-rate": c.DeclineRate, "--failure-rate": c.FailureRate, "--duplicate-rate": c.DuplicateRate,
		"--reorder-rate": c.ReorderRate, "--shipment-failure-rate": c.ShipmentFailureRate, "--replay-rate": c.ReplayRate} {
		if v < 0 || v > 1 {
			return fmt.Errorf("%s is %g: use a probability from 0 to 1", name, v)
		}
	}
	for name, v := range map[string]time.Duration{"--timeout": c.Timeout, "--step-timeout": c.StepTimeout, "--newer-version-wait": c.NewerVersionWait} {
		if v <= 0 {
			return fmt.Errorf("%s is %s: use more than 0", name, v)
		}
	}
	if c.Latency < 0 {
		return fmt.Errorf("--latency is %s: use 0 or more", c.Latency)
	}
	for sku, q := range c.Stock {
		if q < 0 {
			return fmt.Errorf("--stock %s=%d: use 0 or more", sku, q)
		}
	}
	if c.Stream == "" || strings.ContainsAny(c.Stream, " \t\r\n.*>/\\") {
		return fmt.Errorf("--stream %q is not a JetStream stream name: use letters, digits, - and _ (no spaces, '.', '*', '>' or slashes)", c.Stream)
	}
	if _, err := c.group(); err != nil {
		return err
	}
	if err := c.checkBrokerURL(); err != nil {
		return err
	}
	if _, err := dburl.WithSchema(c.DatabaseURL, "courier_demo"); c.DatabaseURL != "" && err != nil {
		// The services each get a schema of their own (search_path).
		return fmt.Errorf("--database-url %q: the demo runs on PostgreSQL (postgres://…), or without the flag on SQLite files", dburl.Redact(c.DatabaseURL))
	}
	return nil
}

// teardownExternal deletes what the demo made on an external broker,
// logging a failure.
func teardownExternal(e *env, external shop.Transport) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), 30*time.Second)
	defer cancel()
	if err := external.Teardown(ctx); err != nil {
		e.log.Warn("could not delete the demo's stream, topics or queues", "broker", external.String(), "error", err)
	}
}

// databases returns the services' databases and where they are: SQLite
// files in dir or, with --database-url, PostgreSQL schemas, created after
// an earlier run's (marked) are dropped. drop drops them again at the end;
// it does nothing on SQLite or with --keep.
func (c *demoCmd) databases(e *env, dir string) (dbs shop.Databases, where string, drop func(), err error) {
	drop = func() {}
	if c.DatabaseURL == "" {
		return shop.SQLiteDatabases(dir), fmt.Sprintf("SQLite files in %s (orders.db, payment.db, inventory.db, shipping.db)", dir), drop, nil
	}
	if dbs, err = shop.PostgresDatabases(c.DatabaseURL, "courier_demo"); err != nil {
		return dbs, "", nil, fmt.Errorf("--database-url: %w", err)
	}
	where = fmt.Sprintf("PostgreSQL %s, schemas courier_demo_orders, _payment, _inventory, _shipping", dburl.Redact(c.DatabaseURL))
	if !c.Keep {
		// An earlier run's schemas (marked) go; Foreign refused others.
		if err := dbs.Drop(e.ctx); err != nil {
			return dbs, "", nil, fmt.Errorf("--database-url: %v", oneLine(err))
		}
		drop = func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), 30*time.Second)
			defer cancel()
			if err := dbs.Drop(ctx); err != nil {
				e.log.Warn("could not drop the demo's schemas", "error", err)
			}
		}
	}
	if err := dbs.Create(e.ctx); err != nil {
		drop()
		return dbs, "", nil, fmt.Errorf("--database-url: %v", oneLine(err))
	}
	return dbs, where, drop, nil
}

// transport returns the external transport when there is one, else starts
// one in this process (see inProcessTransport). stop stops what it started.
func (c *demoCmd) transport(external shop.Transport, dir string) (tr shop.Transport, where string, stop func(), err error) {
	if external != nil {
		return external, external.String(), func() {}, nil
	}
	return c.inProcessTransport(dir)
}

// demoConfig turns the flags into the shop's demo configuration, with
// dbs and tr; Progress and Logger are left to the caller.
func (c *demoCmd) demoConfig(dbs shop.Databases, tr shop.Transport) shop.DemoConfig {
	faults := shop.Faults{FailureRate: c.FailureRate, Latency: c.Latency, DuplicateRate: c.DuplicateRate, ReorderRate: c.ReorderRate}
	perService := map[string]shop.Faults{}
	for _, s := range shop.Services {
		f := faults
		switch s {
		case shop.Payment:
			f.DeclineRate = c.DeclineRate
		case shop.Shipping:
			f.ShipmentFailureRate = c.ShipmentFailureRate
		}
		perService[s] = f
	}
	crash := c.Crash
	if crash == "none" {
		crash = ""
	}
	stock := c.Stock
	if len(stock) == 0 {
		stock = shop.DemoStock(c.Orders)
	}
	inFlight := c.InFlight
	if inFlight == 0 {
		inFlight = -1
	}
	deploy, late := c.deploy()
	group, _ := c.group() // validate checked it
	return shop.DemoConfig{
		Databases: dbs, Transport: tr,
		Orders: c.Orders, Concurrency: c.Concurrency, InFlight: inFlight, Stock: stock, Faults: perService, ReplayRate: c.ReplayRate,
		Crash: crash, Timeout: c.Timeout, Timeouts: shop.Timeouts{Step: c.StepTimeout},
		Deploy: deploy, DeployLate: late, NewerVersionWait: c.NewerVersionWait, Group: group,
	}
}

// deploy returns --deploy as the demo's Deploy and DeployLate.
func (c *demoCmd) deploy() (order string, late bool) {
	switch c.Deploy {
	case "none":
		return "", false
	case "producer-first-late":
		return shop.DeployProducerFirst, true
	}
	return c.Deploy, false
}

// runDemo runs the shop's demo, prints its report, and fails when the
// demo or one of its invariants did, naming the logs.
func runDemo(e *env, cfg shop.DemoConfig, logPath string) error {
	rep, err := shop.RunDemo(e.ctx, cfg)
	if err != nil {
		return fmt.Errorf("%w (logs: %s)", err, logPath)
	}
	if _, err := rep.WriteTo(e.stdout); err != nil {
		return err
	}
	if !rep.OK() {
		return fmt.Errorf("an invariant failed; see the report above and the logs in %s", logPath)
	}
	return nil
}

// dataDir returns the absolute path of the demo's data directory, ready:
// --data-dir (or COURIER_DEMO_DATA_DIR) when it is new, empty or the
// demo's (see prepareDataDir), else a new temporary directory. release
// lets another demo have --data-dir.
func (c *demoCmd) dataDir() (dir string, release func(), err error) {
	if c.DataDir == "" {
		dir, err := os.MkdirTemp("", "courier-demo-")
		if err != nil {
			return "", nil, fmt.Errorf("cannot create a temporary directory for the demo (%v): pass --data-dir", err)
		}
		return dir, func() {}, markDataDir(dir, "--data-dir")
	}
	dir, err = filepath.Abs(c.DataDir)
	if err != nil {
		return "", nil, fmt.Errorf("--data-dir %s: %w", c.DataDir, err)
	}
	flag := "--data-dir"
	if v, ok := os.LookupEnv("COURIER_DEMO_DATA_DIR"); ok && v == c.DataDir {
		flag = "--data-dir (COURIER_DEMO_DATA_DIR)"
	}
	release, err = prepareDataDir(dir, c.Keep, flag)
	return dir, release, err
}

// header says what is about to run.
func (c *demoCmd) header(w io.Writer, where, broker, logPath string, stock map[string]int, crash string) {
	skus := make([]string, 0, len(stock))
	for sku, q := range stock {
		skus = append(skus, fmt.Sprintf("%s %d", sku, q))
	}
	slices.Sort(skus)
	faults := fmt.Sprintf("payments declined %g%%, handler failures %g%%, deliveries duplicated %g%% and reordered %g%%, shipments failed %g%%, POSTs replayed %g%%",
		100*c.DeclineRate, 100*c.FailureRate, 100*c.DuplicateRate, 100*c.ReorderRate, 100*c.ShipmentFailureRate, 100*c.ReplayRate)
	if crash != "" {
		faults += ", an instance of " + crash + " crashed and restarted halfway"
	}
	deploy := "none: ChargeRequested version 2 throughout"
	switch order, late := c.deploy(); {
	case order == shop.DeployConsumerFirst:
		deploy = "ChargeRequested version 1 to 2 at a third of the orders, consumer first: payment, then orders"
	case late:
		deploy = fmt.Sprintf("ChargeRequested version 1 to 2 at a third of the orders, producer first: orders, then payment, after its newer-version wait (%s)", c.NewerVersionWait)
	case order == shop.DeployProducerFirst:
		deploy = "ChargeRequested version 1 to 2 at a third of the orders, producer first: orders, then payment"
	}
	fmt.Fprintf(w, "Courier demo: %d orders through the reference shop (cmd/courier/internal/shop)\n", c.Orders)
	fmt.Fprintf(w, "  services   orders (saga orchestrator, HTTP API), payment, inventory, shipping: each its own database, outbox and inbox,\n")
	fmt.Fprintf(w, "             run as %d instances with a relay and an inbox consumer each\n", shop.DefaultInstances)
	fmt.Fprintf(w, "  databases  %s\n", where)
	fmt.Fprintf(w, "  broker     %s\n", broker)
	fmt.Fprintf(w, "  stock      %s\n", strings.Join(skus, ", "))
	fmt.Fprintf(w, "  faults     %s\n", faults)
	fmt.Fprintf(w, "  deploy     %s\n", deploy)
	fmt.Fprintf(w, "  logs       %s\n\n", logPath)
}

// defaultAMQPURL is the RabbitMQ --broker amqp uses without --broker-url.
const defaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"

// checkBrokerURL checks that --broker-url names a broker of --broker's
// kind, without connecting.
func (c *demoCmd) checkBrokerURL() error {
	u := c.BrokerURL
	if u == "" {
		return nil
	}
	switch c.Broker {
	case "nats":
		if !strings.HasPrefix(u, "nats://") && !strings.HasPrefix(u, "tls://") {
			return fmt.Errorf("--broker-url %q is not a NATS URL: use nats://host:4222, or leave it out for a NATS server in this process (or choose another --broker)", dburl.Redact(u))
		}
	case "kafka":
		if _, err := kafka.ParseURL(u); err != nil {
			return fmt.Errorf("--broker-url %q is not a Kafka URL (%v): use kafka://host:9092, or leave it out for a Kafka cluster in this process", dburl.Redact(u), oneLine(err))
		}
	case "amqp":
		if _, err := courieramqp.ParseURL(u); err != nil {
			return fmt.Errorf("--broker-url %q is not a RabbitMQ URL (%v): use amqp://user:password@host:5672/, or leave it out for %s", dburl.Redact(u), oneLine(err), defaultAMQPURL)
		}
	case "webhook":
		return fmt.Errorf("--broker webhook takes no --broker-url: the services serve their webhooks on loopback ports of this process; leave --broker-url out")
	}
	return nil
}

// externalTransport returns the transport on the broker --broker-url names
// (RabbitMQ's default URL for amqp), after deleting an earlier run's
// stream, topics or queues (unless --keep) and checking that the broker
// answers; nil for a broker in this process.
func (c *demoCmd) externalTransport(ctx context.Context) (shop.Transport, error) {
	var tr shop.Transport
	var what string
	switch {
	case c.Broker == "amqp":
		u := c.BrokerURL
		if u == "" {
			u = defaultAMQPURL
		}
		cfg, err := courieramqp.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("--broker-url: %v", oneLine(err))
		}
		if cfg.RoutingKeyPrefix == "" {
			cfg.RoutingKeyPrefix = demoSubjectPrefix
		}
		tr, what = &shop.AMQPTransport{Config: cfg, QueuePrefix: demoSubjectPrefix, Partitions: shop.DefaultKeyPartitions}, "RabbitMQ at "+dburl.Redact(u)
	case c.BrokerURL == "" || c.Broker == "webhook":
		return nil, nil
	case c.Broker == "kafka":
		cfg, err := kafka.ParseURL(c.BrokerURL)
		if err != nil {
			return nil, fmt.Errorf("--broker-url: %v", oneLine(err))
		}
		if cfg.TopicPrefix == "" {
			cfg.TopicPrefix = demoSubjectPrefix
		}
		tr, what = &shop.KafkaTransport{Brokers: cfg.Brokers, TopicPrefix: cfg.TopicPrefix}, "Kafka at "+strings.Join(cfg.Brokers, ",")
	default:
		tr, what = &shop.NATSTransport{URL: c.BrokerURL, Stream: c.Stream, SubjectPrefix: demoSubjectPrefix, Partitions: shop.DefaultKeyPartitions}, "NATS at "+dburl.Redact(c.BrokerURL)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !c.Keep {
		// What the demo cannot tell it made stays, and the demo does not
		// run on it; an earlier run's marked stream goes.
		foreign, err := tr.Foreign(ctx)
		if err != nil {
			return nil, unreachable(c.Broker, what, c.BrokerURL == "", err)
		}
		if len(foreign) > 0 {
			return nil, c.foreign(what, foreign)
		}
		if err := tr.Teardown(ctx); err != nil {
			return nil, unreachable(c.Broker, what, c.BrokerURL == "", err)
		}
	}
	if err := tr.Setup(ctx); err != nil {
		return nil, unreachable(c.Broker, what, c.BrokerURL == "", err)
	}
	return tr, nil
}

// checkSchemas refuses, unless --keep, PostgreSQL schemas of the demo's
// names that it did not create (they lack the shop's mark): the demo drops
// its schemas before and after its run, and only its own.
func (c *demoCmd) checkSchemas(ctx context.Context) error {
	if c.DatabaseURL == "" || c.Keep {
		return nil
	}
	dbs, err := shop.PostgresDatabases(c.DatabaseURL, "courier_demo")
	if err != nil {
		return fmt.Errorf("--database-url: %w", err)
	}
	foreign, err := dbs.Foreign(ctx)
	if err != nil {
		return fmt.Errorf("--database-url: %v", oneLine(err))
	}
	if len(foreign) > 0 {
		return fmt.Errorf("--database-url: the database holds schemas %s, which courier demo did not create, and the demo drops only what it made: drop them yourself if they are yours to drop, use another database, or pass --keep to run on them as they are",
			strings.Join(foreign, ", "))
	}
	return nil
}

// foreign explains why the demo does not run on what it found on the
// broker.
func (c *demoCmd) foreign(what string, names []string) error {
	fix := "delete them yourself if they are an earlier run's (the demo cannot tell), or pass --keep to run on them as they are"
	if c.Broker == "nats" {
		fix = fmt.Sprintf("name another with --stream, or delete it yourself (nats stream rm %s) if it is yours to delete", c.Stream)
	}
	flag := "--broker-url"
	if c.Broker == "nats" {
		flag = "--stream"
	}
	return fmt.Errorf("%s: %s holds %s, which courier demo did not create, and the demo deletes only what it made: %s",
		flag, what, strings.Join(names, ", "), fix)
}

// unreachable explains a failure to prepare an external broker.
func unreachable(kind, what string, defaulted bool, err error) error {
	var netErr net.Error
	if !errors.As(err, &netErr) && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("--broker %s: preparing the demo's stream, topics or queues on %s failed: %v", kind, what, oneLine(err))
	}
	fix := "check --broker-url and that the broker runs there, or choose another --broker (kafka and webhook need nothing installed)"
	if kind == "amqp" && defaulted {
		fix = "start RabbitMQ there (e.g. docker run -d -p 5672:5672 rabbitmq:3) or name one with --broker-url amqp://user:password@host:5672/, or choose another --broker (kafka and webhook need nothing installed)"
	}
	return fmt.Errorf("--broker %s: cannot reach %s (%v): %s", kind, what, oneLine(err), fix)
}

// inProcessTransport starts the broker --broker names in this process:
// NATS with its stream in dir, a Kafka cluster, or the services' webhook
// endpoints. stop stops it.
func (c *demoCmd) inProcessTransport(dir string) (tr shop.Transport, where string, stop func(), err error) {
	switch c.Broker {
	case "kafka":
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(shop.DefaultPartitions))
		if err != nil {
			return nil, "", nil, fmt.Errorf("--broker kafka: start a Kafka cluster in this process: %w", err)
		}
		addrs := cluster.ListenAddrs()
		return &shop.KafkaTransport{Brokers: addrs, TopicPrefix: demoSubjectPrefix},
			fmt.Sprintf("Kafka in this process (kfake, %s), topics %s*, %d partitions each, in memory", strings.Join(addrs, ","), demoSubjectPrefix, shop.DefaultPartitions),
			cluster.Close, nil
	case "webhook":
		wt, err := shop.NewWebhookTransport(shop.WebhookConfig{})
		if err != nil {
			return nil, "", nil, err
		}
		return wt, "webhooks: each service's endpoint on a loopback port, requests signed with a generated whsec_ secret (Standard Webhooks)",
			func() { _ = wt.Close() }, nil
	}
	srv, err := embedded.Start(embedded.Config{Dir: filepath.Join(dir, "nats")})
	if err != nil {
		return nil, "", nil, err
	}
	return &shop.NATSTransport{URL: srv.ClientURL(), Stream: c.Stream, SubjectPrefix: demoSubjectPrefix, Partitions: shop.DefaultKeyPartitions},
		fmt.Sprintf("NATS JetStream in this process (%s), its stream in %s", srv.ClientURL(), filepath.Join(dir, "nats")),
		srv.Shutdown, nil
}
