package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/courier-go/courier/broker/brokerurl"
	"github.com/courier-go/courier/health"
	"github.com/courier-go/courier/internal/waits"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/tenant"
)

// fleetFlags tune the relay of many tenants.
type fleetFlags struct {
	TenantsRefresh   time.Duration `name:"tenants-refresh" help:"With tenants: how often the relay reads the tenants again." default:"30s" env:"COURIER_TENANTS_REFRESH"`
	TenantsMaxOpen   int           `name:"tenants-max-open" help:"With tenants: how many tenants' databases are open at once, each with --concurrency connections (80 connections with the defaults); past that, idle tenants take turns." default:"40" env:"COURIER_TENANTS_MAX_OPEN"`
	TenantsIdleAfter time.Duration `name:"tenants-idle-after" help:"With tenants: how long a tenant finds nothing to publish before it gives its place to a tenant waiting for one." default:"1s" env:"COURIER_TENANTS_IDLE_AFTER"`
	TenantsHeartbeat time.Duration `name:"tenants-heartbeat" help:"With tenants and --database-url: how often the relay records that it is alive; the others take its tenants over three heartbeats after its last." default:"2s" env:"COURIER_TENANTS_HEARTBEAT"`
	TenantsTurn      time.Duration `name:"tenants-turn" help:"With tenants: how long a tenant, busy or not, keeps its place while others wait for one." default:"5s" env:"COURIER_TENANTS_TURN"`
	MaxTenants       int           `name:"metrics-max-tenants" help:"With tenants: tenants with series of their own in /metrics, the first this many seen; the others are summed under tenant=\"other tenants\"." default:"100" env:"COURIER_METRICS_MAX_TENANTS"`
}

// fleetConfig checks the tenant flags of the relay and returns the
// fleet's configuration (without its source, members and observers).
func (c *relayCmd) fleetConfig(cfg relay.Config) (tenant.Config, error) {
	switch {
	case c.Mode == "cdc":
		return tenant.Config{}, errors.New("--mode cdc reads one database's log: relay tenants with --mode poll")
	case c.Tenant != "":
		return tenant.Config{}, errors.New("--tenant picks one tenant for the other commands: the relay serves them all (leave it out)")
	case c.ListenURL != "":
		return tenant.Config{}, errors.New("--listen-url: tenants are polled, not woken (leave it out)")
	case c.Dashboard != "":
		return tenant.Config{}, errors.New("--dashboard serves one database beside the relay: run courier dashboard with the same tenant flags for every tenant's")
	case c.MaxTenants < 1:
		return tenant.Config{}, fmt.Errorf("--metrics-max-tenants is %d: use 1 or more, such as 100", c.MaxTenants)
	case c.TenantsMaxOpen < 1:
		return tenant.Config{}, fmt.Errorf("--tenants-max-open is %d: use 1 or more, such as 40", c.TenantsMaxOpen)
	case c.TenantsIdleAfter <= 0:
		return tenant.Config{}, fmt.Errorf("--tenants-idle-after is %s: use more than 0, such as 1s", c.TenantsIdleAfter)
	case c.TenantsTurn <= 0:
		return tenant.Config{}, fmt.Errorf("--tenants-turn is %s: use more than 0, such as 5s", c.TenantsTurn)
	case c.TenantsHeartbeat < 100*time.Millisecond:
		return tenant.Config{}, fmt.Errorf("--tenants-heartbeat is %s: use 100ms or more, such as 2s", c.TenantsHeartbeat)
	case c.TenantsRefresh < time.Second:
		return tenant.Config{}, fmt.Errorf("--tenants-refresh is %s: use 1s or more, such as 30s", c.TenantsRefresh)
	}
	fc := tenant.Config{Relay: cfg, Store: store.RelayConfig{KeepPublished: c.KeepPublished}, Refresh: c.TenantsRefresh,
		MaxOpen: c.TenantsMaxOpen, IdleAfter: c.TenantsIdleAfter, Turn: c.TenantsTurn, Heartbeat: c.TenantsHeartbeat}
	fc.Source = tenant.List() // checked for its settings only; Run gives the real one
	if err := fc.Validate(); err != nil {
		return tenant.Config{}, tenantFlagError(err)
	}
	return fc, nil
}

// runTenants relays the tenants' outboxes until the command's context
// ends. With --database-url, relays that share it share the tenants.
func (c *relayCmd) runTenants(e *env, cfg relay.Config) error {
	if err := c.checkTenants(); err != nil {
		return err
	}
	fc, err := c.fleetConfig(cfg)
	if err != nil {
		return err
	}
	fc.Logger = e.log
	src, closeSource, err := c.tenantSource(e.ctx)
	if err != nil {
		return err
	}
	defer closeSource()
	fc.Source = src
	var fleetDB *dburl.DB
	if c.DatabaseURL != "" {
		if fleetDB, err = dburl.Open(e.ctx, c.DatabaseURL, urlOptions); err != nil {
			return err
		}
		defer fleetDB.Close()
		if err := fleetDB.CheckSchema(e.ctx); err != nil {
			return fmt.Errorf("--database-url keeps the relays' heartbeats: %w", err)
		}
		fc.Members = fleetDB.Operations()
	}
	if c.Cleanup.Every > 0 {
		fc.OnOpen = c.tenantCleanup(e)
	}
	b, closeBroker, announceBroker, err := c.openBroker(e)
	if err != nil {
		return err
	}
	defer closeBroker()
	var col *metrics.Collector
	if c.MetricsAddr != "" {
		if col, err = metrics.New(metrics.Config{MaxTenants: c.MaxTenants}); err != nil {
			return err
		}
		fc.Observers = col.Tenant
	}
	f, err := tenant.New(b, fc)
	if err != nil {
		return tenantFlagError(err)
	}
	if col != nil {
		stop, err := c.serveFleet(e, f, col, fleetDB, b)
		if err != nil {
			return err
		}
		defer stop()
	}
	announceBroker()
	share := "every tenant (no --database-url: relays do not share them)"
	if fleetDB != nil {
		share = "its share of the tenants with the relays of " + fleetDB.String()
	}
	where := []any{"from", c.tenantsFlag(), "serving", share, "broker", b.String()}
	e.log.Info("relaying tenants", append(append(where, b.LogFields()...), "max_open", fc.MaxOpen)...)
	return f.Run(e.ctx)
}

