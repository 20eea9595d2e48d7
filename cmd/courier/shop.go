package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	courieramqp "github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/broker/kafka"
	"github.com/courier-go/courier/cmd/courier/internal/shop"
	"github.com/courier-go/courier/internal/setting"
	"github.com/courier-go/courier/store/dburl"
)

// shopCmd runs one service of the reference shop as a process of its own.
type shopCmd struct {
	Orders    shopOrdersCmd    `cmd:"" help:"The saga orchestrator and the HTTP API (POST /orders, GET /orders/{id})."`
	Payment   shopPaymentCmd   `cmd:"" help:"Charges orders and refunds them."`
	Inventory shopInventoryCmd `cmd:"" help:"Reserves stock and releases it."`
	Shipping  shopShippingCmd  `cmd:"" help:"Prepares shipments and cancels them."`
}

// shopFlags are every service's flags.
type shopFlags struct {
	DatabaseURL        string        `name:"database-url" help:"The service's own database: a SQLite file, postgres://…?search_path=SCHEMA (created if missing) or mysql://… (default: ./shop-SERVICE.db)." env:"COURIER_SHOP_DATABASE_URL"`
	BrokerURL          string        `name:"broker-url" help:"Broker shared by the four services: a NATS server with JetStream (courier relay serves one on this address), kafka://host:9092 or amqp://user:password@host:5672/." default:"nats://127.0.0.1:4222" env:"COURIER_BROKER_URL"`
	Stream             string        `help:"JetStream stream of the shop (NATS only)." default:"SHOP" env:"COURIER_SHOP_STREAM"`
	SubjectPrefix      string        `help:"Prefix that turns a topic into a subject, a Kafka topic or a RabbitMQ routing key, and names the Kafka consumer groups and RabbitMQ queues; a topic_prefix or prefix in --broker-url wins." default:"shop." env:"COURIER_SHOP_SUBJECT_PREFIX"`
	Partitions         int           `help:"Share the service's keys among its processes over this many partitions (give each process of the service the same number): each key's messages are applied in order, by one process at a time. NATS needs nats-server 2.10 or later (on an older one the processes share the durable consumer, as with 0, and the log says so); RabbitMQ needs the rabbitmq_consistent_hash_exchange plugin; on Kafka the consumer group shares the topics' partitions anyway, and this is how many a topic gets when created. 0: the processes share the durable consumer (NATS) or stand by on the queue (RabbitMQ)." env:"COURIER_SHOP_PARTITIONS"`
	HoldKeys           []string      `name:"hold-keys" placeholder:"TOPIC" help:"Topics whose keys the service's consumer holds: a message of theirs that is parked holds its key, and the key's later messages are parked behind it (reason held) until courier dlq replay or discard releases them, in order; * alone: every topic. Keeps each key's order in the process. Repeatable, or comma-separated." env:"COURIER_SHOP_HOLD_KEYS"`
	FailureRate        float64       `help:"Probability that a message handler fails (transient error; the inbox retries)." env:"COURIER_SHOP_FAILURE_RATE"`
	Latency            time.Duration `help:"Latency added to every message handler." env:"COURIER_SHOP_LATENCY"`
	DuplicateRate      float64       `help:"Probability that a delivery is duplicated." env:"COURIER_SHOP_DUPLICATE_RATE"`
	ReorderRate        float64       `help:"Probability that a delivery is reordered." env:"COURIER_SHOP_REORDER_RATE"`
	CrashAfter         time.Duration `help:"Exit abruptly (status 3, nothing drained) this long after starting, for a supervisor to restart the service." env:"COURIER_SHOP_CRASH_AFTER"`
	MetricsAddr        string        `name:"metrics-addr" help:"Serve /metrics (Prometheus), /healthz and /readyz on this address, such as 127.0.0.1:9465. Empty: not served." env:"COURIER_SHOP_METRICS_ADDR"`
	consumerGroupFlags `embed:"" envprefix:"COURIER_SHOP_"`
	LatencyEvery       time.Duration `name:"latency-every" help:"Record the consumer's latency, commit to applied per topic, in the service's database this often (table courier_latency; courier status and the dashboard show it). 0: not recorded." default:"10s" env:"COURIER_SHOP_LATENCY_EVERY"`
}

func (f shopFlags) config(service string, e *env) (shop.Config, error) {
	if f.Partitions < 0 {
		return shop.Config{}, fmt.Errorf("--partitions is %d: use 0 (no sharing by partition) or more, the same for every process of the service", f.Partitions)
	}
	if f.LatencyEvery < 0 {
		return shop.Config{}, fmt.Errorf("--latency-every is %s: use 0 (not recorded) or more, such as 10s", f.LatencyEvery)
	}
	if _, err := setting.TopicSet("--hold-keys", f.HoldKeys); err != nil {
		return shop.Config{}, err
	}
	group, err := f.group()
	if err != nil {
		return shop.Config{}, err
	}
	url := f.DatabaseURL
	if url == "" {
		url = "shop-" + service + ".db"
	}
	tr, err := f.transport()
	if err != nil {
		return shop.Config{}, err
	}
	return shop.Config{
		DatabaseURL: url, Transport: tr, Logger: e.log, MetricsAddr: f.MetricsAddr, HoldKeys: f.HoldKeys, LatencyEvery: f.LatencyEvery, Group: group,
		Faults: shop.Faults{FailureRate: f.FailureRate, Latency: f.Latency, DuplicateRate: f.DuplicateRate, ReorderRate: f.ReorderRate, CrashAfter: f.CrashAfter},
	}, nil
}

