package webhook

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// Defaults of VerifierConfig's and HandlerConfig's zero fields.
const (
	DefaultTolerance    = 5 * time.Minute
	DefaultMaxBodyBytes = 10 << 20
	DefaultWait         = 8 * time.Second
)

// VerifyError is why a request failed verification; its Status is the HTTP
// status to answer with (400, 401 or 413).
type VerifyError struct {
	Status int
	// Title names what is wrong, Detail says what and how to fix it.
	Title, Detail string
}

func (e *VerifyError) Error() string { return "webhook: " + e.Title + ": " + e.Detail }

// Verifier checks Standard Webhooks requests.
type Verifier struct {
	keys      [][]byte
	tolerance time.Duration
	maxBody   int64
	now       func() time.Time
}

// VerifierConfig configures a Verifier.
type VerifierConfig struct {
	// Secrets that may have signed a request ("whsec_" + base64 key); a
	// request any of them verifies passes. Required.
	Secrets []string
	// Tolerance is how far webhook-timestamp may be from now, either way.
	// Default DefaultTolerance (5m).
	Tolerance time.Duration
	// MaxBodyBytes caps the body; a larger one fails with 413. Default
	// DefaultMaxBodyBytes (10 MiB).
	MaxBodyBytes int64
}

// NewVerifier checks cfg and returns a Verifier.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	keys, err := parseSecrets(cfg.Secrets)
	if err != nil {
		return nil, err
	}
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = DefaultTolerance
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	return &Verifier{keys: keys, tolerance: cfg.Tolerance, maxBody: cfg.MaxBodyBytes, now: time.Now}, nil
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

// Verify checks r's webhook-id, webhook-timestamp and webhook-signature and
// returns the body (r.Body is read and closed). Errors are *VerifyError.
func (v *Verifier) Verify(r *http.Request) ([]byte, error) {
	id, tsText, sigs := r.Header.Get(HeaderID), r.Header.Get(HeaderTimestamp), r.Header.Get(HeaderSignature)
	for name, val := range map[string]string{HeaderID: id, HeaderTimestamp: tsText, HeaderSignature: sigs} {
		if val == "" {
			return nil, &VerifyError{http.StatusBadRequest, "missing header " + name,
				"a Standard Webhooks request carries webhook-id, webhook-timestamp and webhook-signature: send it with a Standard Webhooks sender (broker/webhook Publisher)"}
		}
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return nil, &VerifyError{http.StatusBadRequest, "invalid webhook-timestamp", fmt.Sprintf("%q is not Unix seconds", tsText)}
	}
	if skew := v.now().Sub(time.Unix(ts, 0)); math.Abs(float64(skew)) > float64(v.tolerance) {
		return nil, &VerifyError{http.StatusBadRequest, "timestamp outside tolerance",
			fmt.Sprintf("webhook-timestamp %d is %s away from the receiver's clock, more than the %s allowed: sync the clocks (NTP); a replayed old request is refused this way", ts, skew.Round(time.Second), v.tolerance)}
	}
	defer r.Body.Close()
	body, err := io.ReadAll(io.LimitReader(r.Body, v.maxBody+1))
	if err != nil {
		return nil, &VerifyError{http.StatusBadRequest, "unreadable body", err.Error()}
	}
	if int64(len(body)) > v.maxBody {
		return nil, &VerifyError{http.StatusRequestEntityTooLarge, "body too large",
			fmt.Sprintf("the body is larger than %d bytes: send a smaller payload or raise the receiver's MaxBodyBytes", v.maxBody)}
	}
	for _, k := range v.keys {
		want := sign(k, id, ts, body)
		for _, got := range strings.Fields(sigs) {
			if hmac.Equal([]byte(got), []byte(want)) {
				return body, nil
			}
		}
	}
	return nil, &VerifyError{http.StatusUnauthorized, "bad signature",
		"no v1 signature in webhook-signature matches the body under the receiver's secrets: check that sender and receiver share a secret (during a rotation the receiver must list both) and that nothing rewrites the body"}
}

