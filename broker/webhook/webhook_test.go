package webhook_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/webhook"
)

func newSecret(t testing.TB) string {
	t.Helper()
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return webhook.SecretPrefix + base64.StdEncoding.EncodeToString(k)
}

func newPublisher(t testing.TB, cfg webhook.PublisherConfig) *webhook.Publisher {
	t.Helper()
	if cfg.Secrets == nil {
		cfg.Secrets = []string{newSecret(t)}
	}
	p, err := webhook.NewPublisher(cfg)
	if err != nil {
		t.Fatalf("publisher: %v", err)
	}
	return p
}

func publishOne(t testing.TB, p *webhook.Publisher, m courier.Message) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := p.Publish(ctx, []courier.Message{m})
	if len(errs) != 1 {
		t.Fatalf("Publish returned %d errors for 1 message", len(errs))
	}
	return errs[0]
}

func msg(key string) courier.Message {
	return courier.NewMessage("orders", key, "OrderPlaced", []byte(`{"n":1}`), courier.WithContentType(courier.ContentTypeJSON))
}

// verifying returns a server that verifies with secrets and answers 204, or
// the verification's status; it records the last status.
func verifying(t *testing.T, secrets ...string) (*httptest.Server, *atomic.Int32) {
	var last atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := webhook.Verify(r, secrets...); err != nil {
			var ve *webhook.VerifyError
			if !errors.As(err, &ve) {
				t.Errorf("Verify: %v is not a *VerifyError", err)
				return
			}
			last.Store(int32(ve.Status))
			http.Error(w, ve.Error(), ve.Status)
			return
		}
		last.Store(204)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, &last
}

// Signatures verify, across a key rotation in either order, and a wrong
// secret is refused with 401 as a counted failure.
func TestSignatureRotation(t *testing.T) {
	oldS, newS, other := newSecret(t), newSecret(t), newSecret(t)
	cases := []struct {
		name      string
		sender    []string
		receiver  []string
		wantError bool
	}{
		{"same secret", []string{oldS}, []string{oldS}, false},
		{"receiver knows both, sender still old", []string{oldS}, []string{newS, oldS}, false},
		{"sender signs with both, receiver still old", []string{newS, oldS}, []string{oldS}, false},
		{"sender new only, receiver new", []string{newS}, []string{newS}, false},
		{"wrong secret", []string{other}, []string{oldS, newS}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, last := verifying(t, tc.receiver...)
			p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: srv.URL, Secrets: tc.sender})
			err := publishOne(t, p, msg("k"))
			if !tc.wantError {
				if err != nil || last.Load() != 204 {
					t.Fatalf("publish: %v (status %d); want it verified", err, last.Load())
				}
				return
			}
			if err == nil || errors.Is(err, broker.ErrUnavailable) || errors.Is(err, broker.ErrRejected) || last.Load() != 401 {
				t.Fatalf("publish with a wrong secret: %v (status %d); want a counted 401", err, last.Load())
			}
			if !strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q does not point at the secrets", err)
			}
		})
	}
}

// Verify refuses a changed body, a missing signature and a timestamp out of
// tolerance with 4xx and a message naming the problem.
func TestVerifyRefuses(t *testing.T) {
	secret := newSecret(t)
	var got *http.Request
	var body string
	capture := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		b, _ := io.ReadAll(r.Body)
		body = string(b)
		w.WriteHeader(200)
	}))
	defer capture.Close()
	p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: capture.URL, Secrets: []string{secret}})
	if err := publishOne(t, p, msg("k")); err != nil {
		t.Fatal(err)
	}
	replay := func(mutate func(h http.Header) string) error {
		h := got.Header.Clone()
		b := mutate(h)
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(b))
		r.Header = h
		_, err := webhook.Verify(r, secret)
		return err
	}
	if err := replay(func(http.Header) string { return body }); err != nil {
		t.Fatalf("the request as sent: %v", err)
	}
	cases := []struct {
		name   string
		mutate func(h http.Header) string
		status int
		says   string
	}{
		{"changed body", func(http.Header) string { return body + " " }, 401, "signature"},
		{"no signature", func(h http.Header) string { h.Del(webhook.HeaderSignature); return body }, 400, "webhook-signature"},
		{"old timestamp", func(h http.Header) string {
			h.Set(webhook.HeaderTimestamp, "1000000000")
			return body
		}, 400, "tolerance"},
		{"future timestamp", func(h http.Header) string {
			h.Set(webhook.HeaderTimestamp, "99999999999")
			return body
		}, 400, "tolerance"},
		{"bad timestamp", func(h http.Header) string { h.Set(webhook.HeaderTimestamp, "yesterday"); return body }, 400, "timestamp"},
		{"signed timestamp", func(h http.Header) string {
			h.Set(webhook.HeaderTimestamp, "+"+h.Get(webhook.HeaderTimestamp))
			return body
		}, 400, "digits"},
		{"id with a full stop", func(h http.Header) string { h.Set(webhook.HeaderID, "a.1"); return body }, 400, "full stop"},
		{"more signatures than looked at", func(h http.Header) string {
			h.Set(webhook.HeaderSignature, strings.Repeat("v1,AAAA ", 16)+h.Get(webhook.HeaderSignature))
			return body
		}, 401, "signature"},
	}
	for _, tc := range cases {
		err := replay(tc.mutate)
		var ve *webhook.VerifyError
		if !errors.As(err, &ve) || ve.Status != tc.status || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v; want status %d mentioning %q", tc.name, err, tc.status, tc.says)
		}
	}
}

