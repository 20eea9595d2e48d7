package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/tenant"
)

// dashboardCmd serves the web dashboard until stopped.
type dashboardCmd struct {
	dbFlags
	Addr        string        `help:"Address to listen on. Any address but a loopback one (127.0.0.1, ::1, localhost) needs --token." default:"127.0.0.1:8080" env:"COURIER_DASHBOARD_ADDR"`
	Token       string        `help:"Secret that every page and action requires (log in with it, or send Authorization: Bearer TOKEN). Required off loopback. After 5 wrong tokens from one address, it may try once per 12 s (429 otherwise)." env:"COURIER_DASHBOARD_TOKEN"`
	AllowedHost []string      `name:"allowed-host" placeholder:"NAME" help:"Host name, besides localhost and the address it listens on, that requests may be addressed to: the name a proxy in front of the dashboard forwards. Repeatable, or comma-separated. Requests naming any other host are refused (421)." env:"COURIER_DASHBOARD_ALLOWED_HOSTS"`
	Retention   time.Duration `name:"inbox-retention" help:"The consumers' inbox marker retention (inbox.ConsumerConfig.Retention; default that default, 7 days): a parked message parked longer ago is replayed only when \"Replay anyway\" is ticked, since it may be applied twice. 0 or less: markers are never deleted." default:"168h" env:"COURIER_DASHBOARD_INBOX_RETENTION"`
	MaxOpen     int           `name:"tenants-max-open" help:"With tenants and no --tenant (the dashboard of every tenant): how many tenants' databases are open at once, each with at most 4 connections; the one used least recently is closed for another." default:"8" env:"COURIER_DASHBOARD_TENANTS_MAX_OPEN"`
}

// tenantConns bounds the connections of each tenant's database the
// dashboard of tenants opens.
const tenantConns = 4

// shutdownTimeout bounds how long the dashboard waits for requests in
// flight when it is stopped.
const shutdownTimeout = 5 * time.Second

// inboxRetention is Config.InboxRetention for --inbox-retention: 0 there
// means markers are never deleted, which the Config says with a negative
// value (its 0 is the default).
func (c *dashboardCmd) inboxRetention() time.Duration {
	if c.Retention == 0 {
		return -1
	}
	return c.Retention
}

func (c *dashboardCmd) Run(e *env) error {
	// Refuse an unsafe address before touching the database.
	if err := dashboard.CheckBind(c.Addr, c.Token, "--token (or COURIER_DASHBOARD_TOKEN)"); err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	if err := dashboard.CheckToken(c.Token, "--token (or COURIER_DASHBOARD_TOKEN)"); err != nil {
		return err
	}
	if err := dashboard.CheckHosts(c.AllowedHost, "--allowed-host"); err != nil {
		return err
	}
	if c.tenanted() && c.Tenant == "" {
		return c.runTenants(e)
	}
	d, err := c.open(e.ctx, false, "")
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.CheckSchema(e.ctx); err != nil {
		return err
	}
	h, err := dashboard.New(dashboard.Config{Database: d, Sagas: d.Sagas(), Token: c.Token, AllowedHosts: c.AllowedHost, Logger: e.log, InboxRetention: c.inboxRetention()})
	if err != nil {
		return err
	}
	defer sample(e, h)()
	return c.serve(e, h, d.String())
}

// sample runs h's readings for its trend charts in the background until
// the returned function is called, which returns once they have stopped.
func sample(e *env, h *dashboard.Handler) (stop func()) {
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := h.Run(ctx); err != nil {
			e.log.Error("dashboard: trend readings", "err", err)
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

// serve serves h, the dashboard of what, until the command's context
// ends.
func (c *dashboardCmd) serve(e *env, h http.Handler, what string) error {
	stop, failed, url, err := serveDashboard(e, h, dashboardServe{addr: c.Addr, addrFlag: "--addr"})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "dashboard of %s on %s (stop with Ctrl-C)\n", what, url)
	select {
	case err := <-failed:
		return err
	case <-e.ctx.Done():
	}
	return stop()
}

// runTenants serves the dashboard of every tenant the tenant flags give:
// the tenant list, and each tenant's pages under /t/NAME/.
func (c *dashboardCmd) runTenants(e *env) error {
	if err := c.checkTenants(); err != nil {
		return err
	}
	if c.MaxOpen < 1 {
		return fmt.Errorf("--tenants-max-open is %d: use 1 or more, such as 8", c.MaxOpen)
	}
	src, done, err := c.tenantSource(e.ctx)
	if err != nil {
		return err
	}
	defer done()
	ts := &dashboardTenants{src: tenant.NewSieve(src, e.log)}
	// Read once now: tenants that cannot be read fail the command, not
	// its first page.
	names, err := ts.list(e.ctx)
	if err != nil {
		return err
	}
	h, err := dashboard.NewTenants(dashboard.TenantsConfig{Config: dashboard.Config{Token: c.Token, AllowedHosts: c.AllowedHost, Logger: e.log, InboxRetention: c.inboxRetention()},
		List: ts.list, Open: ts.open, MaxOpen: c.MaxOpen})
	if err != nil {
		return err
	}
	defer h.Close()
	return c.serve(e, h, fmt.Sprintf("%d tenants (%s, read again on each page)", len(names), c.tenantsFlag()))
}

// dashboardTenants gives the dashboard of tenants the tenants' names, read
// from the tenant flags' source on each page, and opens their databases.
// An entry that is not a valid tenant is left out, and logged once (see
// tenant.Sieve): the other tenants are served.
type dashboardTenants struct {
	src tenant.Source

	mu     sync.Mutex
	byName map[string]tenant.Tenant // as last read
}

// list reads the tenants' names.
func (d *dashboardTenants) list(ctx context.Context) ([]string, error) {
	ts, err := d.src.Tenants(ctx)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]tenant.Tenant, len(ts))
	names := make([]string, len(ts))
	for i, t := range ts {
		byName[t.Name], names[i] = t, t.Name
	}
	d.mu.Lock()
	d.byName = byName
	d.mu.Unlock()
	return names, nil
}

