package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// VerifyError is why a request failed verification or, for
// VerifyMessage, decoding; its Status is the HTTP status to answer with
// (400, 401 or 413).
type VerifyError struct {
	Status int
	// Title names what is wrong, Detail says what and how to fix it.
	Title, Detail string
	// Err is the underlying error, if any: one wrapping
	// courier.ErrMalformed when the body is not a Courier message.
	Err error
}

func (e *VerifyError) Error() string { return "webhook: " + e.Title + ": " + e.Detail }

// Unwrap returns Err.
func (e *VerifyError) Unwrap() error { return e.Err }

// Verifier checks Standard Webhooks requests.
type Verifier struct {
	keys      []verifyingKey
	tolerance time.Duration
	maxBody   int64
	now       func() time.Time
}

// NewVerifier checks cfg (see VerifierConfig.Validate) and returns a
// Verifier.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	cfg.setDefaults()
	keys, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return newVerifier(cfg, keys), nil
}

// newVerifier returns the Verifier of cfg, checked, with keys, its
// Secrets parsed.
func newVerifier(cfg VerifierConfig, keys []verifyingKey) *Verifier {
	return &Verifier{keys: keys, tolerance: cfg.Tolerance, maxBody: cfg.MaxBodyBytes, now: time.Now}
}

// Verify checks r's signature and timestamp against secrets with the
// default tolerance and body limit, and returns the body (r.Body is read
// and closed). Errors are *VerifyError. Build a Verifier once instead when
// verifying many requests.
func Verify(r *http.Request, secrets ...string) ([]byte, error) {
	v, err := NewVerifier(VerifierConfig{Secrets: secrets})
	if err != nil {
		return nil, err
	}
	return v.Verify(r)
}

// VerifyMessage checks r as Verify does and returns the message its body
// carries (see Verifier.VerifyMessage).
func VerifyMessage(r *http.Request, secrets ...string) (courier.Message, error) {
	v, err := NewVerifier(VerifierConfig{Secrets: secrets})
	if err != nil {
		return courier.Message{}, err
	}
	return v.VerifyMessage(r)
}