// Each class of answer is classified as the package documents.
func TestStatusClasses(t *testing.T) {
	date := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	cases := []struct {
		status     int
		retryAfter string
		want       string // ok, unavailable, rejected, counted
		after      time.Duration
		says       string
	}{
		{200, "", "ok", 0, ""},
		{202, "", "ok", 0, ""},
		{204, "", "ok", 0, ""},
		{301, "", "counted", 0, "https://elsewhere.example/hook"},
		{307, "", "counted", 0, "redirects are not followed"},
		{400, "", "counted", 0, "400"},
		{404, "", "counted", 0, "endpoint URL"},
		{410, "", "rejected", 0, "410"},
		{413, "", "counted", 0, "too large"},
		{429, "7", "unavailable", 7 * time.Second, "Retry-After"},
		{429, date, "unavailable", 90 * time.Second, "Retry-After"},
		{500, "", "counted", 0, "500"},
		{501, "", "counted", 0, "501"},
		{502, "", "unavailable", -1, "502"},
		{503, "3", "unavailable", 3 * time.Second, "503"},
		{504, "", "unavailable", -1, "504"},
	}
	for _, tc := range cases {
		t.Run(http.StatusText(tc.status)+tc.retryAfter, func(t *testing.T) {
			var hits atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				if tc.status >= 300 && tc.status < 400 {
					w.Header().Set("Location", "https://elsewhere.example/hook")
				}
				w.WriteHeader(tc.status)
			}))
			defer srv.Close()
			p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: srv.URL})
			err := publishOne(t, p, msg("k"))
			unavailable, rejected := errors.Is(err, broker.ErrUnavailable), errors.Is(err, broker.ErrRejected)
			got := "counted"
			switch {
			case err == nil:
				got = "ok"
			case unavailable:
				got = "unavailable"
			case rejected:
				got = "rejected"
			}
			if got != tc.want || (unavailable && rejected) {
				t.Fatalf("status %d: %v; want %s", tc.status, err, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), tc.says) {
				t.Errorf("status %d: %q does not say %q", tc.status, err, tc.says)
			}
			after, ok := broker.RetryAfter(err)
			switch {
			case tc.after > 0 && (!ok || after < tc.after-2*time.Second || after > tc.after):
				t.Errorf("status %d, Retry-After %q: RetryAfter %s (%v), want about %s", tc.status, tc.retryAfter, after, ok, tc.after)
			case tc.after <= 0 && ok:
				t.Errorf("status %d without Retry-After: RetryAfter %s", tc.status, after)
			}
			if tc.after > 0 { // the endpoint is held back: no request
				err := publishOne(t, p, msg("k2"))
				if !errors.Is(err, broker.ErrUnavailable) || hits.Load() != 1 {
					t.Errorf("publish during Retry-After: %v after %d requests; want ErrUnavailable without a request", err, hits.Load())
				}
			}
		})
	}
}

// A server that does not answer in time, one that resets the connection and
// one that is not listening are outages.
func TestNoAnswer(t *testing.T) {
	stall := make(chan struct{})
	stalled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stall:
		case <-r.Context().Done():
		}
	}))
	defer stalled.Close()
	defer close(stall)
	reset := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_ = conn.Close()
	}))
	defer reset.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	for name, u := range map[string]string{"stalled": stalled.URL, "reset": reset.URL, "closed": closed.URL} {
		t.Run(name, func(t *testing.T) {
			p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: u, Timeout: 300 * time.Millisecond})
			start := time.Now()
			err := publishOne(t, p, msg("k"))
			if !errors.Is(err, broker.ErrUnavailable) || errors.Is(err, broker.ErrRejected) {
				t.Fatalf("%s: %v; want ErrUnavailable", name, err)
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("%s: took %s with a 300ms timeout", name, took)
			}
			t.Logf("%s: %v", name, err)
		})
	}
}

