package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/courier-go/courier/broker/brokerkind"
)

// errKeepsNothing is why nothing is read back from a webhook endpoint.
var errKeepsNothing = errors.New("a webhook endpoint keeps nothing Courier can read back: the audit reads NATS JetStream streams and Kafka topics")

// Kind describes webhooks to package brokerurl and the courier CLI: URLs
// https://endpoint/path (or http://), to which every topic is posted,
// signed with the secrets of Options.WebhookSecrets or of the environment
// variable Options.WebhookSecretEnv (never of the URL). An endpoint keeps
// nothing to read back. It reads the Options WebhookSecrets,
// WebhookSecretEnv and ReadBack (a URL read back needs no secret). Its
// configuration is a PublisherConfig.
var Kind = brokerkind.Kind{
	Name:       "webhook",
	Schemes:    []string{"https", "http"},
	Form:       "https://endpoint (or http://)",
	Parse:      parseKindURL,
	Open:       openKind,
	NoReadBack: errKeepsNothing,
	LogFields:  func(_ any, opts brokerkind.Options) []any { return []any{"secrets_from", opts.SecretEnv()} },
}

func init() { brokerkind.Register(Kind) }

// parseKindURL checks raw and takes the secrets from the options or the
// environment.
func parseKindURL(raw string, opts brokerkind.Options) (any, error) {
	where := brokerkind.Redact(raw)
	p, err := url.Parse(raw)
	if err != nil || p.Host == "" {
		return nil, fmt.Errorf("%s %q is not a webhook endpoint URL: use https://host/path", opts.FlagName(), where)
	}
	for name := range p.Query() {
		if n := strings.ToLower(name); strings.Contains(n, "secret") || strings.Contains(n, "whsec") {
			return nil, fmt.Errorf("%s: webhook secrets never go in the URL (query parameter %q): set them in %s, comma-separated", opts.FlagName(), name, opts.SecretEnv())
		}
	}
	secrets := opts.WebhookSecrets
	if len(secrets) == 0 {
		secrets = SplitSecrets(os.Getenv(opts.SecretEnv()))
	}
	if len(secrets) == 0 && !opts.ReadBack {
		return nil, fmt.Errorf("%s %s is a webhook endpoint and no secret signs its requests: set %s to whsec_… secrets, comma-separated (the first signs; all are sent during a rotation)",
			opts.FlagName(), where, opts.SecretEnv())
	}
	return PublisherConfig{DefaultEndpoint: raw, Secrets: secrets}, nil
}

// openKind makes the Publisher; the endpoint is first reached by the
// first message.
func openKind(_ context.Context, raw string, config any, opts brokerkind.Options) (*brokerkind.Opened, error) {
	// Parse made sure there are secrets; NewPublisher checks their form.
	pub, err := NewPublisher(config.(PublisherConfig))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v (secrets from %s)", opts.FlagName(), brokerkind.Redact(raw), brokerkind.Redacted(err, raw), opts.SecretEnv())
	}
	return &brokerkind.Opened{Publisher: pub}, nil
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