// transport returns the shop's transport on the broker --broker-url names.
func (f shopFlags) transport() (shop.Transport, error) {
	u := f.BrokerURL
	switch {
	case strings.HasPrefix(u, "nats://"), strings.HasPrefix(u, "tls://"):
		return &shop.NATSTransport{URL: u, Stream: f.Stream, SubjectPrefix: f.SubjectPrefix, Partitions: f.Partitions}, nil
	case strings.HasPrefix(u, "kafka://"):
		cfg, err := kafka.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("--broker-url: %v", oneLine(err))
		}
		if cfg.TopicPrefix == "" {
			cfg.TopicPrefix = f.SubjectPrefix
		}
		return &shop.KafkaTransport{Brokers: cfg.Brokers, TopicPrefix: cfg.TopicPrefix, Partitions: f.Partitions}, nil
	case strings.HasPrefix(u, "amqp://"), strings.HasPrefix(u, "amqps://"):
		cfg, err := courieramqp.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("--broker-url: %v", oneLine(err))
		}
		if cfg.RoutingKeyPrefix == "" {
			cfg.RoutingKeyPrefix = f.SubjectPrefix
		}
		return &shop.AMQPTransport{Config: cfg, QueuePrefix: f.SubjectPrefix, Partitions: f.Partitions}, nil
	}
	return nil, fmt.Errorf("--broker-url %q: use nats://host:4222, kafka://host:9092 or amqp://user:password@host:5672/ (webhooks need the four services in one process: courier demo --broker webhook)", dburl.Redact(u))
}

type shopOrdersCmd struct {
	shopFlags
	HTTPAddr      string        `name:"http-addr" help:"Where the HTTP API listens." default:"127.0.0.1:8080" env:"COURIER_SHOP_HTTP_ADDR"`
	StepTimeout   time.Duration `help:"How long each saga step waits for its reply before it is compensated." default:"30s" env:"COURIER_SHOP_STEP_TIMEOUT"`
	ChargeVersion int           `help:"Version of ChargeRequested written: 2, or 1 as the shop did before version 2 (deploy payment with 2 too, before or after)." default:"2" env:"COURIER_SHOP_CHARGE_VERSION"`
}

func (c *shopOrdersCmd) Run(e *env) error {
	cfg, err := c.config(shop.Orders, e)
	if err != nil {
		return err
	}
	cfg.ChargeVersion = c.ChargeVersion
	svc, err := shop.NewOrders(shop.OrdersConfig{Config: cfg, HTTPAddr: c.HTTPAddr, Timeouts: shop.Timeouts{Step: c.StepTimeout}})
	if err != nil {
		return err
	}
	return runService(e, svc)
}

type shopPaymentCmd struct {
	shopFlags
	DeclineRate      float64       `help:"Probability that a charge is declined." env:"COURIER_SHOP_DECLINE_RATE"`
	ChargeVersion    int           `help:"Newest version of ChargeRequested handled: 2 (version 1 is upcast to it), or 1 as the shop did before version 2, which leaves version 2 requests waiting." default:"2" env:"COURIER_SHOP_CHARGE_VERSION"`
	NewerVersionWait time.Duration `help:"How long a request of a version newer than --charge-version is retried, uncounted, before it is parked for a replay after the deploy (0: Courier's 15 minutes)." env:"COURIER_SHOP_NEWER_VERSION_WAIT"`
}

func (c *shopPaymentCmd) Run(e *env) error {
	cfg, err := c.config(shop.Payment, e)
	if err != nil {
		return err
	}
	cfg.Faults.DeclineRate, cfg.ChargeVersion, cfg.NewerVersionWait = c.DeclineRate, c.ChargeVersion, c.NewerVersionWait
	svc, err := shop.NewPayment(cfg)
	if err != nil {
		return err
	}
	return runService(e, svc)
}

type shopInventoryCmd struct {
	shopFlags
	Stock map[string]int `help:"Initial stock per SKU, sku=qty,… (stored for SKUs the database does not know yet)." default:"mug=1000,tee=1000,cap=1000,poster=1000,vinyl=100" mapsep:"," env:"COURIER_SHOP_STOCK"`
}

func (c *shopInventoryCmd) Run(e *env) error {
	cfg, err := c.config(shop.Inventory, e)
	if err != nil {
		return err
	}
	svc, err := shop.NewInventory(shop.InventoryConfig{Config: cfg, Stock: c.Stock})
	if err != nil {
		return err
	}
	return runService(e, svc)
}

type shopShippingCmd struct {
	shopFlags
	ShipmentFailureRate float64 `help:"Probability that a shipment cannot be prepared." env:"COURIER_SHOP_SHIPMENT_FAILURE_RATE"`
}

func (c *shopShippingCmd) Run(e *env) error {
	cfg, err := c.config(shop.Shipping, e)
	if err != nil {
		return err
	}
	cfg.Faults.ShipmentFailureRate = c.ShipmentFailureRate
	svc, err := shop.NewShipping(cfg)
	if err != nil {
		return err
	}
	return runService(e, svc)
}

// crashExit is the exit status of a service that crashed on purpose
// (--crash-after).
const crashExit = 3

// runService runs svc until SIGINT or SIGTERM (then it drains and returns).
// A crash (--crash-after) exits the process at once, skipping every
// deferred clean-up, as a killed process would.
func runService(e *env, svc shop.Service) error {
	err := svc.Run(e.ctx)
	if errors.Is(err, shop.ErrCrashed) {
		e.log.Error("crashing on purpose (--crash-after); restart me", "service", svc.Name(), "exit_status", crashExit)
		os.Exit(crashExit)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", svc.Name(), err)
	}
	return nil
}
