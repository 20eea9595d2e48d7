package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/wire"
	"github.com/courier-go/courier/internal/redact"
)

// Publisher POSTs messages to HTTP endpoints (see the package
// documentation). It is safe for concurrent use.
type Publisher struct {
	cfg    PublisherConfig
	keys   []signingKey            // Secrets
	byURL  map[string][]signingKey // EndpointSecrets
	client *http.Client

	mu        sync.Mutex
	endpoints map[string]*endpoint
}

var (
	_ broker.Publisher   = (*Publisher)(nil)
	_ broker.OrderKeeper = (*Publisher)(nil)
)

// endpoint is the state kept per URL: its breaker and how long a
// Retry-After holds it back.
type endpoint struct {
	url   *url.URL
	where string       // the URL as errors show it: redacted (internal/redact)
	keys  []signingKey // nil: none configured
	cb    *gobreaker.CircuitBreaker[struct{}]

	mu       sync.Mutex
	until    time.Time // Retry-After: no request before
	openedAt time.Time // when the breaker last opened
}

// NewPublisher checks cfg (see PublisherConfig.Validate) and returns a
// Publisher.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	cfg.setDefaults()
	keys, byURL, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	cfg.CloudEvents = cfg.CloudEvents.Clone()
	client := &http.Client{}
	if cfg.Client != nil {
		*client = *cfg.Client
	} else if t, ok := http.DefaultTransport.(*http.Transport); ok {
		t = t.Clone()
		t.MaxIdleConnsPerHost = cfg.Concurrency // keys sent at once reuse their connections
		client.Transport = t
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Publisher{cfg: cfg, keys: keys, byURL: byURL, client: client, endpoints: make(map[string]*endpoint)}, nil
}

// endpointOf returns the URL of topic, "" when none is configured.
func (p *Publisher) endpointOf(topic string) string {
	if u, ok := p.cfg.Endpoints[topic]; ok {
		return u
	}
	if p.cfg.Endpoint != nil {
		if u := p.cfg.Endpoint(topic); u != "" {
			return u
		}
	}
	return p.cfg.DefaultEndpoint
}

// endpoint returns the state of URL raw, creating it on first use.
func (p *Publisher) endpoint(raw string) (*endpoint, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ep, ok := p.endpoints[raw]; ok {
		return ep, nil
	}
	u, err := parseURL(raw)
	if err != nil {
		return nil, err
	}
	ep := &endpoint{url: u, where: redact.URL(raw), keys: p.byURL[raw]}
	if ep.keys == nil {
		ep.keys = p.keys
	}
	if !p.cfg.Breaker.Disabled {
		ep.cb = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
			Name:        ep.where,
			MaxRequests: 1,
			Timeout:     p.cfg.Breaker.OpenFor,
			ReadyToTrip: func(c gobreaker.Counts) bool {
				return c.ConsecutiveFailures >= p.cfg.Breaker.Failures
			},
			OnStateChange: func(_ string, _, to gobreaker.State) {
				if to == gobreaker.StateOpen {
					ep.mu.Lock()
					ep.openedAt = time.Now()
					ep.mu.Unlock()
				}
			},
			IsSuccessful: func(err error) bool { return !endpointFailure(err) },
			IsExcluded:   func(err error) bool { return errors.Is(err, errCallerGone) },
		})
	}
	p.endpoints[raw] = ep
	return ep, nil
}

// errCallerGone marks a request abandoned because Publish's context ended:
// it says nothing about the endpoint.
var errCallerGone = errors.New("publish context ended")