// Verify checks r's webhook-id, webhook-timestamp and webhook-signature and
// returns the body (r.Body is read and closed). Errors are *VerifyError.
// The signature covers the id, the timestamp and the body only: act on
// nothing else of the request (VerifyMessage reads the message from the
// body). Of webhook-signature's signatures, the first 16 are looked at; a
// webhook-id holding a full stop, or a timestamp that is not plain digits,
// is refused, as either would make id.timestamp.body ambiguous.
func (v *Verifier) Verify(r *http.Request) ([]byte, error) {
	id, tsText, sigs := r.Header.Get(HeaderID), r.Header.Get(HeaderTimestamp), r.Header.Get(HeaderSignature)
	for name, val := range map[string]string{HeaderID: id, HeaderTimestamp: tsText, HeaderSignature: sigs} {
		if val == "" {
			return nil, &VerifyError{Status: http.StatusBadRequest, Title: "missing header " + name,
				Detail: "a Standard Webhooks request carries webhook-id, webhook-timestamp and webhook-signature: send it with a Standard Webhooks sender (broker/webhook Publisher)"}
		}
	}
	if strings.Contains(id, ".") {
		return nil, &VerifyError{Status: http.StatusBadRequest, Title: "invalid webhook-id",
			Detail: "webhook-id contains a full stop, which would make the signed id.timestamp.body ambiguous"}
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil || strconv.FormatInt(ts, 10) != tsText {
		return nil, &VerifyError{Status: http.StatusBadRequest, Title: "invalid webhook-timestamp", Detail: fmt.Sprintf("%q is not Unix seconds (digits only)", tsText)}
	}
	if skew := v.now().Sub(time.Unix(ts, 0)); math.Abs(float64(skew)) > float64(v.tolerance) {
		return nil, &VerifyError{Status: http.StatusBadRequest, Title: "timestamp outside tolerance",
			Detail: fmt.Sprintf("webhook-timestamp %d is %s away from the receiver's clock, more than the %s allowed: sync the clocks (NTP); a replayed old request is refused this way", ts, skew.Round(time.Second), v.tolerance)}
	}
	defer r.Body.Close()
	body, err := io.ReadAll(io.LimitReader(r.Body, v.maxBody+1))
	if err != nil {
		return nil, &VerifyError{Status: http.StatusBadRequest, Title: "unreadable body", Detail: err.Error()}
	}
	if int64(len(body)) > v.maxBody {
		return nil, &VerifyError{Status: http.StatusRequestEntityTooLarge, Title: "body too large",
			Detail: fmt.Sprintf("the body is larger than %d bytes: send a smaller payload or raise the receiver's MaxBodyBytes", v.maxBody)}
	}
	if !verifySignatures(v.keys, sigs, id, ts, body) {
		return nil, &VerifyError{Status: http.StatusUnauthorized, Title: "bad signature",
			Detail: "no v1 or v1a signature in webhook-signature matches the body under the receiver's secrets: check that sender and receiver share a secret, or that the receiver has the whpk_ public key of the sender's whsk_ one, for this endpoint (during a rotation the receiver must list both), and that nothing rewrites the body"}
	}
	return body, nil
}

// VerifyMessage checks r as Verify does and returns the message of its
// signed body: Courier's JSON envelope (PublisherConfig.Body
// BodyEnvelope) or a CloudEvent in the JSON event format with Courier's
// extensions (BodyEnvelope with CloudEvents). Every field comes from the
// signed body or webhook-id; no other header is read. A request that
// carries any of Courier's raw-mode headers (Courier-Topic, Courier-Type,
// …), which the signature does not cover, is refused with 400, whatever
// its body: a raw request, or one someone added them to on the way.
// Errors are *VerifyError; those about the message wrap
// courier.ErrMalformed.
func (v *Verifier) VerifyMessage(r *http.Request) (courier.Message, error) {
	m, _, err := v.message(r)
	return m, err
}

// message verifies r and decodes its body.
func (v *Verifier) message(r *http.Request) (courier.Message, []byte, error) {
	body, err := v.Verify(r)
	if err != nil {
		return courier.Message{}, nil, err
	}
	for _, name := range unsignedHeaders() {
		if len(r.Header.Values(name)) > 0 {
			return courier.Message{}, nil, &VerifyError{Status: http.StatusBadRequest, Title: "unsigned message header " + name,
				Detail: "the request carries the message's " + strings.TrimPrefix(name, "Courier-") + " in a header the signature does not cover (raw mode, or a request altered on the way): send it with PublisherConfig.Body BodyEnvelope (the default), which signs everything the receiver acts on",
				Err:    fmt.Errorf("%w: unsigned header %s", courier.ErrMalformed, name)}
		}
	}
	m, err := decodeBody(r.Header.Get(HeaderID), body)
	if err != nil {
		return courier.Message{}, nil, &VerifyError{Status: http.StatusBadRequest, Title: "not a signed Courier message",
			Detail: err.Error() + ": send it with broker/webhook's Publisher", Err: err}
	}
	return m, body, nil
}

// problem writes an RFC 9457 problem+json answer.
func problem(w http.ResponseWriter, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": title, "status": status, "detail": detail})
}

// Handler receives webhook requests and is a broker.Subscriber of them:
// each verified request becomes a delivery that Next returns, and the
// request waits for the consumer's verdict:
//
//   - Ack: 200 OK.
//   - Drop (the consumer parked the message): 202 Accepted, so the sender
//     stops sending it.
//   - Retry(delay): 503 with Retry-After set to delay in whole seconds; the
//     sender sends it again after that (without counting an attempt).
//   - No verdict within Wait, Close, or the sender hanging up: 503; the
//     message comes again with the sender's next attempt.
//
// So inbox.NewConsumer(ib, handler, …) consumes the requests unchanged and a
// 2xx means the inbox committed. The message comes from the signed body
// alone (see VerifyMessage). Requests that fail verification, that carry
// Courier's unsigned raw-mode headers, whose body is not a Courier message,
// or whose topic HandlerConfig.Topics does not list, are answered 4xx with
// a problem+json body and reach no consumer. Attempt counts the requests for
// one message id this Handler has seen (a bounded memory, reset when it
// grows past 100 000 ids); Extend restarts the request's wait.
//
// A verdict given after the request was answered without one (Wait ran
// out, Close, the sender hung up) returns an error saying so; the sender
// sends the message again and the inbox skips it if it was applied.
//
// A Retry's Retry-After holds back every message the sender has for this
// endpoint for that long, not only the retried one (HTTP has no other way
// to say it). With inbox.ConsumerConfig.KeepOrder the consumer retries in
// place instead, extending the request, so keep its backoff well under the
// sender's Timeout or expect the sender to give up and send again.
//
// Close makes Next fail and answers waiting requests 503; a Handler is not
// reopened, so register a new one to consume again.
type Handler struct {
	v      *Verifier
	wait   time.Duration
	topics map[string]bool // nil: any
	in     chan *delivery

	mu       sync.Mutex
	attempts map[string]int
	closed   chan struct{}
	once     sync.Once
}

var _ broker.Subscriber = (*Handler)(nil)
var _ http.Handler = (*Handler)(nil)

// NewHandler checks cfg (see HandlerConfig.Validate) and returns a Handler.
func NewHandler(cfg HandlerConfig) (*Handler, error) {
	cfg.setDefaults()
	keys, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	v := newVerifier(cfg.VerifierConfig, keys)
	var topics map[string]bool
	for _, t := range cfg.Topics {
		if topics == nil {
			topics = map[string]bool{}
		}
		topics[t] = true
	}
	return &Handler{v: v, wait: cfg.Wait, topics: topics, in: make(chan *delivery), attempts: map[string]int{}, closed: make(chan struct{})}, nil
}

// verdicts of a delivery.
const (
	verdictAck = iota + 1
	verdictDrop
	verdictRetry
)

type verdict struct {
	kind  int
	delay time.Duration
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		problem(w, http.StatusMethodNotAllowed, "method not allowed", "webhooks are POSTed")
		return
	}
	m, body, err := h.v.message(r)
	if err != nil {
		var ve *VerifyError
		if errors.As(err, &ve) {
			problem(w, ve.Status, ve.Title, ve.Detail)
			return
		}
		problem(w, http.StatusInternalServerError, "verification failed", err.Error())
		return
	}
	if h.topics != nil && !h.topics[m.Topic] {
		problem(w, http.StatusForbidden, "topic not taken here",
			fmt.Sprintf("this endpoint takes the topics %s, not %q: point the sender's topic at its own endpoint (and give each endpoint its own secret)", h.topicList(), m.Topic))
		return
	}
	id := r.Header.Get(HeaderID)
	raw := broker.Raw{Subject: m.Topic, Headers: map[string][]string{http.CanonicalHeaderKey(HeaderID): {id}}, Data: body}
	d := &delivery{raw: raw, attempt: h.attempt(id), verdict: make(chan verdict, 1), extend: make(chan struct{}, 1)}
	timer := time.NewTimer(h.wait)
	defer timer.Stop()
	select {
	case h.in <- d:
	case <-timer.C:
		busy(w, 1, "no consumer took the message in time")
		return
	case <-h.closed:
		busy(w, 1, "the receiver is shutting down")
		return
	case <-r.Context().Done():
		return
	}
	var why string
	for why == "" {
		select {
		case v := <-d.verdict:
			answer(w, v)
			return
		case <-d.extend:
			if !timer.Stop() {
				<-timer.C
			}
			timer.Reset(h.wait)
		case <-timer.C:
			why = "the consumer did not finish the message in time"
		case <-h.closed:
			why = "the receiver is shutting down"
		case <-r.Context().Done():
			why = "the sender hung up"
		}
	}
	if !d.end(why) {
		answer(w, <-d.verdict)
		return
	}
	busy(w, 1, why)
}

