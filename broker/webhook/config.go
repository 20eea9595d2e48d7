package webhook

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/internal/redact"
	"github.com/courier-go/courier/internal/setting"
)

// The defaults of the zero fields of PublisherConfig, BreakerConfig,
// VerifierConfig and HandlerConfig.
const (
	DefaultTimeout         = 10 * time.Second
	DefaultConcurrency     = 16
	DefaultMaxRetryAfter   = 10 * time.Minute
	DefaultBreakerFailures = 5
	DefaultBreakerOpenFor  = 30 * time.Second
	DefaultTolerance       = 5 * time.Minute
	DefaultMaxBodyBytes    = 10 << 20
	DefaultWait            = 8 * time.Second
)

// PublisherConfig tunes a Publisher. Zero fields take the defaults given;
// negative ones are refused.
type PublisherConfig struct {
	// Endpoints maps topics to endpoint URLs (http:// or https://).
	Endpoints map[string]string
	// Endpoint, if set, returns the URL of a topic that Endpoints does not
	// list; "" means none.
	Endpoint func(topic string) string
	// DefaultEndpoint is the URL of the topics neither Endpoints nor
	// Endpoint name. A message whose topic has no endpoint fails with a
	// counted error that names the topic.
	DefaultEndpoint string
	// Secrets sign the requests to every endpoint without EndpointSecrets
	// of its own: "whsec_" + base64 key, or "whsk_" + an Ed25519 private
	// key (see the package documentation). Every one signs
	// (webhook-signature carries one signature per key), so a receiver
	// that knows any of them accepts the request. Required unless
	// EndpointSecrets covers every endpoint of Endpoints and
	// DefaultEndpoint.
	Secrets []string
	// EndpointSecrets gives endpoints keys of their own, by URL, written
	// exactly as in Endpoints, DefaultEndpoint or what Endpoint returns;
	// they replace Secrets for that endpoint. With a key per endpoint, a
	// request signed for one endpoint does not verify at another. A URL
	// that no topic uses (when Endpoint is nil) is refused as a typo.
	EndpointSecrets map[string][]string
	// Body is how a request carries the message. Default BodyEnvelope: a
	// signed JSON envelope. BodyRaw sends the payload alone as the body
	// and the rest in unsigned headers; see the package documentation
	// before choosing it.
	Body BodyMode
	// Timeout bounds each request, answer included. Default
	// DefaultTimeout (10s).
	Timeout time.Duration
	// Concurrency caps the requests in flight of one Publish call (keys
	// sent concurrently). Default DefaultConcurrency (16).
	Concurrency int
	// MaxRetryAfter caps how long a Retry-After answer holds an endpoint
	// back. Default DefaultMaxRetryAfter (10m).
	MaxRetryAfter time.Duration
	// Client sends the requests. Default: a client of its own, on a copy of
	// http.DefaultTransport keeping Concurrency idle connections per host. Its
	// CheckRedirect is replaced so that redirects are never followed, and
	// its Timeout is left alone (Timeout applies per request anyway).
	Client *http.Client
	// Breaker tunes the circuit breaker of each endpoint.
	Breaker BreakerConfig
	// CloudEvents, if set, sends each message as a CloudEvent: in the JSON
	// event format as the signed body (BodyEnvelope), or with the HTTP
	// binding's binary content mode attributes next to Courier's headers
	// (BodyRaw); see the package documentation. Its Source is required.
	// Default nil: off.
	CloudEvents *cloudevents.Config
}

// BreakerConfig tunes the circuit breaker each endpoint has.
type BreakerConfig struct {
	// Failures is how many consecutive failures of an endpoint open its
	// breaker: requests that got no answer, 429, 5xx. Answers that blame
	// the message (3xx, 4xx but 429) count as successes of the endpoint.
	// Default DefaultBreakerFailures (5).
	Failures uint32
	// OpenFor is how long an open breaker fails messages without a request
	// before it lets one probe through. Default DefaultBreakerOpenFor (30s).
	OpenFor time.Duration
	// Disabled turns the breakers off.
	Disabled bool
}