// The breaker opens after Failures consecutive failures: the next publish
// makes no request; after OpenFor one probe goes through and closes it.
func TestBreaker(t *testing.T) {
	var hits atomic.Int32
	var healthy atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if !healthy.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	const openFor = 400 * time.Millisecond
	p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: srv.URL, Breaker: webhook.BreakerConfig{Failures: 3, OpenFor: openFor}})
	for i := range 3 {
		if err := publishOne(t, p, msg("k")); !errors.Is(err, broker.ErrUnavailable) {
			t.Fatalf("publish %d to a failing endpoint: %v", i, err)
		}
	}
	err := publishOne(t, p, msg("k"))
	if !errors.Is(err, broker.ErrUnavailable) || hits.Load() != 3 {
		t.Fatalf("publish with the breaker open: %v after %d requests; want ErrUnavailable after 3", err, hits.Load())
	}
	if after, ok := broker.RetryAfter(err); !ok || after <= 0 || after > openFor {
		t.Errorf("open breaker: RetryAfter %s (%v), want up to %s", after, ok, openFor)
	}
	t.Logf("open: %v", err)
	healthy.Store(true)
	time.Sleep(openFor + 100*time.Millisecond)
	for i := range 3 {
		if err := publishOne(t, p, msg("k")); err != nil {
			t.Fatalf("publish %d after OpenFor to a healthy endpoint: %v", i, err)
		}
	}
	if hits.Load() != 6 {
		t.Fatalf("%d requests, want 6", hits.Load())
	}
}

// A 4xx answer says the endpoint is up: it never opens the breaker.
func TestBreakerIgnoresMessageFailures(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusUnprocessableEntity)
	}))
	defer srv.Close()
	p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: srv.URL, Breaker: webhook.BreakerConfig{Failures: 2}})
	for range 5 {
		if err := publishOne(t, p, msg("k")); err == nil || errors.Is(err, broker.ErrUnavailable) {
			t.Fatalf("422: %v; want a counted failure", err)
		}
	}
	if hits.Load() != 5 {
		t.Fatalf("%d requests for 5 publishes", hits.Load())
	}
}

// Messages of one key go one at a time in order; after a failure the rest
// of the key waits, while other keys go on.
func TestPerKeyStopAndWait(t *testing.T) {
	var inFlight, maxPerKey atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := envelopeOf(t, r)["key"]
		if key == "bad" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if key == "one" {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			if n > maxPerKey.Load() {
				maxPerKey.Store(n)
			}
			time.Sleep(5 * time.Millisecond)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: srv.URL})
	msgs := []courier.Message{msg("one"), msg("bad"), msg("one"), msg("bad"), msg("other"), msg("one")}
	errs := p.Publish(context.Background(), msgs)
	if errs[0] != nil || errs[2] != nil || errs[4] != nil || errs[5] != nil {
		t.Fatalf("errors %v; want the keys other than bad published", errs)
	}
	if errs[1] == nil || errors.Is(errs[1], broker.ErrUnavailable) {
		t.Fatalf("first bad: %v; want a counted failure", errs[1])
	}
	if !errors.Is(errs[3], broker.ErrUnavailable) {
		t.Fatalf("second bad: %v; want ErrUnavailable (it waits for the first)", errs[3])
	}
	if maxPerKey.Load() != 1 {
		t.Fatalf("%d requests of one key in flight at once", maxPerKey.Load())
	}
}

