// Package health serves the health endpoints of a program that runs
// Courier: /healthz (the process is alive and serving), /readyz (the
// database and the broker are reachable, the relay's loop makes progress and
// the outbox's oldest pending message is young enough) and, when given,
// /metrics. `courier relay --metrics-addr` serves it; a program that embeds
// a relay or consumers mounts the same Handler on its own server:
//
//	col, err := metrics.New(metrics.Config{Outbox: metrics.StoreStats(db.Admin())})
//	if err != nil {
//		return err
//	}
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(col)
//	r, err := relay.New(st, pub, relay.Config{Observer: col.Relay()})
//	if err != nil {
//		return err
//	}
//	h, err := health.New(health.Config{
//		Relay:            r,
//		Database:         db,
//		OldestPendingAge: col.OldestPendingAge,
//		MaxOldestPending: 5 * time.Minute,
//		Metrics:          promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
//	})
//	if err != nil {
//		return err
//	}
//	g.Go(func() error { return http.ListenAndServe(":9464", h) }) // g: an errgroup.Group
//
// Every endpoint answers only requests whose Host header names localhost,
// a loopback address, the address the request came to, or a name of
// Config.AllowedHosts; others get 421 (DNS rebinding would let a web page
// read /metrics' topic and tenant names).
//
// /readyz answers 200 when every check passes and 503 otherwise, with a JSON
// body naming each check's verdict and, when there is a relay, its
// relay.State. The checks run concurrently, bounded by Config.Timeout, at
// most once per Config.CacheFor (a second by default): a flood of probes
// costs one ping of the database and one check of the broker per second,
// the probes that come while the checks run wait for them and share their
// answer, and those in the second after get the same answer. The outbox age
// is read through metrics.Collector, which queries the database at most once
// per its MinInterval however often /readyz and /metrics are asked.
package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/hostcheck"
	"github.com/courier-go/courier/relay"
)

// Config says what /readyz checks and what else the Handler serves. Every
// check is optional: a Handler with none is ready while it serves.
type Config struct {
	// Relay is the relay whose health /readyz reports (a *relay.Relay):
	// unhealthy by relay.State.Check(Grace), or stalled when no claim has
	// succeeded for longer than Stall while it is not pausing for the
	// broker. Nil: no relay check.
	Relay interface{ State() relay.State }
	// Grace is how long the relay's claims, broker or completions may fail
	// before it is not ready (relay.State.Check). Default DefaultGrace (1m).
	Grace time.Duration
	// Stall is the longest a running relay may go without a successful
	// claim. A relay claims at least every PollInterval while idle, and
	// while every batch slot is busy at most one LeaseDuration later.
	// Default Grace plus relay.DefaultLeaseDuration; set it to Grace plus
	// your relay's LeaseDuration.
	Stall time.Duration
	// Database, if set, is pinged: a store.Database (a dialect's
	// Driver, such as sqlite.NewDriver(db)) and *pgxpool.Pool have Ping.
	Database interface {
		Ping(ctx context.Context) error
	}
	// Broker, if set, checks the connection to the broker, for example
	// that a NATS connection's status is CONNECTED. The relay's own view
	// of the broker (State.BrokerDown) is part of the relay check.
	Broker func(ctx context.Context) error
	// OldestPendingAge reads how long the outbox's oldest pending message
	// has waited: metrics.Collector.OldestPendingAge, which bounds how
	// often it queries the database. Nil: no outbox check.
	OldestPendingAge func(ctx context.Context) (time.Duration, error)
	// MaxOldestPending makes the program not ready once the oldest pending
	// message has waited longer. 0: the age is not checked, whatever
	// OldestPendingAge says.
	MaxOldestPending time.Duration
	// Checks are further readiness checks, by name.
	Checks map[string]func(ctx context.Context) error
	// StatusChecks are further readiness checks, by name, that say what
	// they found: a check that passes has its status as its verdict in
	// the body instead of "ok". A CDC relay's Ready is one (it says
	// whether the relay reads its slot or waits as a standby).
	StatusChecks map[string]func(ctx context.Context) (status string, err error)
	// Timeout bounds the checks of one /readyz request. Default
	// DefaultTimeout (5s).
	Timeout time.Duration
	// CacheFor is how long one round of checks answers /readyz (and
	// Ready): however many probes come, the database is pinged and the
	// broker checked at most once per CacheFor, and probes that come while
	// a round runs wait for it and share its answer. Default
	// DefaultCacheFor (1s); negative: no answer is reused once its round
	// has ended (callers during a round still share it).
	CacheFor time.Duration
	// Clock is the time CacheFor is measured with. Default: the real
	// clock.
	Clock courier.Clock
	// Metrics, if set, is served at /metrics:
	// promhttp.HandlerFor(registry, promhttp.HandlerOpts{}).
	Metrics http.Handler
	// AllowedHosts are the host names, besides localhost, loopback
	// addresses and the address a request came to (which probes and
	// scrapes by address send), that a request's Host header may name:
	// the names a proxy, a load balancer or a Service forwards, such as
	// "courier-relay.monitoring.svc" (a port is ignored). Any other name
	// is refused with 421 Misdirected Request on every endpoint, since it
	// may be one a hostile web page made resolve to the server's address
	// (DNS rebinding) to read /metrics' topic and tenant names. Default
	// none.
	AllowedHosts []string
}

