package brokerurl

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/brokerkind"
	"github.com/courier-go/courier/internal/redact"
)

// Forms lists the broker URLs Parse accepts, for error messages: the Form
// of each registered brokerkind.Kind.
func Forms() string { return brokerkind.Forms() }

// DefaultWebhookSecretEnv is the environment variable webhook secrets are
// read from when Options names none.
const DefaultWebhookSecretEnv = brokerkind.DefaultWebhookSecretEnv

// Options says how to read and open a URL (see brokerkind.Options): each
// broker reads the fields that concern it. The zero value opens the URL
// with each broker's defaults, creating the stream or exchange.
type Options = brokerkind.Options

// URL is a parsed broker URL.
type URL struct {
	// Kind is the Name of the broker's brokerkind.Kind: "nats", "kafka",
	// "amqp", "webhook"...
	Kind string
	// Raw is the URL as given.
	Raw string
	// Where is the URL without its password: what messages and logs may
	// show.
	Where string
	// Config is the broker's configuration, as its Kind's Parse read it
	// from the URL (and the Options): a couriernats.URLConfig, a
	// kafka.Config, an amqp.Config, a webhook.PublisherConfig...
	Config any

	kind *brokerkind.Kind
}

// Parse reads raw. It fails, with a message that names Options.Flag and
// the forms it accepts, for an empty string, a scheme it does not know, or
// a URL of a known scheme that its broker would not open (such as a
// webhook URL without secrets), and for a password or token holding an
// unencoded /, ? or # (which the URL parser would take for the end of the
// host: the message says to percent-encode it); the message never holds
// the password.
func Parse(raw string, opts Options) (URL, error) {
	u := URL{Raw: raw, Where: Redact(raw)}
	scheme, _, ok := strings.Cut(raw, "://")
	switch {
	case raw == "":
		return URL{}, fmt.Errorf("%s is empty: use %s", opts.FlagName(), Forms())
	case !ok || scheme == "":
		return URL{}, fmt.Errorf("%s %q is not a broker URL: use %s", opts.FlagName(), u.Where, Forms())
	}
	if err := redact.CheckUserinfo(raw, "/?#"); err != nil {
		return URL{}, fmt.Errorf("%s %q: %w", opts.FlagName(), u.Where, err)
	}
	k, ok := brokerkind.ForScheme(scheme)
	if !ok {
		return URL{}, fmt.Errorf("%s %q is not a broker URL Courier knows: use %s", opts.FlagName(), u.Where, Forms())
	}
	cfg, err := k.Parse(raw, opts)
	if err != nil {
		return URL{}, err
	}
	u.Kind, u.Config, u.kind = k.Name, cfg, k
	return u, nil
}

// Broker is an open broker: a broker.Publisher for the relay, closed with
// Close.
type Broker struct {
	broker.Publisher

	url    URL
	opts   Options
	opened *brokerkind.Opened

	mu      sync.Mutex
	readers []*reader // made by Reader and not closed yet
	closed  bool
}

// Open parses raw (see Parse), connects to the broker and creates what it
// needs (see the package documentation), and returns its Publisher.
func Open(ctx context.Context, raw string, opts Options) (*Broker, error) {
	u, err := Parse(raw, opts)
	if err != nil {
		return nil, err
	}
	opened, err := u.kind.Open(ctx, raw, u.Config, opts)
	if err != nil {
		return nil, err
	}
	return &Broker{Publisher: opened.Publisher, url: u, opts: opts, opened: opened}, nil
}

// KeepsKeyOrder implements broker.OrderKeeper for the publisher it wraps,
// so that a relay pipelines a key's messages where that broker allows it
// (Kafka).
func (b *Broker) KeepsKeyOrder() bool { return broker.KeepsKeyOrder(b.Publisher) }

// Kind returns the Name of the broker's kind: "nats", "kafka", "amqp",
// "webhook"...
func (b *Broker) Kind() string { return b.url.Kind }

// MessagingSystem returns the broker's messaging.system for traces:
// "nats", "kafka", "rabbitmq", "webhook"...
func (b *Broker) MessagingSystem() string {
	if b.url.kind == nil {
		return "courier"
	}
	return b.url.kind.SystemName()
}

// String returns the broker's URL without its password.
func (b *Broker) String() string { return b.url.Where }

// Config returns the broker's configuration, as URL.Config.
func (b *Broker) Config() any { return b.url.Config }

// LogFields returns the key-value pairs that say where the broker
// publishes, beside its URL: the stream and subject prefix on NATS, the
// topic prefix on Kafka, the exchange on RabbitMQ...
func (b *Broker) LogFields() []any {
	if b.url.kind == nil || b.url.kind.LogFields == nil {
		return nil
	}
	return b.url.kind.LogFields(b.url.Config, b.opts)
}

// HealthCheck returns a check that fails while the broker's connection is
// down (NATS), or nil for a broker without one.
func (b *Broker) HealthCheck() func(context.Context) error {
	if b.opened == nil {
		return nil
	}
	return b.opened.Check
}

// Close closes the publisher, the Readers made by Reader, and the
// connections.
func (b *Broker) Close() error {
	b.closeReaders()
	if b.opened == nil || b.opened.Close == nil {
		return nil
	}
	return b.opened.Close()
}

// Redact returns raw with what may be secret in each of its URLs (several
// comma-separated NATS URLs included) replaced by xxxxx, whether or not
// the URL parses: passwords, NATS tokens (nats://TOKEN@host), secret
// parameters and, for a webhook endpoint, every query value and each path
// segment that looks like a token. It applies Courier's one redaction
// rule, which dburl.Redact, the CLI and the dashboard apply too;
// docs/operations.md ("Secrets in URLs") states it.
func Redact(raw string) string { return redact.URL(raw) }
