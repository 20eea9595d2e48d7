package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/courier-go/courier/broker/brokerurl"
	"github.com/courier-go/courier/health"
	"github.com/courier-go/courier/internal/hostcheck"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/relay/cdc"
	"github.com/courier-go/courier/store"
)

// observeFlags are the relay's flags for /metrics, /healthz and /readyz.
type observeFlags struct {
	MetricsAddr    string        `name:"metrics-addr" help:"Serve /metrics (Prometheus), /healthz and /readyz on this address, such as :9464 or 127.0.0.1:9464 (port 0: any free port, logged). Empty: not served." env:"COURIER_METRICS_ADDR"`
	StatsInterval  time.Duration `name:"stats-interval" help:"Query the outbox for the /metrics gauges and /readyz at most this often, however often they are asked." default:"10s" env:"COURIER_STATS_INTERVAL"`
	ReadyGrace     time.Duration `name:"ready-grace" help:"How long claims, the broker or recording outcomes may fail before /readyz answers 503." default:"1m" env:"COURIER_READY_GRACE"`
	ReadyMaxOldest time.Duration `name:"ready-max-oldest" help:"/readyz answers 503 once the oldest pending message has waited longer than this (0: not checked)." default:"0s" env:"COURIER_READY_MAX_OLDEST"`
	MaxTopics      int           `name:"metrics-max-topics" help:"Topics with series of their own in /metrics: the first this many seen; the others are summed under topic=\"other topics\"." default:"100" env:"COURIER_METRICS_MAX_TOPICS"`
	AllowedHost    []string      `name:"metrics-allowed-host" placeholder:"NAME" help:"Host name, besides localhost and the address --metrics-addr listens on, that requests to /metrics, /healthz and /readyz may be addressed to: the name a proxy, a load balancer or a Service forwards. Repeatable, or comma-separated. Requests naming any other host are refused (421)." env:"COURIER_METRICS_ALLOWED_HOSTS"`
}

// check validates the flags.
func (f observeFlags) check() error {
	switch {
	case f.MetricsAddr == "":
		return nil
	case f.StatsInterval <= 0:
		return fmt.Errorf("--stats-interval is %s: use more than 0, such as 10s", f.StatsInterval)
	case f.ReadyGrace < 0:
		return fmt.Errorf("--ready-grace is %s: use 0 or more, such as 1m", f.ReadyGrace)
	case f.ReadyMaxOldest < 0:
		return fmt.Errorf("--ready-max-oldest is %s: use 0 (not checked) or more, such as 5m", f.ReadyMaxOldest)
	case f.MaxTopics < 1:
		return fmt.Errorf("--metrics-max-topics is %d: use 1 or more, such as 100", f.MaxTopics)
	}
	if _, _, err := net.SplitHostPort(f.MetricsAddr); err != nil {
		return fmt.Errorf("--metrics-addr %q is not host:port: use :9464 (every interface) or 127.0.0.1:9464", f.MetricsAddr)
	}
	_, err := hostcheck.New(f.AllowedHost, "--metrics-allowed-host")
	return err
}

// observer serves the relay's metrics and health endpoints.
type observer struct {
	flags observeFlags
	col   *metrics.Collector
	ln    net.Listener
	// checks are further /readyz checks that say what they found (the
	// relay's continuous audit).
	checks map[string]func(context.Context) (string, error)
}

// listen prepares the endpoints when --metrics-addr is set: it listens
// at once, so a taken port fails before the relay starts, and returns the
// observer the relay reports to. The gauges come from ops's Status: the
// outbox per topic, sagas, idempotency keys and (PostgreSQL) the
// replication slots, and the keys consumers hold. Without --metrics-addr it returns nil.
func (f observeFlags) listen(ops store.Operations) (*observer, error) {
	if f.MetricsAddr == "" {
		return nil, nil
	}
	src := metrics.FromStatus(ops)
	col, err := metrics.New(metrics.Config{Outbox: src, Sagas: src, Keys: src, Slots: src, Scheduled: src, ConsumerHolds: src, MinInterval: f.StatsInterval, MaxTopics: f.MaxTopics})
	if err != nil {
		return nil, err
	}
	return f.listenWith(col)
}

// listenWith listens on --metrics-addr for the endpoints of col.
func (f observeFlags) listenWith(col *metrics.Collector) (*observer, error) {
	ln, err := net.Listen("tcp", f.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w; choose a free port, or 0 for any", err)
	}
	return &observer{flags: f, col: col, ln: ln}, nil
}

// serve serves the endpoints for r, on the database db and the broker b,
// until the returned function is called.
func (o *observer) serve(e *env, r *relay.Relay, cfg relay.Config, db store.Database, b *brokerurl.Broker) (stop func(), err error) {
	return o.start(e, health.Config{
		Relay:            r,
		Grace:            o.flags.ReadyGrace,
		Stall:            o.flags.ReadyGrace + cfg.LeaseDuration + cfg.PollInterval,
		Database:         db,
		OldestPendingAge: o.col.OldestPendingAge,
		MaxOldestPending: o.flags.ReadyMaxOldest,
	}, b)
}

// serveCDC serves the endpoints for the CDC relay r, on the database of
// pool and the broker b, until the returned function is called: /metrics
// adds r's counters to the gauges, and /readyz checks that r reads its
// slot or waits as a standby behind a relay that does (check "cdc").
func (o *observer) serveCDC(e *env, r *cdc.Relay, pool *pgxpool.Pool, b *brokerurl.Broker) (stop func(), err error) {
	return o.start(e, health.Config{
		Database:         pool,
		OldestPendingAge: o.col.OldestPendingAge,
		MaxOldestPending: o.flags.ReadyMaxOldest,
		StatusChecks:     map[string]func(context.Context) (string, error){"cdc": r.Ready},
	}, b, metrics.CDC(func() metrics.CDCStats {
		s := r.Stats()
		return metrics.CDCStats{Published: s.Published, Retried: s.Retried, DeadLettered: s.DeadLettered, Swept: s.Swept, Reading: s.Reading}
	}))
}

// start serves hcfg's checks, with /metrics from the Collector, the Go
// runtime's and the process's metrics and extra, on the listener, until
// the returned function is called. A broker b with a health check (NATS:
// its connection) adds it.
func (o *observer) start(e *env, hcfg health.Config, b *brokerurl.Broker, extra ...prometheus.Collector) (stop func(), err error) {
	hcfg.AllowedHosts = o.flags.AllowedHost
	for name, check := range o.checks {
		if hcfg.StatusChecks == nil {
			hcfg.StatusChecks = map[string]func(context.Context) (string, error){}
		}
		hcfg.StatusChecks[name] = check
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(o.col, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(extra...)
	hcfg.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	if check := b.HealthCheck(); check != nil {
		hcfg.Broker = check
	}
	h, err := health.New(hcfg)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(o.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error("metrics and health endpoints stopped", "error", err)
		}
	}()
	e.log.Info("serving /metrics, /healthz and /readyz", "addr", o.ln.Addr().String(), "checks", h.Names())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