// The defaults of Config's zero fields.
const (
	DefaultGrace    = time.Minute
	DefaultTimeout  = 5 * time.Second
	DefaultCacheFor = time.Second
)

func (c *Config) setDefaults() {
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.Stall == 0 {
		c.Stall = c.Grace + relay.DefaultLeaseDuration
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.CacheFor == 0 {
		c.CacheFor = DefaultCacheFor
	}
}

func (c *Config) validate() error {
	switch {
	case c.Grace < 0:
		return fmt.Errorf("health: Config.Grace is %s: use 0 or more", c.Grace)
	case c.Stall < 0:
		return fmt.Errorf("health: Config.Stall is %s: use more than 0", c.Stall)
	case c.Timeout < 0:
		return fmt.Errorf("health: Config.Timeout is %s: use more than 0", c.Timeout)
	case c.MaxOldestPending < 0:
		return fmt.Errorf("health: Config.MaxOldestPending is %s: use 0 (not checked) or more", c.MaxOldestPending)
	case c.MaxOldestPending > 0 && c.OldestPendingAge == nil:
		return errors.New("health: Config.MaxOldestPending is set but OldestPendingAge is nil: set it to a metrics.Collector's OldestPendingAge")
	}
	for name, f := range c.Checks {
		if name == "" || f == nil {
			return fmt.Errorf("health: Config.Checks[%q]: give every check a name and a function", name)
		}
	}
	for name, f := range c.StatusChecks {
		if name == "" || f == nil {
			return fmt.Errorf("health: Config.StatusChecks[%q]: give every check a name and a function", name)
		}
		if _, ok := c.Checks[name]; ok {
			return fmt.Errorf("health: Config.StatusChecks[%q]: Config.Checks has a check of that name already: give it another", name)
		}
	}
	_, err := hostcheck.New(c.AllowedHosts, "health: Config.AllowedHosts")
	return err
}

// Validate reports whether New would accept c: nil, or an error naming the
// field and the fix. Zero fields take their defaults first, as in New.
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}

// Handler serves /healthz, /readyz and, when configured, /metrics.
type Handler struct {
	cfg    Config
	checks map[string]func(ctx context.Context) (string, error)
	hosts  hostcheck.Hosts // the Host headers answered
	mux    *http.ServeMux

	round singleflight.Group // the round of checks in flight, shared
	mu    sync.Mutex
	last  Report    // the last round's answer
	at    time.Time // when the last round started; zero before the first
}

// New returns the Handler of cfg. It fails when the configuration is
// invalid, naming the field.
func New(cfg Config) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	hosts, err := hostcheck.New(cfg.AllowedHosts, "health: Config.AllowedHosts")
	if err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, checks: map[string]func(context.Context) (string, error){}, hosts: hosts}
	check := func(name string, f func(context.Context) error) {
		h.checks[name] = func(ctx context.Context) (string, error) { return "ok", f(ctx) }
	}
	for name, f := range cfg.Checks {
		check(name, f)
	}
	for name, f := range cfg.StatusChecks {
		h.checks[name] = f
	}
	if cfg.Database != nil {
		check("database", cfg.Database.Ping)
	}
	if cfg.Broker != nil {
		check("broker", cfg.Broker)
	}
	if cfg.Relay != nil {
		check("relay", func(context.Context) error { return h.checkRelay(cfg.Relay.State()) })
	}
	if cfg.OldestPendingAge != nil && cfg.MaxOldestPending > 0 {
		check("outbox", h.checkOutbox)
	}
	h.mux = http.NewServeMux()
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	h.mux.HandleFunc("GET /readyz", h.serveReady)
	if cfg.Metrics != nil {
		h.mux.Handle("GET /metrics", cfg.Metrics)
	}
	return h, nil
}

