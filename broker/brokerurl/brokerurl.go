package brokerurl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/amqp"
	"github.com/courier-go/courier/broker/kafka"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/broker/webhook"
	"github.com/courier-go/courier/internal/redact"
)

// Forms lists the broker URLs Parse accepts, for error messages.
const Forms = "kafka://host1:9092,host2:9092, amqp://user:password@host:5672/vhost, https://endpoint (or http://), nats://host:4222 (or tls://)"

// PingTimeout bounds the check Open makes that a Kafka cluster answers.
const PingTimeout = 10 * time.Second

// DefaultWebhookSecretEnv is the environment variable webhook secrets are
// read from when Options names none.
const DefaultWebhookSecretEnv = "COURIER_WEBHOOK_SECRET"

// Kinds of broker a URL names (URL.Kind, Broker.Kind).
const (
	Kafka   = "kafka"
	AMQP    = "amqp"
	Webhook = "webhook"
	NATS    = "nats"
)

// Options says how to read and open a URL. The zero value opens the URL
// with each broker's defaults, creating the stream or exchange.
type Options struct {
	// Flag is how error messages name the URL, such as "--broker-url".
	// Default: "broker URL".
	Flag string
	// Env is the environment variable that also sets the URL, named in
	// the message of a broker that cannot be reached. Default: none.
	Env string
	// Logger logs connection losses and recoveries (NATS). Default: none.
	Logger *slog.Logger

	// NATS is how topics map to subjects on NATS. Default: subjects
	// "courier." + topic.
	NATS couriernats.Config
	// Stream is the JetStream stream Open creates on NATS when it is
	// missing. Default couriernats.DefaultStream ("COURIER").
	Stream string
	// StreamReplicas is how many servers of a NATS cluster hold the stream
	// Open creates: 3 (or 5) on a cluster. Default 1.
	StreamReplicas int
	// NoCreate opens the broker without creating anything: no stream on
	// NATS, no exchange on RabbitMQ (they are managed elsewhere).
	NoCreate bool
	// ReadBack parses the URL to read back what the broker keeps
	// (URL.CanReadBack, Broker.Reader), not to publish: a webhook URL then
	// needs no secret, and CanReadBack says why it cannot be read.
	ReadBack bool

	// Channels is how many AMQP channels publish at once; set it to the
	// relay's concurrency. Default 2.
	Channels int

	// WebhookSecrets sign webhook requests ("whsec_" + base64 key each).
	// Default: read from the environment variable WebhookSecretEnv.
	WebhookSecrets []string
	// WebhookSecretEnv is the environment variable holding the webhook
	// secrets, comma-separated. Default DefaultWebhookSecretEnv.
	WebhookSecretEnv string
}

func (o Options) flag() string {
	if o.Flag == "" {
		return "broker URL"
	}
	return o.Flag
}

// check names where the URL is set, for messages that ask to check it.
func (o Options) check() string {
	if o.Env == "" {
		return o.flag()
	}
	return o.flag() + " (" + o.Env + ")"
}

func (o Options) secretEnv() string {
	if o.WebhookSecretEnv == "" {
		return DefaultWebhookSecretEnv
	}
	return o.WebhookSecretEnv
}

func (o Options) stream() string {
	if o.Stream == "" {
		return couriernats.DefaultStream
	}
	return o.Stream
}

// URL is a parsed broker URL.
type URL struct {
	// Kind is Kafka, AMQP, Webhook or NATS.
	Kind string
	// Raw is the URL as given.
	Raw string
	// Where is the URL without its password: what messages and logs may
	// show.
	Where string
	// Kafka is the configuration of a Kafka URL.
	Kafka kafka.Config
	// AMQP is the RabbitMQ configuration of an AMQP URL.
	AMQP amqp.Config
	// NATS is the publisher's configuration of a NATS URL (its query:
	// see couriernats.ParseURL), and NATSServers the URL without it.
	NATS        couriernats.PublisherConfig
	NATSServers string
	// WebhookSecrets are the secrets that sign a webhook URL's requests
	// (Options.WebhookSecrets, or those of the environment variable).
	WebhookSecrets []string
}