// The publisher keeps a key's order when handed a key's run at once
// (broker.OrderKeeper): a message refused for good (410 Gone) is a dead
// letter that holds nothing back, so the key's next message is sent after
// it; one that failed otherwise holds the rest of the run back unsent.
func TestPipelinedRunAfterAFailure(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		env := envelopeOf(t, r)
		data, _ := json.Marshal(env["data"])
		mu.Lock()
		got = append(got, string(data))
		mu.Unlock()
		switch string(data) {
		case `{"n":2}`:
			w.WriteHeader(http.StatusGone)
		case `{"n":5}`:
			w.WriteHeader(http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer srv.Close()
	p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: srv.URL, Breaker: webhook.BreakerConfig{Disabled: true}})
	if !broker.KeepsKeyOrder(p) {
		t.Fatal("the webhook publisher does not keep a key's order when pipelined")
	}
	var run []courier.Message
	for n := 1; n <= 6; n++ {
		run = append(run, courier.NewMessage("orders", "k", "T", fmt.Appendf(nil, `{"n":%d}`, n), courier.WithContentType(courier.ContentTypeJSON)))
	}
	errs := p.Publish(context.Background(), run)
	for i, err := range errs {
		switch n := i + 1; {
		case n == 2 && !broker.Permanent(err):
			t.Errorf("message 2 (410 Gone): %v; want a refusal for good", err)
		case n == 5 && (err == nil || errors.Is(err, broker.ErrUnavailable)):
			t.Errorf("message 5 (500): %v; want a counted failure", err)
		case n == 6 && !errors.Is(err, broker.ErrUnavailable):
			t.Errorf("message 6, after the failed 5: %v; want it held back (ErrUnavailable)", err)
		case n != 2 && n < 5 && err != nil:
			t.Errorf("message %d: %v", n, err)
		}
	}
	want := []string{`{"n":1}`, `{"n":2}`, `{"n":3}`, `{"n":4}`, `{"n":5}`}
	if !slices.Equal(got, want) {
		t.Fatalf("the endpoint got %v, want %v", got, want)
	}
}

// In raw mode, where a message's headers become request headers, a
// header HTTP acts on or cannot carry unchanged is refused for good,
// naming the header, and no request is sent.
func TestUnsendableHeaders(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1); w.WriteHeader(200) }))
	defer srv.Close()
	p := newPublisher(t, webhook.PublisherConfig{DefaultEndpoint: srv.URL, Body: webhook.BodyRaw})
	for _, h := range []struct{ name, value string }{
		{"bad name", "v"}, {"X-Line", "a\nb"}, {"X-Padded", " v "},
		{"Courier-Key", "v"}, {"Authorization", "Bearer stolen"}, {"Proxy-Authorization", "Basic eDp5"},
		{"Cookie", "session=1"}, {"Set-Cookie", "session=1"}, {"Host", "evil.example"}, {"Forwarded", "for=1.2.3.4"},
		{"X-Forwarded-For", "127.0.0.1"}, {"X-Forwarded-Host", "evil.example"}, {"Content-Encoding", "gzip"},
		{"Content-Length", "0"}, {"Transfer-Encoding", "chunked"}, {"Connection", "close"}, {"Upgrade", "websocket"},
		{"webhook-signature", "v1,AAAA"}, {"Webhook-Id", "other"},
	} {
		m := msg("k")
		m.SetHeader(h.name, h.value)
		err := publishOne(t, p, m)
		if !errors.Is(err, broker.ErrRejected) || !strings.Contains(err.Error(), h.name) {
			t.Errorf("header %s: %v; want ErrRejected naming it", h.name, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
	m := msg("k")
	m.SetHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if err := publishOne(t, p, m); err != nil || hits.Load() != 1 {
		t.Fatalf("an ordinary header: %v", err)
	}
}

// A topic without an endpoint is a counted failure naming the topic.
func TestNoEndpoint(t *testing.T) {
	p := newPublisher(t, webhook.PublisherConfig{Endpoints: map[string]string{"payments": "http://127.0.0.1:1/"}})
	err := publishOne(t, p, msg("k"))
	if err == nil || errors.Is(err, broker.ErrUnavailable) || !strings.Contains(err.Error(), `"orders"`) {
		t.Fatalf("topic without endpoint: %v", err)
	}
	if _, err := webhook.NewPublisher(webhook.PublisherConfig{Secrets: []string{newSecret(t)}, DefaultEndpoint: "ftp://x"}); err == nil {
		t.Fatal("an ftp:// endpoint was accepted")
	}
	if _, err := webhook.NewPublisher(webhook.PublisherConfig{Secrets: []string{"whsec_!!"}, DefaultEndpoint: "http://x"}); err == nil {
		t.Fatal("a secret that is not base64 was accepted")
	}
}

// envelopeOf reads the JSON envelope a request carries; string members
// only.
func envelopeOf(t testing.TB, r *http.Request) map[string]any {
	t.Helper()
	var env map[string]any
	if err := json.NewDecoder(r.Body).Decode(&env); err != nil {
		t.Errorf("request body: %v", err)
	}
	return env
}