// Publish implements broker.Publisher. Messages of one key are sent one
// after the other, each once the previous one was answered with 2xx; when
// one fails, the later messages of its key are not sent and fail with
// broker.ErrUnavailable (they wait for it), unless it was refused for good
// (broker.Permanent: a dead letter, which nothing waits for). Keys are sent
// concurrently, up to Concurrency requests at a time.
func (p *Publisher) Publish(ctx context.Context, msgs []courier.Message) []error {
	errs := make([]error, len(msgs))
	chains := map[string][]int{}
	var order []string
	for i := range msgs {
		k := msgs[i].Key
		if _, ok := chains[k]; !ok {
			order = append(order, k)
		}
		chains[k] = append(chains[k], i)
	}
	sem := make(chan struct{}, p.cfg.Concurrency)
	var wg sync.WaitGroup
	for _, k := range order {
		wg.Add(1)
		go func(chain []int) {
			defer wg.Done()
			for n, i := range chain {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
				}
				if ctx.Err() != nil {
					for _, j := range chain[n:] {
						errs[j] = broker.Unavailable(fmt.Errorf("webhook: not sent: %w", ctx.Err()))
					}
					return
				}
				errs[i] = p.send(ctx, &msgs[i])
				<-sem
				if errs[i] != nil && !broker.Permanent(errs[i]) {
					for _, j := range chain[n+1:] {
						errs[j] = broker.Unavailable(fmt.Errorf("webhook: not sent: message %s of key %q before it failed (%v)", msgs[i].ID, msgs[i].Key, errs[i]))
					}
					return
				}
			}
		}(chains[k])
	}
	wg.Wait()
	return errs
}

// KeepsKeyOrder implements broker.OrderKeeper: it is true, so the relay
// hands Publish a key's whole run of a batch in one call. Publish still
// sends the run stop-and-wait, each message once the previous one was
// answered 2xx, and sends none after one that failed other than for good,
// which is the promise; what the relay saves is its own round per message
// (a claim's rounds, their records and spans), and a key no longer waits
// for the slowest key of its round.
func (p *Publisher) KeepsKeyOrder() bool { return true }

// send POSTs m to its topic's endpoint and classifies the outcome.
func (p *Publisher) send(ctx context.Context, m *courier.Message) error {
	raw := p.endpointOf(m.Topic)
	if raw == "" {
		return fmt.Errorf("webhook: topic %q has no endpoint: add it to PublisherConfig.Endpoints or set DefaultEndpoint", m.Topic)
	}
	ep, err := p.endpoint(raw)
	if err != nil {
		return fmt.Errorf("webhook: endpoint of topic %q: %w", m.Topic, err)
	}
	if ep.keys == nil {
		return fmt.Errorf("webhook: endpoint %s of topic %q has no secret: add it to PublisherConfig.EndpointSecrets or set Secrets", ep.where, m.Topic)
	}
	req, err := p.request(ctx, ep, m)
	if err != nil {
		return err
	}
	ep.mu.Lock()
	wait := time.Until(ep.until)
	ep.mu.Unlock()
	if wait > 0 {
		return broker.Unavailable(&retryAfterError{
			err:   fmt.Errorf("webhook: %s asked not to be sent anything for %s more (Retry-After)", ep.where, wait.Round(time.Millisecond)),
			after: wait,
		})
	}
	if ep.cb == nil {
		return p.do(ctx, ep, req, m)
	}
	_, err = ep.cb.Execute(func() (struct{}, error) { return struct{}{}, p.do(ctx, ep, req, m) })
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		ep.mu.Lock()
		left := time.Until(ep.openedAt.Add(p.cfg.Breaker.OpenFor))
		ep.mu.Unlock()
		return broker.Unavailable(&retryAfterError{
			err:   fmt.Errorf("webhook: %s: circuit breaker %v after %d consecutive failures; no request sent", ep.where, err, p.cfg.Breaker.Failures),
			after: max(left, 0),
		})
	}
	return err
}