// Parse reads raw. It fails, with a message that names Options.Flag and
// the forms it accepts, for an empty string, a scheme it does not know, or
// a URL of a known scheme that its broker would not open, for a password
// or token holding an unencoded /, ? or # (which the URL parser would take
// for the end of the host: the message says to percent-encode it), and for
// a webhook URL without secrets; the message never holds the password.
func Parse(raw string, opts Options) (URL, error) {
	u := URL{Raw: raw, Where: Redact(raw)}
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok && raw != "" {
		return URL{}, fmt.Errorf("%s %q is not a broker URL: use %s", opts.flag(), u.Where, Forms)
	}
	if err := redact.CheckUserinfo(raw, "/?#"); err != nil {
		return URL{}, fmt.Errorf("%s %q: %w", opts.flag(), u.Where, err)
	}
	switch strings.ToLower(scheme) {
	case "":
		if raw == "" {
			return URL{}, fmt.Errorf("%s is empty: use %s", opts.flag(), Forms)
		}
		return URL{}, fmt.Errorf("%s %q is not a broker URL: use %s", opts.flag(), u.Where, Forms)
	case "nats", "tls":
		u.Kind = NATS
		servers, cfg, err := couriernats.ParseURL(raw)
		if err != nil {
			return URL{}, fmt.Errorf("%s %q is not a NATS URL (%s): use nats://host:4222, several comma-separated, and optionally ?%s",
				opts.flag(), u.Where, strings.TrimPrefix(redactIn(err.Error(), raw), "nats: "), strings.ReplaceAll(couriernats.URLParams, ", ", "=…&"))
		}
		u.NATS, u.NATSServers = cfg, servers
		for _, s := range strings.Split(servers, ",") {
			if p, err := url.Parse(strings.TrimSpace(s)); err != nil || p.Host == "" {
				return URL{}, fmt.Errorf("%s %q is not a NATS URL: use nats://host:4222, several comma-separated", opts.flag(), u.Where)
			}
		}
	case "kafka":
		cfg, err := kafka.ParseURL(raw)
		if err != nil {
			return URL{}, fmt.Errorf("%s %q is not a Kafka URL (%s): use kafka://host1:9092,host2:9092?topic_prefix=", opts.flag(), u.Where,
				strings.TrimPrefix(redactIn(err.Error(), raw), "kafka: "))
		}
		u.Kind, u.Kafka = Kafka, cfg
	case "amqp", "amqps":
		cfg, err := amqp.ParseURL(raw)
		if err != nil {
			return URL{}, fmt.Errorf("%s %q is not a RabbitMQ URL (%s): use amqp://user:password@host:5672/vhost?exchange=courier&prefix=", opts.flag(), u.Where, redactIn(err.Error(), raw))
		}
		u.Kind, u.AMQP = AMQP, cfg
	case "http", "https":
		p, err := url.Parse(raw)
		if err != nil || p.Host == "" {
			return URL{}, fmt.Errorf("%s %q is not a webhook endpoint URL: use https://host/path", opts.flag(), u.Where)
		}
		for name := range p.Query() {
			if n := strings.ToLower(name); strings.Contains(n, "secret") || strings.Contains(n, "whsec") {
				return URL{}, fmt.Errorf("%s: webhook secrets never go in the URL (query parameter %q): set them in %s, comma-separated", opts.flag(), name, opts.secretEnv())
			}
		}
		u.Kind = Webhook
		if u.WebhookSecrets = opts.WebhookSecrets; len(u.WebhookSecrets) == 0 {
			u.WebhookSecrets = SplitSecrets(os.Getenv(opts.secretEnv()))
		}
		if len(u.WebhookSecrets) == 0 && !opts.ReadBack {
			return URL{}, fmt.Errorf("%s %s is a webhook endpoint and no secret signs its requests: set %s to whsec_… secrets, comma-separated (the first signs; all are sent during a rotation)",
				opts.flag(), u.Where, opts.secretEnv())
		}
	default:
		return URL{}, fmt.Errorf("%s %q is not a broker URL Courier knows: use %s", opts.flag(), u.Where, Forms)
	}
	return u, nil
}

