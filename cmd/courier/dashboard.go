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
	Addr  string `help:"Address to listen on. Any address but a loopback one (127.0.0.1, ::1, localhost) needs --token." default:"127.0.0.1:8080" env:"COURIER_DASHBOARD_ADDR"`
	Token string `help:"Secret that every page and action requires (log in with it, or send Authorization: Bearer TOKEN). Required off loopback." env:"COURIER_DASHBOARD_TOKEN"`
}

// shutdownTimeout bounds how long the dashboard waits for requests in
// flight when it is stopped.
const shutdownTimeout = 5 * time.Second

func (c *dashboardCmd) Run(e *env) error {
	// Refuse an unsafe address before touching the database.
	if err := dashboard.CheckBind(c.Addr, c.Token, "--token (or COURIER_DASHBOARD_TOKEN)"); err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	d, err := c.open(e.ctx, false, "")
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.CheckSchema(e.ctx); err != nil {
		return err
	}
	stop, failed, err := serveDashboard(e, d, c.Addr, c.Token, "--addr")
	if err != nil {
		return err
	}
	select {
	case err := <-failed:
		return err
	case <-e.ctx.Done():
	}
	return stop()
}

// serveDashboard serves the dashboard of d on addr in the background. stop
// shuts it down, waiting for requests in flight up to shutdownTimeout;
// failed receives an error if the server stops by itself. flag names the
// address's option in errors.
func serveDashboard(e *env, d *dburl.DB, addr, token, flag string) (stop func() error, failed <-chan error, err error) {
	h, err := dashboard.New(dashboard.Config{Database: d, Sagas: d.Sagas(), Token: token, Logger: e.log})
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w; pick another port, such as %s 127.0.0.1:8081", flag, addr, err, flag)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(e.stdout, "dashboard of %s on http://%s/ (stop with Ctrl-C)\n", d, ln.Addr())
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
	return stop, fail, nil
}