func (c *PublisherConfig) setDefaults() {
	setting.Default(&c.Timeout, DefaultTimeout)
	setting.Default(&c.Concurrency, DefaultConcurrency)
	setting.Default(&c.MaxRetryAfter, DefaultMaxRetryAfter)
	setting.Default(&c.Breaker.Failures, DefaultBreakerFailures)
	setting.Default(&c.Breaker.OpenFor, DefaultBreakerOpenFor)
}

// validate checks c and returns the keys of Secrets and of
// EndpointSecrets, by URL.
func (c *PublisherConfig) validate() ([]signingKey, map[string][]signingKey, error) {
	var keys []signingKey
	if len(c.Secrets) > 0 || len(c.EndpointSecrets) == 0 {
		var err error
		if keys, err = parseSigningKeys(c.Secrets); err != nil {
			return nil, nil, fmt.Errorf("%w (PublisherConfig.Secrets)", err)
		}
	}
	byURL, err := endpointKeys(*c, keys == nil)
	if err != nil {
		return nil, nil, err
	}
	if c.Body != BodyEnvelope && c.Body != BodyRaw {
		return nil, nil, fmt.Errorf("webhook: PublisherConfig.Body is %v: use BodyEnvelope (the default) or BodyRaw", c.Body)
	}
	err = setting.First(
		c.checkEndpoints(),
		setting.Positive("webhook: PublisherConfig.Timeout", c.Timeout, DefaultTimeout),
		setting.Positive("webhook: PublisherConfig.Concurrency", c.Concurrency, DefaultConcurrency),
		setting.Positive("webhook: PublisherConfig.MaxRetryAfter", c.MaxRetryAfter, DefaultMaxRetryAfter),
		setting.Positive("webhook: PublisherConfig.Breaker.OpenFor", c.Breaker.OpenFor, DefaultBreakerOpenFor),
	)
	if err == nil && c.CloudEvents != nil {
		err = c.CloudEvents.Check("webhook: PublisherConfig.CloudEvents")
	}
	if err != nil {
		return nil, nil, err
	}
	return keys, byURL, nil
}

// checkEndpoints checks that c names an endpoint and that the URLs it
// names are http:// or https:// URLs with a host.
func (c *PublisherConfig) checkEndpoints() error {
	if c.Endpoints == nil && c.Endpoint == nil && c.DefaultEndpoint == "" {
		return errors.New("webhook: no endpoint: set PublisherConfig.Endpoints, Endpoint or DefaultEndpoint")
	}
	for topic, u := range c.Endpoints {
		if _, err := parseURL(u); err != nil {
			return fmt.Errorf("webhook: endpoint of topic %q: %w", topic, err)
		}
	}
	if c.DefaultEndpoint != "" {
		if _, err := parseURL(c.DefaultEndpoint); err != nil {
			return fmt.Errorf("webhook: DefaultEndpoint: %w", err)
		}
	}
	return nil
}

// Validate reports whether NewPublisher would accept c: nil, or the error
// it would return, naming the field and the fix. Zero fields take their
// defaults first, as in NewPublisher.
func (c PublisherConfig) Validate() error {
	c.setDefaults()
	_, _, err := c.validate()
	return err
}

// endpointKeys parses cfg.EndpointSecrets. Each URL must parse and, when
// cfg.Endpoint is nil, be one a topic uses; when there are no Secrets
// (noDefault), every URL of Endpoints and DefaultEndpoint must have keys.
func endpointKeys(cfg PublisherConfig, noDefault bool) (map[string][]signingKey, error) {
	used := map[string]bool{}
	for _, u := range cfg.Endpoints {
		used[u] = true
	}
	if cfg.DefaultEndpoint != "" {
		used[cfg.DefaultEndpoint] = true
	}
	byURL := make(map[string][]signingKey, len(cfg.EndpointSecrets))
	for u, secrets := range cfg.EndpointSecrets {
		where := redact.URL(u)
		if _, err := parseURL(u); err != nil {
			return nil, fmt.Errorf("webhook: PublisherConfig.EndpointSecrets: %w", err)
		}
		if cfg.Endpoint == nil && !used[u] {
			return nil, fmt.Errorf("webhook: PublisherConfig.EndpointSecrets names %s, which no topic uses: write the URL exactly as in Endpoints or DefaultEndpoint", where)
		}
		keys, err := parseSigningKeys(secrets)
		if err != nil {
			return nil, fmt.Errorf("%w (PublisherConfig.EndpointSecrets of %s)", err, where)
		}
		byURL[u] = keys
	}
	if noDefault {
		for u := range used {
			if byURL[u] == nil {
				return nil, fmt.Errorf("webhook: endpoint %s has no secret: add it to PublisherConfig.EndpointSecrets or set Secrets", redact.URL(u))
			}
		}
	}
	return byURL, nil
}