// Broker is an open broker: a broker.Publisher for the relay, closed with
// Close.
type Broker struct {
	broker.Publisher

	kind  string
	where string
	url   URL
	opts  Options
	nc    *natsgo.Conn
	close func() error

	mu      sync.Mutex
	readers []*reader // made by Reader and not closed yet
	closed  bool
}

// KeepsKeyOrder implements broker.OrderKeeper for the publisher it wraps,
// so that a relay pipelines a key's messages where that broker allows it
// (Kafka).
func (b *Broker) KeepsKeyOrder() bool { return broker.KeepsKeyOrder(b.Publisher) }

// Kind returns Kafka, AMQP, Webhook or NATS.
func (b *Broker) Kind() string { return b.kind }

// String returns the broker's URL without its password.
func (b *Broker) String() string { return b.where }

// NATS returns the connection of a NATS broker, nil for other brokers.
func (b *Broker) NATS() *natsgo.Conn { return b.nc }

// Kafka returns the configuration of a Kafka broker (zero for others).
func (b *Broker) Kafka() kafka.Config { return b.url.Kafka }

// AMQP returns the configuration of a RabbitMQ broker (zero for others);
// its URL holds the password.
func (b *Broker) AMQP() amqp.Config { return b.url.AMQP }

// Close closes the publisher, the Readers made by Reader, and the
// connections.
func (b *Broker) Close() error {
	b.closeReaders()
	if b.close == nil {
		return nil
	}
	return b.close()
}

// Open parses raw (see Parse), connects to the broker and creates what it
// needs (see the package documentation), and returns its Publisher.
func Open(ctx context.Context, raw string, opts Options) (*Broker, error) {
	u, err := Parse(raw, opts)
	if err != nil {
		return nil, err
	}
	b := &Broker{kind: u.Kind, where: u.Where, url: u, opts: opts}
	switch u.Kind {
	case NATS:
		err = openNATS(ctx, b, u, opts)
	case Kafka:
		err = openKafka(ctx, b, u, opts)
	case AMQP:
		err = openAMQP(ctx, b, u, opts)
	case Webhook:
		err = openWebhook(b, u, opts)
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

func openNATS(ctx context.Context, b *Broker, u URL, opts Options) error {
	var nopts []natsgo.Option
	if log := opts.Logger; log != nil {
		nopts = append(nopts,
			natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
				if err != nil {
					log.Warn("broker disconnected", "error", err)
				}
			}),
			natsgo.ReconnectHandler(func(*natsgo.Conn) { log.Info("broker reconnected") }))
	}
	nc, err := couriernats.Connect(u.NATSServers, nopts...)
	if err != nil {
		return fmt.Errorf("cannot reach NATS at %s: %v; check %s and that nats-server runs with JetStream (-js)",
			u.Where, oneLine(redactIn(err.Error(), u.Raw)), opts.check())
	}
	if !opts.NoCreate {
		if err := couriernats.EnsureStream(ctx, nc, opts.NATS, couriernats.StreamConfig{Name: opts.stream(), Replicas: opts.StreamReplicas}); err != nil {
			serr := streamError(ctx, nc, opts, err)
			nc.Close()
			return serr
		}
	}
	cfg := u.NATS
	cfg.Config = opts.NATS
	pub, err := couriernats.NewPublisher(nc, cfg)
	if err != nil {
		nc.Close()
		return err
	}
	b.Publisher, b.nc = pub, nc
	b.close = func() error { nc.Close(); return nil }
	return nil
}

// StreamError is returned by Open when the NATS stream cannot be created.
type StreamError struct {
	// Stream is the stream's name and Subjects the subjects it would
	// capture.
	Stream, Subjects string
	// Overlap holds the streams whose subjects overlap Subjects, when that
	// is why (JetStream error 10065); it is empty when they could not be
	// listed.
	Overlap []string
	// Err is JetStream's error.
	Err error
}