// request builds the signed POST of m to ep. A message the wire cannot
// carry unchanged is a permanent refusal.
func (p *Publisher) request(ctx context.Context, ep *endpoint, m *courier.Message) (*http.Request, error) {
	var body []byte
	h := http.Header{}
	switch {
	case p.cfg.Body == BodyRaw:
		if err := p.rawHeaders(h, m); err != nil {
			return nil, err
		}
		body = m.Payload
	case p.cfg.CloudEvents != nil:
		var err error
		if body, err = p.cfg.CloudEvents.JSON(m); err != nil {
			return nil, broker.Rejected(fmt.Errorf("webhook: %w", err))
		}
		h.Set(HeaderContentType, cloudevents.MediaTypeJSON)
	default:
		var err error
		if body, err = envelope(m); err != nil {
			return nil, broker.Rejected(err)
		}
		h.Set(HeaderContentType, contentTypeEnvelope)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.url.String(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("webhook: request to %s: %w", ep.where, err)
	}
	id := m.ID.String()
	ts := time.Now().Unix()
	h[HeaderID] = []string{id}
	h[HeaderTimestamp] = []string{strconv.FormatInt(ts, 10)}
	h[HeaderSignature] = []string{signature(ep.keys, id, ts, body)}
	req.Header = h
	return req, nil
}

// rawHeaders sets the headers of BodyRaw mode, as package broker/wire
// writes them: Courier's, the message's own (under their names as
// written, which Courier-Header-Names lists, sorted) and, with CloudEvents,
// the binary content mode's attributes; and Courier-Topic. The message id
// is left to webhook-id, which request sets, signed, in every mode. A
// message the raw mode cannot carry unchanged is refused for good (see
// checkRaw).
func (p *Publisher) rawHeaders(h http.Header, m *courier.Message) error {
	if err := p.checkRaw(m); err != nil {
		return err
	}
	var names []string
	wire.HTTP.Encode(m, p.cfg.CloudEvents, func(name, value string) {
		switch _, own := m.Headers[name]; {
		case name == HeaderID:
		case own:
			h[name] = append(h[name], value)
			names = append(names, name)
		default:
			h.Set(name, value)
		}
	})
	h.Set(HeaderTopic, m.Topic)
	if len(names) > 0 {
		slices.Sort(names)
		h.Set(HeaderNames, strings.Join(names, " "))
	}
	return nil
}

// checkRaw refuses for good a message whose headers raw mode would change
// or that would change the request: a header name HTTP acts on or that the
// wire format or CloudEvents sets, a value HTTP does not carry unchanged.
// The error names the first problem in a fixed order: the headers by name
// (bytewise), then the topic, key and type.
func (p *Publisher) checkRaw(m *courier.Message) error {
	for _, k := range slices.Sorted(maps.Keys(m.Headers)) { // bytewise, so the error names the same header every time
		v := m.Headers[k]
		if err := courier.CheckHeaderName(k); err != nil {
			return broker.Rejected(fmt.Errorf("webhook: header %q cannot be sent: %w", k, err))
		}
		switch {
		case p.cfg.CloudEvents != nil && cloudevents.Written(cloudevents.PrefixHTTP, k):
			return broker.Rejected(fmt.Errorf("webhook: header %q is a CloudEvents attribute, which the publisher sets (PublisherConfig.CloudEvents): rename the message's header", k))
		case !validValue(v):
			return broker.Rejected(fmt.Errorf("webhook: the value of header %q has control characters or white space at an end, which HTTP does not carry unchanged", k))
		}
	}
	for _, f := range [...]struct{ name, v string }{{HeaderTopic, m.Topic}, {HeaderKey, m.Key}, {HeaderType, m.Type}} {
		if name, v := f.name, f.v; !validValue(v) {
			return broker.Rejected(fmt.Errorf("webhook: the message's %s %q has control characters or white space at an end, which HTTP does not carry unchanged", strings.TrimPrefix(name, "Courier-"), v))
		}
	}
	return nil
}

// do sends req with the per-request timeout and classifies the answer.
func (p *Publisher) do(ctx context.Context, ep *endpoint, req *http.Request, m *courier.Message) error {
	rctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	where := ep.where
	resp, err := p.client.Do(req.WithContext(rctx))
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		ue.URL = where // it quotes the URL, tokens and all
	}
	if err != nil {
		if ctx.Err() != nil {
			return broker.Unavailable(fmt.Errorf("webhook: POST %s: %w (%w)", where, errCallerGone, ctx.Err()))
		}
		if rctx.Err() != nil {
			return broker.Unavailable(fmt.Errorf("webhook: POST %s: no answer within %s", where, p.cfg.Timeout))
		}
		return broker.Unavailable(fmt.Errorf("webhook: POST %s: %w", where, err))
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	_ = resp.Body.Close()
	return p.classify(ep, resp, m, answerDetail(resp.Header.Get("Content-Type"), body))
}

// answerDetail is what an error answer's body says: a problem+json body's
// title and detail, else the start of the body.
func answerDetail(contentType string, body []byte) string {
	if strings.HasPrefix(contentType, "application/problem+json") {
		var pr struct{ Title, Detail string }
		if json.Unmarshal(body, &pr) == nil && (pr.Title != "" || pr.Detail != "") {
			return strings.TrimSuffix(pr.Title+": "+pr.Detail, ": ")
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// statusError is an HTTP answer other than 2xx.
type statusError struct {
	url    string
	status string
	code   int
	detail string
	fix    string
}

func (e *statusError) Error() string {
	s := fmt.Sprintf("webhook: POST %s: %s", e.url, e.status)
	if e.detail != "" {
		s += fmt.Sprintf(" (the endpoint says: %s)", strings.ToValidUTF8(e.detail, "?"))
	}
	if e.fix != "" {
		s += ": " + e.fix
	}
	return s
}

// retryAfterError carries the delay a Retry-After header or an open
// breaker asks for; it implements broker.RetryAfterError.
type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string             { return e.err.Error() }
func (e *retryAfterError) Unwrap() error             { return e.err }
func (e *retryAfterError) RetryAfter() time.Duration { return e.after }

// endpointFailure reports whether err counts against the endpoint's
// breaker: no answer, or an answer saying the endpoint is unwell.
func endpointFailure(err error) bool {
	if err == nil {
		return false
	}
	var se *statusError
	if errors.As(err, &se) {
		return se.code == http.StatusTooManyRequests || se.code >= 500
	}
	return errors.Is(err, broker.ErrUnavailable)
}

func (p *Publisher) classify(ep *endpoint, resp *http.Response, m *courier.Message, detail string) error {
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	se := &statusError{url: ep.where, status: resp.Status, code: code, detail: detail}
	switch {
	case code == http.StatusTooManyRequests, code == http.StatusBadGateway,
		code == http.StatusServiceUnavailable, code == http.StatusGatewayTimeout:
		se.fix = "the endpoint is unavailable; retrying without counting"
		if after, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			after = min(after, p.cfg.MaxRetryAfter)
			ep.mu.Lock()
			if until := time.Now().Add(after); until.After(ep.until) {
				ep.until = until
			}
			ep.mu.Unlock()
			se.fix = fmt.Sprintf("the endpoint asked to wait %s (Retry-After)", after)
			return broker.Unavailable(&retryAfterError{err: se, after: after})
		}
		return broker.Unavailable(se)
	case code == http.StatusGone:
		se.fix = fmt.Sprintf("the endpoint refuses message %s for good (410 Gone); it becomes a dead letter", m.ID)
		return broker.Rejected(se)
	case code >= 300 && code < 400:
		se.fix = fmt.Sprintf("redirects are not followed: point topic %q at the final URL (Location: %q)", m.Topic, resp.Header.Get("Location"))
	case code == http.StatusRequestEntityTooLarge:
		se.fix = fmt.Sprintf("the payload of %d bytes is too large for the endpoint: shrink it or raise the endpoint's limit", len(m.Payload))
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		se.fix = "check that the endpoint knows one of the publisher's secrets and that the clocks agree"
	case code == http.StatusNotFound:
		se.fix = fmt.Sprintf("check the endpoint URL of topic %q", m.Topic)
	}
	return se
}

// parseRetryAfter reads a Retry-After value: delay seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return 0, false
		}
		return time.Duration(min(s, int64(365*24*3600))) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}