// answer writes the response a verdict asks for.
func answer(w http.ResponseWriter, v verdict) {
	switch v.kind {
	case verdictAck:
		w.WriteHeader(http.StatusOK)
	case verdictDrop:
		w.WriteHeader(http.StatusAccepted)
	default:
		busy(w, int(math.Ceil(v.delay.Seconds())), "the consumer asked for the message again later")
	}
}

func busy(w http.ResponseWriter, after int, why string) {
	w.Header().Set("Retry-After", strconv.Itoa(after))
	problem(w, http.StatusServiceUnavailable, "try again later", why)
}

// topicList returns the topics the Handler takes, sorted, for errors.
func (h *Handler) topicList() string {
	return strings.Join(slices.Sorted(maps.Keys(h.topics)), ", ")
}

func (h *Handler) attempt(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.attempts) >= 100000 {
		clear(h.attempts)
	}
	h.attempts[id]++
	return h.attempts[id]
}

// Next implements broker.Subscriber: it returns the next verified request.
func (h *Handler) Next(ctx context.Context) (broker.Delivery, error) {
	select {
	case d := <-h.in:
		return d, nil
	case <-h.closed:
		return nil, errors.New("webhook: handler closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Decode implements broker.Subscriber: it reads the message of raw's body
// (the signed envelope or CloudEvent ServeHTTP verified, see
// VerifyMessage) with the id of raw's webhook-id header. Errors wrap
// courier.ErrMalformed.
func (h *Handler) Decode(raw broker.Raw) (courier.Message, error) {
	return decodeBody(http.Header(raw.Headers).Get(HeaderID), raw.Data)
}

// Close implements broker.Subscriber: Next fails from now on and waiting
// requests are answered 503.
func (h *Handler) Close() error {
	h.once.Do(func() { close(h.closed) })
	return nil
}

// delivery is one request waiting for its verdict.
type delivery struct {
	raw     broker.Raw
	attempt int
	verdict chan verdict
	extend  chan struct{}

	mu    sync.Mutex
	state int // stateWaiting, stateGiven, stateEnded
	why   string
}

// states of a delivery.
const (
	stateWaiting = iota
	stateGiven
	stateEnded
)

func (d *delivery) Raw() broker.Raw { return d.raw }
func (d *delivery) Attempt() int    { return d.attempt }

// give hands the waiting request its verdict.
func (d *delivery) give(v verdict) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch d.state {
	case stateGiven:
		return errors.New("webhook: the delivery already has its verdict")
	case stateEnded:
		return fmt.Errorf("webhook: the request of message %s was already answered 503 (%s): the sender sends it again", d.raw.Headers[http.CanonicalHeaderKey(HeaderID)], d.why)
	}
	d.state = stateGiven
	d.verdict <- v
	return nil
}

// end marks the request answered without a verdict; false when a verdict
// came first (it is in d.verdict).
func (d *delivery) end(why string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == stateGiven {
		return false
	}
	d.state, d.why = stateEnded, why
	return true
}

// Ack answers the request 200 OK, if it is still waiting.
func (d *delivery) Ack(context.Context) error { return d.give(verdict{kind: verdictAck}) }

// Drop answers the request 202 Accepted, if it is still waiting.
func (d *delivery) Drop(context.Context) error { return d.give(verdict{kind: verdictDrop}) }

// Retry answers the request 503 with Retry-After, if it is still waiting.
func (d *delivery) Retry(_ context.Context, delay time.Duration) error {
	return d.give(verdict{kind: verdictRetry, delay: delay})
}

// Extend restarts the request's wait.
func (d *delivery) Extend(context.Context) error {
	select {
	case d.extend <- struct{}{}:
	default:
	}
	return nil
}
