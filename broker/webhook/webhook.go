// Package webhook carries Courier messages over plain HTTP: a [Publisher]
// for the relay POSTs each message to an HTTP endpoint chosen by its topic,
// and a [Handler] (an http.Handler) receives them and hands them to a
// consumer as a broker.Subscriber, so inbox.NewConsumer works unchanged.
// Requests follow the Standard Webhooks specification
// (https://www.standardwebhooks.com), so any receiver that implements it can
// verify them, and [Verify] checks requests for code that wants only that.
//
// # Wire format
//
// The request body is the message's payload, byte for byte, and these
// headers are set:
//
//	webhook-id           message id (the receiver's deduplication id)
//	webhook-timestamp    Unix seconds when the request was signed
//	webhook-signature    "v1,<base64 HMAC-SHA256 of id.timestamp.body>", one
//	                     per secret, space-separated
//	Content-Type         payload media type
//	Courier-Topic        topic
//	Courier-Key          ordering key
//	Courier-Type         message type
//	Courier-Version      schema version
//	Courier-Occurred-At  RFC 3339 time
//	Courier-Header-Names the message's own header names, space-separated,
//	                     exactly as written (HTTP does not keep their case)
//
// plus the message's own headers (trace context, correlation id, …), one HTTP
// header each.
//
// With PublisherConfig.CloudEvents set, a request is also a CloudEvent in
// the HTTP binding's binary content mode: the headers ce-specversion, ce-id,
// ce-source, ce-type, ce-subject, ce-time and ce-courierversion are added
// (Content-Type is datacontenttype; see package broker/cloudevents), and
// Courier's headers stay, so a [Handler] receives the request as before
// and a CloudEvents receiver reads the event. A message header that would
// be one of these attributes is refused (broker.ErrRejected). The
// Handler reads Courier's headers only: a request must carry them, and the
// Standard Webhooks signature, anyway.
//
// Secrets are Standard Webhooks secrets: "whsec_" followed by the key in
// base64 (the prefix may be left out). The publisher signs with every secret
// it is given and the receiver accepts a request that any of its secrets
// verifies, so keys rotate without a gap: add the new secret to the
// receiver, then to the sender first in its list, then remove the old one
// from both.
//
// # Delivery guarantees
//
// There is no deduplication on the wire: a request that times out after the
// receiver applied it is sent again. The receiving inbox applies each message
// once, by its id (webhook-id). Order holds per key: the publisher sends the
// messages of one key one at a time, each after the previous one was
// answered with 2xx (stop-and-wait), and messages of different keys
// concurrently. A 2xx answer means what the receiver makes it mean; the
// [Handler] answers 2xx only once the consumer acknowledged the message, that
// is once the inbox committed the handler's transaction (or parked the
// message), so a 2xx from it is as durable as the consumer's database.
//
// # Errors
//
// The publisher sorts the outcome of each request for the relay (see
// broker.Publisher):
//
//   - 2xx: published.
//   - 429, 502, 503, 504, connection errors (refused, reset, TLS), and no
//     answer within Timeout: broker.ErrUnavailable, not counted against the
//     message. A Retry-After header (seconds or an HTTP date) on a 429 or 503
//     holds every request to that endpoint back until then, and the error
//     says how long (broker.RetryAfter).
//   - 410 Gone: broker.ErrRejected, the message becomes a dead letter at
//     once.
//   - 3xx (redirects are not followed; the error names the Location), other
//     4xx and other 5xx: a counted failure, retried until the relay's
//     MaxAttempts.
//
// Each endpoint has a circuit breaker: after BreakerConfig.Failures
// consecutive failures of the endpoint (unavailable answers, 5xx, no
// answer) it opens, and for BreakerConfig.OpenFor every message to the
// endpoint fails with broker.ErrUnavailable without a request; then one
// request probes the endpoint and closes the breaker if it succeeds. 3xx and
// 4xx answers show the endpoint is up and never open it.
//
// When Publish gives up waiting (the relay's publish timeout ends ctx), the
// requests in flight are abandoned with broker.ErrUnavailable and do not
// count against the endpoint.
//
// # Conformance
//
// The publisher passes the broker conformance suite (broker/brokertest)
// with these features: no Dedup, an oversize payload (over the receiver's
// MaxBodyBytes, answered 413) refused as a counted failure, not as
// broker.ErrRejected. The Handler does not fit the suite's Subscriber shape:
// its requests wait for a consumer, so nothing is stored for a subscriber
// that comes later, and a message comes again only when the sender sends it
// again; the suite reads what a Handler received instead. Per-key order is
// tested by the package's own tests, through a relay and an inbox consumer.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Header names of a webhook request. The webhook-* names are the Standard
// Webhooks ones.
const (
	HeaderID          = "webhook-id"
	HeaderTimestamp   = "webhook-timestamp"
	HeaderSignature   = "webhook-signature"
	HeaderContentType = "Content-Type"
	HeaderTopic       = "Courier-Topic"
	HeaderKey         = "Courier-Key"
	HeaderType        = "Courier-Type"
	HeaderVersion     = "Courier-Version"
	HeaderOccurredAt  = "Courier-Occurred-At"
	HeaderNames       = "Courier-Header-Names"
)

// SecretPrefix starts a Standard Webhooks secret; the key follows in base64.
const SecretPrefix = "whsec_"

// reserved are the header names (lower case) a message's own headers may
// not use, because the wire format uses them.
var reserved = map[string]bool{
	"webhook-id": true, "webhook-timestamp": true, "webhook-signature": true,
	"content-type": true, "content-length": true, "courier-topic": true, "courier-key": true,
	"courier-type": true, "courier-version": true, "courier-occurred-at": true,
	"courier-header-names": true, "host": true, "transfer-encoding": true,
	"connection": true, "user-agent": true, "accept-encoding": true,
}

// parseSecrets decodes whsec_ secrets into HMAC keys.
func parseSecrets(secrets []string) ([][]byte, error) {
	if len(secrets) == 0 {
		return nil, errors.New("webhook: no secret: give at least one (\"whsec_\" + base64 key)")
	}
	keys := make([][]byte, 0, len(secrets))
	for i, s := range secrets {
		k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, SecretPrefix))
		if err != nil {
			return nil, fmt.Errorf("webhook: secret %d is not \"whsec_\" followed by base64: %v", i+1, err)
		}
		if len(k) < 16 {
			return nil, fmt.Errorf("webhook: secret %d has %d bytes of key: use at least 16 (24 to 64 random bytes is usual)", i+1, len(k))
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// sign returns the v1 signature of id.timestamp.body under key.
func sign(key []byte, id string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(strconv.FormatInt(ts, 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// signature returns the webhook-signature header value: one v1 signature
// per key, space-separated.
func signature(keys [][]byte, id string, ts int64, body []byte) string {
	sigs := make([]string, len(keys))
	for i, k := range keys {
		sigs[i] = sign(k, id, ts, body)
	}
	return strings.Join(sigs, " ")
}

// validName reports whether s is an HTTP header name (an RFC 9110 token).
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validValue reports whether s survives as an HTTP header value unchanged:
// no control characters but tab, no white space at either end.
func validValue(s string) bool {
	if s != strings.TrimSpace(s) || strings.Trim(s, "\t ") != s {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
