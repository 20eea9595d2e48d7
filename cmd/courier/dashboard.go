package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/store/dburl"
)

// dashboardCmd serves the web dashboard until stopped.
type dashboardCmd struct {
	dbFlags
	Addr        string   `help:"Address to listen on. Any address but a loopback one (127.0.0.1, ::1, localhost) needs --token." default:"127.0.0.1:8080" env:"COURIER_DASHBOARD_ADDR"`
	Token       string   `help:"Secret that every page and action requires (log in with it, or send Authorization: Bearer TOKEN). Required off loopback." env:"COURIER_DASHBOARD_TOKEN"`
	AllowedHost []string `name:"allowed-host" placeholder:"NAME" help:"Host name, besides localhost and the address it listens on, that requests may be addressed to: the name a proxy in front of the dashboard forwards. Repeatable, or comma-separated. Requests naming any other host are refused (421)." env:"COURIER_DASHBOARD_ALLOWED_HOSTS"`
}

// shutdownTimeout bounds how long the dashboard waits for requests in
// flight when it is stopped.
const shutdownTimeout = 5 * time.Second

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
	d, err := c.open(e.ctx, false, "")
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.CheckSchema(e.ctx); err != nil {
		return err
	}
	stop, failed, url, err := serveDashboard(e, d, dashboardServe{addr: c.Addr, token: c.Token, allowed: c.AllowedHost, addrFlag: "--addr"})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "dashboard of %s on %s (stop with Ctrl-C)\n", d, url)
	select {
	case err := <-failed:
		return err
	case <-e.ctx.Done():
	}
	return stop()
}

// dashboardServe is what serveDashboard serves (checked already), and the
// name of the address's option, for errors.
type dashboardServe struct {
	addr, token string
	allowed     []string
	addrFlag    string
}

// serveDashboard serves the dashboard of d on o.addr in the background and
// returns its URL. stop shuts it down, waiting for requests in flight up to
// shutdownTimeout; failed receives an error if the server stops by itself.
func serveDashboard(e *env, d *dburl.DB, o dashboardServe) (stop func() error, failed <-chan error, url string, err error) {
	h, err := dashboard.New(dashboard.Config{Database: d, Sagas: d.Sagas(), Token: o.token, AllowedHosts: o.allowed, Logger: e.log})
	if err != nil {
		return nil, nil, "", err
	}
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

// serve starts the dashboard when --dashboard is set (check passed), and
// returns what stops it (nothing to stop without the flag).
func (f dashboardFlags) serve(e *env, d *dburl.DB) (stop func(), err error) {
	if f.Dashboard == "" {
		return func() {}, nil
	}
	halt, failed, _, err := serveDashboard(e, d, dashboardServe{addr: f.Dashboard, token: f.DashboardToken, allowed: f.DashboardHost,
		addrFlag: "--dashboard"})
	if err != nil {
		return nil, err
	}
	return func() {
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
