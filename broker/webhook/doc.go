// Package webhook carries Courier messages over plain HTTP: a [Publisher]
// for the relay POSTs each message to an HTTP endpoint chosen by its topic,
// and a [Handler] (an http.Handler) receives them and hands them to a
// consumer as a broker.Subscriber, so inbox.NewConsumer works unchanged.
// Requests follow the Standard Webhooks specification
// (https://www.standardwebhooks.com), so any receiver that implements it can
// verify them, and [Verify] and [VerifyMessage] check requests for code
// that wants only that.
//
// # Wire format
//
// Every request carries the Standard Webhooks headers:
//
//	webhook-id           message id (the receiver's deduplication id)
//	webhook-timestamp    Unix seconds when the request was signed
//	webhook-signature    "v1,<base64 HMAC-SHA256 of id.timestamp.body>" per
//	                     whsec_ secret, "v1a,<base64 Ed25519 signature>" per
//	                     whsk_ private key, space-separated
//
// The signature covers the id, the timestamp and the body, nothing else, so
// what a receiver acts on must be in the body. By default
// (PublisherConfig.Body is [BodyEnvelope]) it is: the body is a JSON
// envelope, Content-Type application/json,
//
//	{"type":"OrderPlaced","timestamp":"2026-11-30T12:00:00Z",
//	 "topic":"orders","key":"order-42","version":1,
//	 "content_type":"application/json",
//	 "headers":{"traceparent":"00-…"},
//	 "data":{"order_id":"order-42"}}
//
// type, timestamp (when the event occurred) and data are the payload shape
// the specification recommends; topic, key, version, content_type and the
// message's headers sit beside them. The payload is data when it is JSON
// (its content type says so and it parses), byte for byte, and otherwise
// data_base64, its base64. content_type and headers are left out when
// empty. No other header is sent, so a request captured on the way cannot
// be sent again as another type, to another topic or with other headers:
// that changes the body, and the signature no longer verifies.
//
// With PublisherConfig.CloudEvents set, the body is the message as a
// CloudEvent in the JSON event format instead (Content-Type
// application/cloudevents+json, the HTTP binding's structured content mode;
// see package broker/cloudevents), signed the same way.
//
// [BodyRaw] sends what older receivers expect: the payload as the body,
// byte for byte, with Content-Type the payload's media type, the rest of
// the message in headers (Courier-Topic, Courier-Key, Courier-Type,
// Courier-Version, Courier-Occurred-At, Courier-Header-Names listing the
// message's own header names as written) and each of the message's headers
// as a request header; with CloudEvents, the binary content mode's ce-*
// headers too. None of those headers is signed: a receiver of raw
// requests must act on the payload alone, never on those headers. The
// [Handler] refuses raw requests (400), as it would have to act on them.
// A message header HTTP acts on (courier.CheckHeaderName: Authorization,
// Cookie, Host, Forwarded, Content-*, hop-by-hop names, Webhook-*, …), one
// the wire format uses, a CloudEvents attribute when CloudEvents is on, or a
// value HTTP cannot carry unchanged is refused in raw mode
// (broker.ErrRejected, the message becomes a dead letter with that
// reason); the outbox writer refuses such header names already.
//
// # Keys
//
// Secrets are Standard Webhooks keys: "whsec_" followed by a symmetric key
// in base64 (the prefix may be left out), which sender and receiver share;
// or an Ed25519 pair, "whsk_" + the private key for the sender and "whpk_"
// + the public key for the receivers, so that no receiver can sign. The
// publisher signs with every key it is given and the receiver accepts a
// request that any of its keys verifies, so keys rotate without a gap: add
// the new key to the receiver, then to the sender first in its list, then
// remove the old one from both.
//
// Give each endpoint keys of its own (PublisherConfig.EndpointSecrets; the
// specification asks for it): a request signed for one endpoint then does
// not verify at another, so it cannot be replayed there. A Handler can also
// refuse topics it does not expect (HandlerConfig.Topics), which stops such
// a replay where endpoints share a secret.
//
// # Delivery guarantees
//
// There is no deduplication on the wire: a request that times out after the
// receiver applied it is sent again. The receiving inbox applies each message
// once, by its id (webhook-id). Order holds per key: the publisher sends the
// messages of one key one at a time, each after the previous one was
// answered with 2xx (stop-and-wait), and messages of different keys
// concurrently; after a message that failed, the rest of its key's
// messages in the call are not sent, unless it was refused for good (a
// dead letter holds nothing back). That is the promise of a
// broker.OrderKeeper, so the relay hands the publisher a key's whole run of
// a batch in one call: the wire stays stop-and-wait, but a burst on one key
// no longer costs the relay a round of its own per message. A 2xx answer means what the receiver makes it mean; the
// [Handler] answers 2xx only once the consumer acknowledged the message, that
// is once the inbox committed the handler's transaction (or parked the
// message), so a 2xx from it is as durable as the consumer's database.
//
// A receiving service of several instances behind a load balancer keeps
// each key's order whatever the balancer does, since the relay sends a
// key's next message only after the previous one was answered 2xx: as long
// as an instance answers 2xx only once its transaction committed (the
// Handler does, KeepOrder or not), a key's messages are applied in the
// order sent, by whichever instances receive them. A retry (a 503, a
// timeout) is the same message again, before any later message of its key.
// What a receiver must not do is answer 2xx for a message it has only
// queued: then the next one can overtake it. The price is one message per
// key per round trip; other keys are sent concurrently.
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
// Signatures are checked against the Standard Webhooks project's own test
// vectors (testdata/standard-webhooks.json) and against its JavaScript
// library, which verifies what the publisher sends.
package webhook