// tenantCleanup runs the --cleanup- retentions on each tenant while its
// database is open, at most once per --cleanup-every per tenant.
func (c *relayCmd) tenantCleanup(e *env) func(ctx context.Context, t tenant.Tenant, d *dburl.DB) {
	var mu sync.Mutex
	last := map[string]time.Time{}
	return func(ctx context.Context, t tenant.Tenant, d *dburl.DB) {
		for {
			mu.Lock()
			wait := time.Until(last[t.Name].Add(c.Cleanup.Every))
			mu.Unlock()
			if wait > 0 {
				if !waits.Sleep(ctx, wait) {
					return
				}
				continue
			}
			rep, err := c.Cleanup.cleaner(e, d.Operations(), c.Cleanup.tables).RunOnce(ctx)
			if ctx.Err() != nil {
				return // the tenant's turn ended: the cleanup goes on at its next
			}
			if err != nil {
				e.log.Warn("cleanup failed", "tenant", t.Name, "error", err)
			} else {
				e.log.Debug("cleanup", "tenant", t.Name, "deleted", rep.Deleted)
			}
			mu.Lock()
			last[t.Name] = time.Now()
			mu.Unlock()
		}
	}
}

// serveFleet serves /metrics, /healthz and /readyz for the fleet: the
// relay metrics summed and per tenant, the fleet's gauges, and a
// readiness check that fails while the heartbeat does.
func (c *relayCmd) serveFleet(e *env, f *tenant.Fleet, col *metrics.Collector, fleetDB *dburl.DB, b *brokerurl.Broker) (stop func(), err error) {
	obs, err := c.observeFlags.listenWith(col)
	if err != nil {
		return nil, err
	}
	hcfg := health.Config{StatusChecks: map[string]func(context.Context) (string, error){"tenants": func(context.Context) (string, error) {
		st := f.Status()
		if st.MembersError != "" {
			return "", fmt.Errorf("heartbeat failing: %s", st.MembersError)
		}
		return fmt.Sprintf("%d tenants served (%d open, %d failing) of %d, %d entries rejected, %d relays", len(st.Served), st.Open, st.Failing(), st.Tenants,
			len(st.Rejected), max(len(st.Members), 1)), nil
	}}}
	if fleetDB != nil {
		hcfg.Database = fleetDB
	}
	stopServing, err := obs.start(e, hcfg, b, fleetCollector(f))
	if err != nil {
		_ = obs.ln.Close()
		return nil, err
	}
	return func() { stopServing(); _ = obs.ln.Close() }, nil
}

// fleetCollector reports the fleet's gauges, without a tenant label.
func fleetCollector(f *tenant.Fleet) prometheus.Collector {
	return fleetGauges{f: f,
		tenants:  prometheus.NewDesc("courier_fleet_tenants", "Tenants the relays' source gives.", nil, nil),
		served:   prometheus.NewDesc("courier_fleet_served_tenants", "Tenants this relay serves (its share).", nil, nil),
		open:     prometheus.NewDesc("courier_fleet_open_tenants", "Tenants whose database this relay has open now (at most --tenants-max-open).", nil, nil),
		failing:  prometheus.NewDesc("courier_fleet_failing_tenants", "Tenants served here whose database failed at their last try (courier status --tenants-… shows which).", nil, nil),
		rejected: prometheus.NewDesc("courier_fleet_rejected_tenants", "Entries of the tenants (a file's lines, a query's rows) that are not valid tenants and are not served: a name that is not valid or is given twice, a URL that does not parse (logged once each; courier status --tenants-… shows them).", nil, nil),
		members:  prometheus.NewDesc("courier_fleet_members", "Relays sharing the tenants, as the last heartbeat found them (1 without --database-url).", nil, nil),
	}
}

type fleetGauges struct {
	f                                                 *tenant.Fleet
	tenants, served, open, failing, rejected, members *prometheus.Desc
}

func (g fleetGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{g.tenants, g.served, g.open, g.failing, g.rejected, g.members} {
		ch <- d
	}
}

func (g fleetGauges) Collect(ch chan<- prometheus.Metric) {
	st := g.f.Status()
	for d, v := range map[*prometheus.Desc]int{g.tenants: st.Tenants, g.served: len(st.Served), g.open: st.Open, g.failing: st.Failing(), g.rejected: len(st.Rejected),
		g.members: max(len(st.Members), 1)} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
}

// tenantFlagError rewrites the fleet's field names in errors as the flags
// users set.
func tenantFlagError(err error) error {
	return flagError(errors.New(strings.NewReplacer(
		"tenant: Config.Refresh", "--tenants-refresh",
		"tenant: Config.MaxOpen", "--tenants-max-open",
		"tenant: Config.IdleAfter", "--tenants-idle-after",
		"tenant: Config.Turn", "--tenants-turn",
		"tenant: Config.Relay.", "relay: Config.",
	).Replace(err.Error())))
}