// ServeHTTP implements http.Handler: a request naming a host the Handler
// does not answer (see Config.AllowedHosts) gets 421, whatever its path.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.hosts.Allow(r) {
		hostcheck.Refuse(w, "These endpoints answer requests addressed to localhost, to the address they listen on, or to a name they were given "+
			"(courier relay --metrics-allowed-host, health.Config.AllowedHosts); this request named another host. "+
			"Scrape them by address, or add the name a proxy or Service forwards with --metrics-allowed-host.")
		return
	}
	h.mux.ServeHTTP(w, r)
}

// Report is the body of a /readyz answer.
type Report struct {
	// Ready is true when every check passed.
	Ready bool `json:"ready"`
	// Checks holds each check's verdict by name: "ok" (or what a passing
	// status check found) or what is wrong.
	Checks map[string]string `json:"checks"`
	// Relay is the relay's state when there is a relay.
	Relay *relay.State `json:"relay,omitempty"`
}

// Ready reports the verdicts of every check. It answers with the last
// round's when that started less than Config.CacheFor ago; otherwise it
// runs a round, or waits for the one in flight and shares its answer. A
// round runs the checks concurrently; they get a context that ends after
// Config.Timeout (not when ctx ends: other callers may be waiting for the
// round), and must return when it does. A caller whose ctx ends first gets
// a report that is not ready.
func (h *Handler) Ready(ctx context.Context) Report {
	start := h.cfg.Clock.Now()
	if h.cfg.CacheFor > 0 {
		h.mu.Lock()
		last, at := h.last, h.at
		h.mu.Unlock()
		if !at.IsZero() && start.Sub(at) < h.cfg.CacheFor && !start.Before(at) {
			return last.clone()
		}
	}
	ch := h.round.DoChan("ready", func() (any, error) {
		rep := h.run(context.WithoutCancel(ctx))
		h.mu.Lock()
		if start.After(h.at) || h.at.IsZero() {
			h.last, h.at = rep, start
		}
		h.mu.Unlock()
		return rep, nil
	})
	select {
	case res := <-ch:
		return res.Val.(Report).clone()
	case <-ctx.Done():
		return Report{Checks: map[string]string{"readyz": fmt.Sprintf("the request ended before the checks answered: %v", ctx.Err())}}
	}
}

// clone returns a copy of r that its receiver may change.
func (r Report) clone() Report {
	r.Checks = maps.Clone(r.Checks)
	if r.Relay != nil {
		s := *r.Relay
		r.Relay = &s
	}
	return r
}

// run runs one round of every check, concurrently, and reports their
// verdicts.
func (h *Handler) run(ctx context.Context) Report {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	rep := Report{Ready: true, Checks: make(map[string]string, len(h.checks))}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, f := range h.checks {
		wg.Go(func() {
			status, err := f(ctx)
			if err != nil && ctx.Err() != nil {
				err = fmt.Errorf("no answer within %s: %w", h.cfg.Timeout, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				rep.Ready = false
				rep.Checks[name] = err.Error()
				return
			}
			if status == "" {
				status = "ok"
			}
			rep.Checks[name] = status
		})
	}
	wg.Wait()
	if h.cfg.Relay != nil {
		s := h.cfg.Relay.State()
		rep.Relay = &s
	}
	return rep
}

func (h *Handler) serveReady(w http.ResponseWriter, r *http.Request) {
	rep := h.Ready(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !rep.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(rep)
}

// checkRelay judges s: relay.State.Check, then progress.
func (h *Handler) checkRelay(s relay.State) error {
	if err := s.Check(h.cfg.Grace); err != nil {
		return err
	}
	last := s.LastClaim
	if last.IsZero() {
		last = s.Started
	}
	if s.PausedUntil.After(last) {
		last = s.PausedUntil // no claim is due before the pause ends
	}
	if idle := s.At.Sub(last); idle > h.cfg.Stall {
		return fmt.Errorf("%w: no claim has succeeded for %s (more than %s): the relay's loop is stuck or its batches never finish; look at its logs, and restart it",
			relay.ErrUnhealthy, idle.Round(time.Millisecond), h.cfg.Stall)
	}
	return nil
}

// checkOutbox compares the oldest pending message's age with
// MaxOldestPending.
func (h *Handler) checkOutbox(ctx context.Context) error {
	age, err := h.cfg.OldestPendingAge(ctx)
	if err != nil {
		return fmt.Errorf("cannot read the outbox's oldest pending age: %w", err)
	}
	if age > h.cfg.MaxOldestPending {
		return fmt.Errorf("the oldest pending message has waited %s, more than %s: messages are not getting out; check the relays (courier status, courier dlq)",
			age.Round(time.Millisecond), h.cfg.MaxOldestPending)
	}
	return nil
}

// Names returns the names of the checks /readyz runs, sorted.
func (h *Handler) Names() []string {
	names := make([]string, 0, len(h.checks))
	for n := range h.checks {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
