package brokerkind

import (
	"log/slog"
	"strings"

	"github.com/courier-go/courier/internal/redact"
)

// DefaultWebhookSecretEnv is the environment variable webhook secrets are
// read from when Options names none.
const DefaultWebhookSecretEnv = "COURIER_WEBHOOK_SECRET"

// Options says how to read and open a broker URL. Each broker reads the
// fields that concern it (see its Kind). The zero value opens the URL with
// each broker's defaults, creating the stream or exchange.
type Options struct {
	// Flag is how error messages name the URL, such as "--broker-url".
	// Default: "broker URL".
	Flag string
	// Env is the environment variable that also sets the URL, named in
	// the message of a broker that cannot be reached. Default: none.
	Env string
	// Logger logs connection losses and recoveries (NATS). Default: none.
	Logger *slog.Logger

	// SubjectPrefix, NoPrefix and KeySubjects map topics to subjects on
	// NATS (see the Config of broker/nats). Default: subjects "courier."
	// + topic.
	SubjectPrefix string
	NoPrefix      bool
	KeySubjects   bool
	// Stream is the JetStream stream Open creates on NATS when it is
	// missing, and the one read back. Default "COURIER".
	Stream string
	// StreamReplicas is how many servers of a NATS cluster hold the stream
	// Open creates: 3 (or 5) on a cluster. Default 1.
	StreamReplicas int
	// NoCreate opens the broker without creating anything: no stream on
	// NATS, no exchange on RabbitMQ (they are managed elsewhere).
	NoCreate bool
	// ReadBack parses the URL to read back what the broker keeps, not to
	// publish: a webhook URL then needs no secret.
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

// FlagName returns Flag, or "broker URL" when it is empty.
func (o Options) FlagName() string {
	if o.Flag == "" {
		return "broker URL"
	}
	return o.Flag
}

// Source names where the URL is set, for messages that ask to check it:
// the flag, and the environment variable in brackets when there is one.
func (o Options) Source() string {
	if o.Env == "" {
		return o.FlagName()
	}
	return o.FlagName() + " (" + o.Env + ")"
}

// SecretEnv returns WebhookSecretEnv, or DefaultWebhookSecretEnv when it
// is empty.
func (o Options) SecretEnv() string {
	if o.WebhookSecretEnv == "" {
		return DefaultWebhookSecretEnv
	}
	return o.WebhookSecretEnv
}

// Redact returns raw with its password, tokens and secret parameters
// replaced by xxxxx: what messages and logs may show of a URL. It applies
// Courier's one redaction rule (docs/operations.md, "Secrets in URLs").
func Redact(raw string) string { return redact.URL(raw) }

// Redacted returns err's message with what Redact hides of raw hidden
// wherever it occurs (a client's error may quote the URL, or the password
// it decoded).
func Redacted(err error, raw string) string { return redact.In(err.Error(), raw) }

// ErrorText returns Redacted(err, raw) on one line.
func ErrorText(err error, raw string) string {
	return strings.Join(strings.Fields(Redacted(err, raw)), " ")
}