func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	var ue *url.Error
	switch {
	case errors.As(err, &ue):
		return nil, fmt.Errorf("URL %q: %w", redact.URL(s), ue.Err)
	case err != nil:
		return nil, err
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("URL %q: use http:// or https://", redact.URL(s))
	case u.Host == "":
		return nil, fmt.Errorf("URL %q has no host", redact.URL(s))
	}
	return u, nil
}

// VerifierConfig configures a Verifier. Zero fields take the defaults
// given; negative ones are refused.
type VerifierConfig struct {
	// Secrets that may have signed a request: "whsec_" + base64 key
	// (shared with the sender), or "whpk_" + an Ed25519 public key (the
	// sender holds the private one). A request any of them verifies
	// passes. Give each endpoint its own. Required.
	Secrets []string
	// Tolerance is how far webhook-timestamp may be from now, either way.
	// Default DefaultTolerance (5m).
	Tolerance time.Duration
	// MaxBodyBytes caps the body, in bytes; a larger one fails with 413.
	// Default DefaultMaxBodyBytes (10 MiB).
	MaxBodyBytes int64
}

func (c *VerifierConfig) setDefaults() {
	setting.Default(&c.Tolerance, DefaultTolerance)
	setting.Default(&c.MaxBodyBytes, DefaultMaxBodyBytes)
}

// validate checks c and returns the keys of Secrets.
func (c *VerifierConfig) validate() ([]verifyingKey, error) {
	keys, err := parseVerifyingKeys(c.Secrets)
	if err == nil {
		err = setting.First(
			setting.Positive("webhook: VerifierConfig.Tolerance", c.Tolerance, DefaultTolerance),
			setting.Positive("webhook: VerifierConfig.MaxBodyBytes", c.MaxBodyBytes, DefaultMaxBodyBytes),
		)
	}
	if err != nil {
		return nil, err
	}
	return keys, nil
}

// Validate reports whether NewVerifier would accept c: nil, or the error
// it would return, naming the field and the fix. Zero fields take their
// defaults first, as in NewVerifier.
func (c VerifierConfig) Validate() error {
	c.setDefaults()
	_, err := c.validate()
	return err
}

// HandlerConfig configures a Handler. Zero fields take the defaults given;
// negative ones are refused.
type HandlerConfig struct {
	VerifierConfig
	// Topics, if set, are the only topics the Handler takes; a request of
	// another topic, though signed, is refused with 403. It stops a request
	// signed for another endpoint that shares this one's secret from being
	// replayed here. Default: any topic.
	Topics []string
	// Wait is how long a request waits for its delivery to be taken by
	// Next and then acknowledged, retried or dropped; Extend starts it
	// again. After it the request is answered 503 (Retry-After: 1) and the
	// sender sends the message again later. Keep it below the sender's
	// timeout (PublisherConfig.Timeout, 10s by default). Default
	// DefaultWait (8s).
	Wait time.Duration
}

func (c *HandlerConfig) setDefaults() {
	c.VerifierConfig.setDefaults()
	setting.Default(&c.Wait, DefaultWait)
}

// validate checks c and returns the keys of its Secrets.
func (c *HandlerConfig) validate() ([]verifyingKey, error) {
	keys, err := c.VerifierConfig.validate()
	if err == nil {
		err = setting.Positive("webhook: HandlerConfig.Wait", c.Wait, DefaultWait)
	}
	if err != nil {
		return nil, err
	}
	return keys, nil
}

// Validate reports whether NewHandler would accept c: nil, or the error it
// would return, naming the field and the fix. Zero fields take their
// defaults first, as in NewHandler.
func (c HandlerConfig) Validate() error {
	c.setDefaults()
	_, err := c.validate()
	return err
}
