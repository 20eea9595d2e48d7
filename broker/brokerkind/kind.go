package brokerkind

import (
	"context"

	"github.com/courier-go/courier/broker"
)

// Kind describes one kind of broker to the code that opens brokers by URL.
type Kind struct {
	// Name names the kind, in lower case: "nats", "kafka". It is what
	// brokerurl's URL.Kind and Broker.Kind return. When it is also the
	// last element of the import path of the package that holds the
	// broker's publisher and subscriber (broker/nats), tracing names
	// them by this kind's System even when they are used without
	// brokerurl.
	Name string
	// System is the broker's messaging.system in traces (OpenTelemetry's
	// messaging conventions): "nats", "kafka", "rabbitmq", "webhook".
	// Default: Name.
	System string
	// Schemes are the URL schemes that name the broker, in lower case:
	// "nats", "tls". A kind without schemes is not opened by URL; it is
	// registered for its System alone.
	Schemes []string
	// Form shows how its URLs are written, for the messages that list the
	// URLs Courier knows: "nats://host:4222 (or tls://)".
	Form string
	// Parse reads raw, a URL of one of Schemes, and returns the broker's
	// configuration, which Open and LogFields are given. Its error is the
	// whole message users see: it names opts.FlagName() and the form to
	// use, and never holds the URL's password (show Redact(raw)).
	Parse func(raw string, opts Options) (config any, err error)
	// Open connects to the broker of raw, whose configuration config is
	// (what Parse returned), creates what it needs unless opts.NoCreate,
	// and returns it open. Its error too is the message users see, without
	// the password (see ErrorText); it names opts.Source() when the broker
	// cannot be reached.
	Open func(ctx context.Context, raw string, config any, opts Options) (*Opened, error)
	// NoReadBack says why what the broker keeps cannot be read back (see
	// broker.Reader), nil when Opened.Reader reads it.
	NoReadBack error
	// LogFields returns the key-value pairs the relay logs, beside the
	// broker's redacted URL, to say where it publishes: the stream, the
	// topic prefix... Default: none.
	LogFields func(config any, opts Options) []any
}

// SystemName returns k.System, or k.Name when it is empty.
func (k *Kind) SystemName() string {
	if k.System == "" {
		return k.Name
	}
	return k.System
}

// Opened is a broker its Kind opened.
type Opened struct {
	// Publisher publishes to the broker.
	Publisher broker.Publisher
	// Close closes the publisher and the connections. Default: nothing
	// to close.
	Close func() error
	// Check returns an error while the broker's connection is down, for a
	// health check. Default: no check.
	Check func(context.Context) error
	// Reader returns a Reader of what the broker keeps, of topics (all of
	// Courier's when empty, where the broker can tell them), and what
	// lets go of what the Reader opened of its own (nil: nothing). Nil
	// when the Kind's NoReadBack says why nothing can be read back.
	Reader func(ctx context.Context, topics []string) (r broker.Reader, release func(), err error)
}
