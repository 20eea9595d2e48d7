package shop

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/courier-go/courier/inbox"
)

// Defaults of [Config].
const (
	DefaultStream        = "SHOP"
	DefaultSubjectPrefix = "shop."
	DefaultBrokerURL     = "nats://127.0.0.1:4222"
	DefaultDrain         = 5 * time.Second
)

// Config is what every service needs: its own database, the broker, the
// faults to inject and a logger. Zero fields take the defaults given.
type Config struct {
	// DatabaseURL is the service's own database: a SQLite file (a path,
	// sqlite:PATH, sqlite:///ABSOLUTE or file:PATH), postgres://… (add
	// search_path=SCHEMA to give the service a schema of its own, created if
	// missing) or mysql://user:password@host:3306/database. Required.
	DatabaseURL string
	// Transport carries the service's messages (see [Transport]). Default:
	// a [NATSTransport] on BrokerURL, Stream and SubjectPrefix, which are
	// ignored when Transport is set.
	Transport Transport
	// BrokerURL is the NATS server with JetStream. Default
	// nats://127.0.0.1:4222.
	BrokerURL string
	// Stream is the JetStream stream every service publishes into; it is
	// created when missing. Default "SHOP".
	Stream string
	// SubjectPrefix turns a topic into a subject: "shop.payment". Default
	// "shop.".
	SubjectPrefix string
	// Faults are injected into the service's message handling; change them
	// while it runs with the service's SetFaults.
	Faults Faults
	// Drain bounds how long the relay and the inbox consumer may finish the
	// work in flight once Run's context ends. Default 5s. A tiny value makes
	// every stop a crash: the in-process shop (Start) uses a millisecond.
	Drain time.Duration
	// MetricsAddr, when set, is where the service serves /metrics
	// (Prometheus: its relay, its inbox consumer, its outbox per topic, its
	// sagas and idempotency keys), /healthz and /readyz, such as
	// 127.0.0.1:9465: instance 0's (Run's); the other instances of a
	// service in the same process serve none. Default: not served.
	MetricsAddr string
	// LatencyEvery is how often the service's consumer records its
	// latencies, commit to applied per topic, in its database
	// (latency.Recorder, table courier_latency), where `courier status`
	// and the dashboard read them. 0: not recorded. `courier shop`
	// records every 10s by default.
	LatencyEvery time.Duration
	// ChargeVersion is the newest version of ChargeRequested the service
	// is built with, for the orders service and payment: orders writes it,
	// payment handles it and turns older versions into it; payment meets a
	// newer one as a consumer deployed after its producer does
	// (courier.ErrNewerVersion). 1 is the shop as it was before version 2;
	// the other services ignore it. Default ChargeVersion, the newest.
	ChargeVersion int
	// NewerVersionWait is how long the inbox consumer retries a message of
	// a version newer than the service knows before it parks it
	// (inbox.ConsumerConfig.NewerVersionWait): as long as the service's
	// deploy may take. Default: Courier's, 15 minutes.
	NewerVersionWait time.Duration
	// HoldKeys names the topics whose keys the service's consumer holds
	// (inbox.ConsumerConfig.HoldKeys): the consumer then keeps each key's
	// order. Default: none.
	HoldKeys []string
	// Group is how the service's consumer groups deliveries into one
	// transaction (inbox.ConsumerConfig.Group). Default: off, each
	// delivery in a transaction of its own.
	Group inbox.GroupConfig
	// Logger receives the service's logs. Default: discard.
	Logger *slog.Logger
}

func (c *Config) setDefaults(service string) error {
	if c.DatabaseURL == "" {
		return fmt.Errorf("shop %s: Config.DatabaseURL is empty: give the service a database of its own, e.g. sqlite:%s.db", service, service)
	}
	if c.Transport == nil {
		t, err := natsTransport(c.BrokerURL, c.Stream, c.SubjectPrefix)
		if err != nil {
			return fmt.Errorf("shop %s: %w", service, err)
		}
		c.Transport = t
	}
	if c.Drain <= 0 {
		c.Drain = DefaultDrain
	}
	if c.LatencyEvery < 0 {
		return fmt.Errorf("shop %s: Config.LatencyEvery is %s: use 0 (not recorded) or more, such as 10s", service, c.LatencyEvery)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Logger = c.Logger.With("service", service)
	if c.ChargeVersion == 0 {
		c.ChargeVersion = ChargeVersion
	}
	if err := checkChargeVersion(c.ChargeVersion); err != nil {
		return fmt.Errorf("shop %s: Config.ChargeVersion: %w", service, err)
	}
	return c.Faults.validate()
}

// checkChargeVersion checks that v is a version of ChargeRequested the shop
// has code for.
func checkChargeVersion(v int) error {
	if v < 1 || v > ChargeVersion {
		return fmt.Errorf("ChargeRequested has no version %d: use 1 (before version 2) to %d", v, ChargeVersion)
	}
	return nil
}

// natsTransport returns the default transport: NATS at url (default
// DefaultBrokerURL).
func natsTransport(url, stream, prefix string) (*NATSTransport, error) {
	if url == "" {
		url = DefaultBrokerURL
	}
	if !strings.HasPrefix(url, "nats://") && !strings.HasPrefix(url, "tls://") {
		return nil, fmt.Errorf("broker URL %q is not a NATS URL: use nats://host:4222, or set Transport for another broker", url)
	}
	t := &NATSTransport{URL: url, Stream: stream, SubjectPrefix: prefix}
	t.defaults()
	return t, nil
}

// Faults are the failures a service injects into its own work. Rates are
// probabilities from 0 to 1. The zero value injects nothing.
type Faults struct {
	// FailureRate is the probability that a message handler fails after
	// doing its work: the transaction rolls back (effects, replies and inbox
	// marker alike) and the inbox retries the delivery later. Transient
	// errors, in short.
	FailureRate float64
	// Latency is added to every message handler, between half and one and a
	// half times this, inside its transaction.
	Latency time.Duration
	// DuplicateRate and ReorderRate make the service's subscription deliver
	// some messages twice and some out of order (see [Chaos]).
	DuplicateRate float64
	ReorderRate   float64
	// DeclineRate is the probability that payment declines a charge.
	// Payment only.
	DeclineRate float64
	// ShipmentFailureRate is the probability that shipping cannot prepare a
	// shipment. Shipping only.
	ShipmentFailureRate float64
	// CrashAfter, if set, crashes the service this long after Run started:
	// its contexts are cancelled, nothing is drained, and Run returns
	// ErrCrashed. The in-process shop restarts it on the same database; a
	// process (courier shop) exits, for its supervisor to restart it.
	CrashAfter time.Duration
}

func (f Faults) validate() error {
	for _, r := range []struct {
		name string
		v    float64
	}{{"FailureRate", f.FailureRate}, {"DuplicateRate", f.DuplicateRate}, {"ReorderRate", f.ReorderRate},
		{"DeclineRate", f.DeclineRate}, {"ShipmentFailureRate", f.ShipmentFailureRate}} {
		if r.v < 0 || r.v > 1 {
			return fmt.Errorf("shop: Faults.%s is %g: use a probability from 0 to 1", r.name, r.v)
		}
	}
	if f.Latency < 0 || f.CrashAfter < 0 {
		return errors.New("shop: Faults.Latency and Faults.CrashAfter must not be negative")
	}
	return nil
}

// ErrCrashed is returned by a service's Run when Faults.CrashAfter made it
// crash.
var ErrCrashed = errors.New("shop: service crashed (Faults.CrashAfter); restart it on the same database")
