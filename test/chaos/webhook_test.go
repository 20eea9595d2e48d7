package chaos

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/webhook"
	"github.com/courier-go/courier/internal/testenv"
)

// webhookSecret signs the relays' requests (the Standard Webhooks
// specification's example secret).
const webhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// What the faulty endpoint does with a request.
const (
	answered     = "answered by the handler"
	unavailable  = "503 with Retry-After: 1"
	stallBefore  = "stalled past the publish timeout, never handled"
	stallAfter   = "applied, then the answer stalled past the publish timeout"
	resetBefore  = "connection reset before the handler"
	resetAfter   = "applied, then the connection reset"
	webhookLease = 6 * time.Second
	// webhookStall outlasts the relays' publish timeout (half their
	// lease), which ends their requests.
	webhookStall = webhookLease/2 + time.Second
)

// faultModes are the endpoint's faults, each on for a while, and what
// it does to the requests meanwhile (taking turns).
var faultModes = []struct {
	name     string
	outcomes []string
}{
	{"answers 503 with Retry-After", []string{unavailable}},
	{"stalls past the publish timeout", []string{stallBefore, stallAfter}},
	{"resets connections", []string{resetBefore, resetAfter}},
	{"all of these at once", []string{unavailable, stallBefore, stallAfter, resetBefore, resetAfter}},
}

// faultyEndpoint is a webhook endpoint that works, except while a fault
// mode is on: then it does to each request one of the mode's outcomes
// instead, in turn, some after the handler applied the message.
type faultyEndpoint struct {
	h    *webhook.Handler
	quit chan struct{} // ends the stalls

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
		e.stall()
		w.WriteHeader(http.StatusServiceUnavailable) // to nobody: the sender gave up
	case stallAfter:
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, r)
		e.stall()
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

func (e *faultyEndpoint) stall() {
	select {
	case <-time.After(webhookStall):
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

// Courier relay processes publish to a webhook endpoint (a real HTTP
// server in front of a webhook.Handler that feeds the inbox consumer)
// which, for a while each, answers 503 with Retry-After, stalls past the
// relays' publish timeout, resets connections (before its handler and
// after the handler applied the message) and all of these at once, then
// recovers. Relays are SIGKILLed now and then meanwhile, so that fresh
// ones, whose circuit breakers are closed, meet every fault. Every message
// is applied once, each key's in the order written, and none becomes a dead
// letter (--max-attempts 3: an unavailable endpoint never counts).
func TestWebhookEndpointFaults(t *testing.T) {
	s := transportSettings()
	h, err := webhook.NewHandler(webhook.HandlerConfig{VerifierConfig: webhook.VerifierConfig{Secrets: []string{webhookSecret}},
		Wait: webhookLease / 3})
	testenv.Must(t, err, "handler")
	e := &faultyEndpoint{h: h, quit: make(chan struct{}), served: map[string]int{}}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(e.quit) })
	tgt := target{name: "webhook", url: srv.URL + "/courier", env: []string{"COURIER_WEBHOOK_SECRET=" + webhookSecret},
		lease: webhookLease, concurrency: 16,
		subscribe: func(context.Context) (broker.Subscriber, error) { return h, nil }}
	rr := startRelays(t, tgt, s)

	until := time.Now().Add(s.chaosFor)
	var kills sync.WaitGroup
	kills.Go(func() { rr.killRelays(until, 2) })
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
