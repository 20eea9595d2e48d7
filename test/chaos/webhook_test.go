package chaos

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/webhook"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/relay"
)

// webhookSecret signs the relays' requests (the Standard Webhooks
// specification's example secret).
const webhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// What the faulty endpoint does with a request.
const (
	answered    = "answered by the handler"
	unavailable = "503 with Retry-After: 1"
	stallBefore = "stalled past the sender's timeout, never handled"
	stallAfter  = "applied, then the answer stalled past the sender's timeout"
	resetBefore = "connection reset before the handler"
	resetAfter  = "applied, then the connection reset"
)

// Settings of the webhook relay processes (role webhook-relay): their
// requests time out after webhookTimeout, well within their publish
// timeout (half of webhookLease), and a breaker that opens stays open for
// webhookOpenFor.
const (
	webhookTimeout = time.Second
	webhookLease   = 4 * time.Second
	webhookOpenFor = time.Second
)

// faultModes are the endpoint's faults, each on for a while, and what
// it does to the requests meanwhile (taking turns).
var faultModes = []struct {
	name     string
	outcomes []string
}{
	{"answers 503 with Retry-After", []string{unavailable}},
	{"stalls past the sender's timeout", []string{stallBefore, stallAfter}},
	{"resets connections", []string{resetBefore, resetAfter}},
	{"all of these at once", []string{unavailable, stallBefore, stallAfter, resetBefore, resetAfter}},
}

// faultyEndpoint is a webhook endpoint that works, except while a fault
// mode is on: then it does to each request one of the mode's outcomes
// instead, in turn, some after the handler applied the message.
type faultyEndpoint struct {
	h     *webhook.Handler
	stall time.Duration // longer than the sender waits for an answer
	quit  chan struct{} // ends the stalls

	mu     sync.Mutex
	mode   int // index in faultModes + 1; 0: healthy
	turn   int
	served map[string]int // by outcome
}

func (e *faultyEndpoint) set(mode int) {
	e.mu.Lock()
	e.mode = mode
	e.mu.Unlock()
}

// outcome picks what to do with a request, and counts it.
func (e *faultyEndpoint) outcome() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	o := answered
	if e.mode > 0 {
		outs := faultModes[e.mode-1].outcomes
		o = outs[e.turn%len(outs)]
		e.turn++
	}
	e.served[o]++
	return o
}

// count returns how many requests met outcome o so far.
func (e *faultyEndpoint) count(o string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.served[o]
}

func (e *faultyEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch e.outcome() {
	case answered:
		e.h.ServeHTTP(w, r)
	case unavailable:
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
	case stallBefore:
		e.wait()
		w.WriteHeader(http.StatusServiceUnavailable) // to nobody: the sender gave up
	case stallAfter:
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, r)
		e.wait()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	case resetBefore:
		reset(w)
	case resetAfter:
		e.h.ServeHTTP(httptest.NewRecorder(), r)
		reset(w)
	}
}

// wait stalls the request.
func (e *faultyEndpoint) wait() {
	select {
	case <-time.After(e.stall):
	case <-e.quit:
	}
}

// reset closes the request's connection with a TCP RST.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// Relay processes publish to a webhook endpoint (a real HTTP server in
// front of a webhook.Handler that feeds the inbox consumer) which, for a
// while each, answers 503 with Retry-After, stalls past the sender's
// timeout, resets connections (before its handler, and after the handler
// applied the message) and all of these at once, then recovers; relays are
// SIGKILLed now and then meanwhile. Every message is applied once, each
// key's in the order written, and none becomes a dead letter (the relays
// count 3 failed attempts at most: an unavailable endpoint never counts).
//
// The relays are this test binary's (role webhook-relay), whose requests
// time out after a second and whose circuit breakers stay open for one.
// With -long the run is repeated with `courier relay`, whose webhook
// requests wait 10s and whose breakers stay open 30s (neither is a flag), so
// that its recovery takes a minute or so: the kills there also bring fresh
// relays, with closed breakers, to meet every fault.
func TestWebhookEndpointFaults(t *testing.T) {
	t.Parallel()
	t.Run("relay-role", func(t *testing.T) {
		webhookFaults(t, target{name: "webhook", role: webhookRelayRole, lease: webhookLease}, webhookTimeout+time.Second)
	})
	if testenv.Long() {
		t.Run("courier-relay", func(t *testing.T) {
			// The relay's publish timeout, half its lease, ends the requests.
			webhookFaults(t, target{name: "webhook", lease: 6 * time.Second}, 4*time.Second)
		})
	}
}