// problem writes an RFC 9457 problem+json answer.
func problem(w http.ResponseWriter, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": title, "status": status, "detail": detail})
}

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	VerifierConfig
	// Wait is how long a request waits for its delivery to be taken by
	// Next and then acknowledged, retried or dropped; Extend starts it
	// again. After it the request is answered 503 (Retry-After: 1) and the
	// sender sends the message again later. Keep it below the sender's
	// timeout (PublisherConfig.Timeout, 10s by default). Default
	// DefaultWait (8s).
	Wait time.Duration
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
// 2xx means the inbox committed. Requests that fail verification are
// answered 4xx with a problem+json body. Attempt counts the requests for
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
	v    *Verifier
	wait time.Duration
	in   chan *delivery

	mu       sync.Mutex
	attempts map[string]int
	closed   chan struct{}
	once     sync.Once
}

var _ broker.Subscriber = (*Handler)(nil)
var _ http.Handler = (*Handler)(nil)

// NewHandler checks cfg and returns a Handler.
func NewHandler(cfg HandlerConfig) (*Handler, error) {
	v, err := NewVerifier(cfg.VerifierConfig)
	if err != nil {
		return nil, err
	}
	if cfg.Wait <= 0 {
		cfg.Wait = DefaultWait
	}
	return &Handler{v: v, wait: cfg.Wait, in: make(chan *delivery), attempts: map[string]int{}, closed: make(chan struct{})}, nil
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
	body, err := h.v.Verify(r)
	if err != nil {
		var ve *VerifyError
		if errors.As(err, &ve) {
			problem(w, ve.Status, ve.Title, ve.Detail)
			return
		}
		problem(w, http.StatusInternalServerError, "verification failed", err.Error())
		return
	}
	raw := broker.Raw{Subject: r.Header.Get(HeaderTopic), Headers: keep(r.Header), Data: body}
	if _, err := h.Decode(raw); err != nil {
		problem(w, http.StatusBadRequest, "not a Courier message", err.Error()+": send it with broker/webhook's Publisher")
		return
	}
	d := &delivery{raw: raw, attempt: h.attempt(r.Header.Get(HeaderID)), verdict: make(chan verdict, 1), extend: make(chan struct{}, 1)}
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

// keep returns the headers Decode reads.
func keep(h http.Header) map[string][]string {
	out := map[string][]string{}
	for _, name := range []string{HeaderID, HeaderTimestamp, HeaderContentType, HeaderTopic, HeaderKey, HeaderType, HeaderVersion, HeaderOccurredAt, HeaderNames} {
		if v := h.Values(name); len(v) > 0 {
			out[http.CanonicalHeaderKey(name)] = v
		}
	}
	for _, name := range strings.Fields(h.Get(HeaderNames)) {
		if v := h.Values(name); len(v) > 0 {
			out[name] = v
		}
	}
	return out
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

// Decode implements broker.Subscriber.
func (h *Handler) Decode(raw broker.Raw) (courier.Message, error) {
	hd := http.Header(raw.Headers)
	get := func(name string) string {
		if v := hd.Get(name); v != "" {
			return v
		}
		return firstOf(raw.Headers[name])
	}
	bad := func(field string, err error) (courier.Message, error) {
		if err != nil {
			return courier.Message{}, fmt.Errorf("%w: header %s: %v", courier.ErrMalformed, field, err)
		}
		return courier.Message{}, fmt.Errorf("%w: header %s is missing", courier.ErrMalformed, field)
	}
	m := courier.Message{Topic: raw.Subject, Payload: raw.Data}
	if m.Topic == "" {
		return bad(HeaderTopic, nil)
	}
	var err error
	if m.ID, err = uuid.Parse(get(HeaderID)); err != nil {
		return bad(HeaderID, err)
	}
	if m.Key = get(HeaderKey); m.Key == "" {
		return bad(HeaderKey, nil)
	}
	if m.Type = get(HeaderType); m.Type == "" {
		return bad(HeaderType, nil)
	}
	if m.Version, err = strconv.Atoi(get(HeaderVersion)); err != nil {
		return bad(HeaderVersion, err)
	}
	if m.OccurredAt, err = time.Parse(time.RFC3339Nano, get(HeaderOccurredAt)); err != nil {
		return bad(HeaderOccurredAt, err)
	}
	m.ContentType = get(HeaderContentType)
	for _, name := range strings.Fields(get(HeaderNames)) {
		if v, ok := raw.Headers[name]; ok {
			m.SetHeader(name, firstOf(v))
		} else if v, ok := hd[http.CanonicalHeaderKey(name)]; ok {
			m.SetHeader(name, firstOf(v))
		}
	}
	return m, nil
}

func firstOf(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
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