func (e *StreamError) Error() string {
	if e.Overlap != nil {
		return fmt.Sprintf("cannot create stream %s: its subjects %s overlap those of stream %s; publish into that stream, or use subjects of your own",
			e.Stream, e.Subjects, strings.Join(e.Overlap, ", "))
	}
	return e.Err.Error()
}

func (e *StreamError) Unwrap() error { return e.Err }

// subjectOverlap is JetStream's error code for a stream whose subjects
// overlap another stream's.
const subjectOverlap jetstream.ErrorCode = 10065

// streamError wraps EnsureStream's err in a *StreamError, listing the
// streams that capture the subjects when that is why.
func streamError(ctx context.Context, nc *natsgo.Conn, opts Options, err error) error {
	e := &StreamError{Stream: opts.stream(), Subjects: opts.NATS.Subjects(), Err: err}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == subjectOverlap {
		e.Overlap = []string{}
		if js, jerr := jetstream.New(nc); jerr == nil {
			names := js.StreamNames(ctx, jetstream.WithStreamListSubject(e.Subjects))
			for n := range names.Name() {
				e.Overlap = append(e.Overlap, n)
			}
		}
	}
	return e
}

func openKafka(ctx context.Context, b *Broker, u URL, opts Options) error {
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Config: u.Kafka})
	if err != nil {
		return fmt.Errorf("%s %s: %v", opts.flag(), u.Where, redactIn(err.Error(), u.Raw))
	}
	pctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	if err := pub.Client().Ping(pctx); err != nil {
		pub.Close()
		return fmt.Errorf("cannot reach Kafka at %s: %v; check %s and that the brokers listen there", u.Where, oneLine(redactIn(err.Error(), u.Raw)), opts.check())
	}
	b.Publisher = pub
	b.close = func() error { pub.Close(); return nil }
	return nil
}

func openAMQP(ctx context.Context, b *Broker, u URL, opts Options) error {
	if !opts.NoCreate {
		if err := amqp.EnsureTopology(ctx, u.AMQP, amqp.Topology{}); err != nil {
			return fmt.Errorf("cannot declare exchange %s on RabbitMQ at %s: %v; check %s",
				u.AMQP.Exchange, u.Where, oneLine(redactIn(err.Error(), u.Raw)), opts.check())
		}
	}
	pub, err := amqp.NewPublisher(amqp.PublisherConfig{Config: u.AMQP, Channels: opts.Channels})
	if err != nil {
		return fmt.Errorf("%s: %v", opts.flag(), redactIn(err.Error(), u.Raw))
	}
	if err := pub.Connect(); err != nil {
		_ = pub.Close()
		return fmt.Errorf("cannot reach RabbitMQ at %s: %v; check %s", u.Where, oneLine(redactIn(err.Error(), u.Raw)), opts.check())
	}
	b.Publisher = pub
	b.close = pub.Close
	return nil
}

func openWebhook(b *Broker, u URL, opts Options) error {
	// Parse made sure there are secrets; NewPublisher checks their form.
	pub, err := webhook.NewPublisher(webhook.PublisherConfig{DefaultEndpoint: u.Raw, Secrets: u.WebhookSecrets})
	if err != nil {
		return fmt.Errorf("%s %s: %v (secrets from %s)", opts.flag(), u.Where, redactIn(err.Error(), u.Raw), opts.secretEnv())
	}
	b.Publisher = pub
	return nil
}

// SplitSecrets splits a comma-separated list of secrets, dropping blanks.
func SplitSecrets(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// Redact returns raw with what may be secret in each of its URLs (several
// comma-separated NATS URLs included) replaced by xxxxx, whether or not
// the URL parses: passwords, NATS tokens (nats://TOKEN@host), secret
// parameters and, for a webhook endpoint, every query value and each path
// segment that looks like a token. It applies Courier's one redaction
// rule, which dburl.Redact, the CLI and the dashboard apply too;
// docs/operations.md ("Secrets in URLs") states it.
func Redact(raw string) string { return redact.URL(raw) }

// redactIn replaces what Redact hides of raw wherever it occurs in s (a
// client's error may quote the URL, or the password it decoded).
func redactIn(s, raw string) string { return redact.In(s, raw) }

// oneLine joins a multi-line error message into one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