// open opens the database of the tenant named name, as last read, and
// checks its schema.
func (d *dashboardTenants) open(ctx context.Context, name string) (dashboard.TenantDatabase, error) {
	d.mu.Lock()
	t, ok := d.byName[name]
	d.mu.Unlock()
	if !ok {
		return dashboard.TenantDatabase{}, fmt.Errorf("tenant %q is no longer among the tenants", name)
	}
	opts := tenantOptions(t, false)
	opts.MaxConns = tenantConns
	db, err := dburl.Open(ctx, t.URL, opts)
	if err != nil {
		return dashboard.TenantDatabase{}, err
	}
	if err := db.CheckSchema(ctx); err != nil {
		db.Close()
		return dashboard.TenantDatabase{}, fmt.Errorf("tenant %s: %w", name, err)
	}
	return dashboard.TenantDatabase{Database: db, Sagas: db.Sagas(), Close: db.Close}, nil
}

// dashboardServe is where serveDashboard serves (checked already), and the
// name of the address's option, for errors.
type dashboardServe struct {
	addr     string
	addrFlag string
}

// serveDashboard serves h, a dashboard, on o.addr in the background and
// returns its URL. stop shuts it down, waiting for requests in flight up to
// shutdownTimeout; failed receives an error if the server stops by itself.
func serveDashboard(e *env, h http.Handler, o dashboardServe) (stop func() error, failed <-chan error, url string, err error) {
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return nil, nil, "", fmt.Errorf("%s %s: %w; pick another port, such as %s 127.0.0.1:8081", o.addrFlag, o.addr, err, o.addrFlag)
	}
	url = "http://" + ln.Addr().String() + "/"
	srv := dashboard.NewServer(h)
	e.log.Info("dashboard serving", "url", url)
	served := make(chan error, 1)
	fail := make(chan error, 1)
	go func() {
		err := srv.Serve(ln)
		served <- err
		if !errors.Is(err, http.ErrServerClosed) {
			fail <- fmt.Errorf("dashboard: %w", err)
		}
	}()
	stop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		err := srv.Shutdown(ctx)
		if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		e.log.Info("dashboard stopped")
		return err
	}
	return stop, fail, url, nil
}

// dashboardFlags are the relay's flags for serving the dashboard beside it.
type dashboardFlags struct {
	Dashboard      string   `name:"dashboard" placeholder:"ADDR" help:"Also serve the web dashboard on this address, such as 127.0.0.1:8080 (any address but a loopback one needs --dashboard-token). Empty: not served." env:"COURIER_RELAY_DASHBOARD"`
	DashboardToken string   `name:"dashboard-token" help:"Secret that every page and action of the dashboard requires (see courier dashboard --token)." env:"COURIER_RELAY_DASHBOARD_TOKEN"`
	DashboardHost  []string `name:"dashboard-allowed-host" placeholder:"NAME" help:"Host name, besides localhost and the address it listens on, that the dashboard's requests may be addressed to (see courier dashboard --allowed-host)." env:"COURIER_RELAY_DASHBOARD_ALLOWED_HOSTS"`
}

// check refuses an address off loopback without a token, before the
// relay creates anything.
func (f dashboardFlags) check() error {
	if f.Dashboard == "" {
		return nil
	}
	if err := dashboard.CheckBind(f.Dashboard, f.DashboardToken, "--dashboard-token (or COURIER_RELAY_DASHBOARD_TOKEN)"); err != nil {
		return fmt.Errorf("--dashboard: %w", err)
	}
	if err := dashboard.CheckToken(f.DashboardToken, "--dashboard-token (or COURIER_RELAY_DASHBOARD_TOKEN)"); err != nil {
		return err
	}
	if err := dashboard.CheckHosts(f.DashboardHost, "--dashboard-allowed-host"); err != nil {
		return err
	}
	return nil
}

// serve starts the dashboard, and its readings for the trend charts, when
// --dashboard is set (check passed), and
// returns what stops it (nothing to stop without the flag).
func (f dashboardFlags) serve(e *env, d *dburl.DB) (stop func(), err error) {
	if f.Dashboard == "" {
		return func() {}, nil
	}
	h, err := dashboard.New(dashboard.Config{Database: d, Sagas: d.Sagas(), Token: f.DashboardToken, AllowedHosts: f.DashboardHost, Logger: e.log})
	if err != nil {
		return nil, err
	}
	halt, failed, _, err := serveDashboard(e, h, dashboardServe{addr: f.Dashboard, addrFlag: "--dashboard"})
	if err != nil {
		return nil, err
	}
	stopSampling := sample(e, h)
	return func() {
		defer stopSampling()
		select {
		case err := <-failed:
			e.log.Error("dashboard failed", "err", err)
		default:
			if err := halt(); err != nil {
				e.log.Error("dashboard stop", "err", err)
			}
		}
	}, nil
}