// webhookFaults runs the endpoint's faults on relays like tgt's (the
// endpoint and the consumer are filled in here); stall outlasts their
// wait for an answer.
func webhookFaults(t *testing.T, tgt target, stall time.Duration) {
	s := transportSettings()
	h, err := webhook.NewHandler(webhook.HandlerConfig{VerifierConfig: webhook.VerifierConfig{Secrets: []string{webhookSecret}},
		Wait: min(tgt.lease/3, webhookTimeout*8/10)})
	testenv.Must(t, err, "handler")
	e := &faultyEndpoint{h: h, stall: stall, quit: make(chan struct{}), served: map[string]int{}}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(e.quit) })
	tgt.url = srv.URL + "/courier"
	tgt.env = []string{"COURIER_WEBHOOK_SECRET=" + webhookSecret, envEndpoint + "=" + tgt.url}
	tgt.concurrency = 16
	tgt.subscribe = func(context.Context) (broker.Subscriber, error) { return h, nil }
	rr := startRelays(t, tgt, s)

	until := time.Now().Add(s.chaosFor)
	faulting, faultsOver := context.WithCancel(context.Background())
	defer faultsOver()
	var kills sync.WaitGroup
	kills.Go(func() { rr.killRelays(faulting, 2) })
	// Each mode stays on for 1.5s at least, until each of its outcomes met
	// a request, 5s at most; healthy for 1–2s in between. Every mode at
	// least once, then at random until the time is up.
	for round := 0; round < len(faultModes) || time.Now().Before(until); round++ {
		time.Sleep(time.Duration(1000+rand.IntN(1000)) * time.Millisecond)
		mode := round % len(faultModes)
		if round >= len(faultModes) {
			mode = rand.IntN(len(faultModes))
		}
		before := map[string]int{}
		for _, o := range faultModes[mode].outcomes {
			before[o] = e.count(o)
		}
		on := time.Now()
		e.set(mode + 1)
		for met := false; time.Since(on) < 5*time.Second && (!met || time.Since(on) < 1500*time.Millisecond); time.Sleep(50 * time.Millisecond) {
			met = true
			for o, n := range before {
				met = met && e.count(o) > n
			}
		}
		e.set(0)
		t.Logf("the endpoint %s for %s", faultModes[mode].name, time.Since(on).Round(100*time.Millisecond))
		rr.count("endpoint "+faultModes[mode].name, 1)
	}
	faultsOver()
	kills.Wait()
	e.mu.Lock()
	for o, n := range e.served {
		if o != answered {
			rr.count("requests "+o, n)
		}
	}
	e.mu.Unlock()
	for _, o := range []string{unavailable, stallBefore, stallAfter, resetBefore, resetAfter} {
		if e.count(o) == 0 {
			t.Errorf("no request met the endpoint's fault %q: the run shows nothing of it", o)
		}
	}
	rr.finish()
}

// webhookRelayRole is the role of the webhook relay processes.
const webhookRelayRole = "webhook-relay"

// envEndpoint is the webhook endpoint's URL (role webhook-relay).
const envEndpoint = "COURIER_CHAOS_ENDPOINT"

// runWebhookRelay relays the outbox of envDB to the webhook endpoint of
// envEndpoint, with short timeouts (see webhookTimeout).
func runWebhookRelay(ctx context.Context, log *slog.Logger) error {
	st, notifier, closeStore, err := openRelayStore(ctx, os.Getenv(envDB), log)
	if err != nil {
		return err
	}
	defer closeStore()
	pub, err := webhook.NewPublisher(webhook.PublisherConfig{DefaultEndpoint: os.Getenv(envEndpoint), Secrets: []string{webhookSecret},
		Timeout: webhookTimeout, Breaker: webhook.BreakerConfig{OpenFor: webhookOpenFor}})
	if err != nil {
		return err
	}
	cfg := relay.Config{
		BatchSize: 200, LeaseDuration: webhookLease, MaxAttempts: transportMaxAttempts,
		Backoff:      courier.Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Jitter: 0.2},
		PollInterval: 200 * time.Millisecond, Logger: log,
	}
	if notifier != nil {
		cfg.Notifier = notifier
	}
	r, err := relay.New(st, pub, cfg)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}
