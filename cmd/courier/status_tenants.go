package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"golang.org/x/sync/errgroup"

	"github.com/courier-go/courier/internal/escape"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/tenant"
)

// tenantStatus is one tenant's line of `courier status` over tenants.
type tenantStatus struct {
	Tenant string `json:"tenant"`
	// Status is the tenant's store.Status; nil when Error says why not.
	Status *store.Status `json:"status,omitempty"`
	Error  string        `json:"error,omitempty"`
	Failed []string      `json:"failed_checks,omitempty"`
}

// statusQueries is how many tenants' databases status reads at once.
const statusQueries = 8

// tenantsStatus reads the status of every tenant, a few at a time, and
// prints a line per tenant: a tenant whose database fails is shown with
// its error and counts as a failed check, the others are read all the
// same. The --fail-if checks apply to each tenant.
func (c *statusCmd) tenantsStatus(e *env) error {
	ts, err := c.allTenants(e.ctx)
	if err != nil {
		return err
	}
	out := make([]tenantStatus, len(ts))
	var g errgroup.Group
	g.SetLimit(statusQueries)
	for i, t := range ts {
		g.Go(func() error {
			out[i] = c.oneTenant(e, t)
			return nil
		})
	}
	_ = g.Wait()
	var failed []string
	for _, s := range out {
		for _, f := range s.Failed {
			failed = append(failed, "tenant "+s.Tenant+": "+f)
		}
	}
	if c.JSON {
		if err := writeJSON(e, out); err != nil {
			return err
		}
	} else {
		printTenants(e, out)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: %s", errChecks, strings.Join(failed, "; "))
	}
	return nil
}

// oneTenant reads one tenant's status and runs the checks on it.
func (c *statusCmd) oneTenant(e *env, t tenant.Tenant) tenantStatus {
	ts := tenantStatus{Tenant: t.Name}
	fail := func(err error) tenantStatus {
		ts.Error = err.Error()
		ts.Failed = []string{"cannot read its status: " + oneLine(err)}
		return ts
	}
	d, err := dburl.Open(e.ctx, t.URL, tenantOptions(t, false))
	if err != nil {
		return fail(err)
	}
	defer d.Close()
	if err := d.CheckSchema(e.ctx); err != nil {
		return fail(err)
	}
	st, err := d.Operations().Status(e.ctx)
	if err != nil {
		return fail(err)
	}
	ts.Status, ts.Failed = &st, c.check(st)
	return ts
}

// printTenants prints a line per tenant: its outbox, dead letters, parked
// messages, late scheduled messages, or its error.
func printTenants(e *env, out []tenantStatus) {
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "TENANT\tpending\tin backoff\toldest\tdead letters\tparked\tscheduled due\tfailed checks\t")
	for _, s := range out {
		name := escape.Line(s.Tenant)
		if s.Status == nil {
			fmt.Fprintf(tw, "%s\terror: %s\t\t\t\t\t\t%d\t\n", name, escape.Line(s.Error), len(s.Failed))
			continue
		}
		st := s.Status
		var parked int64
		for _, c := range st.Consumers {
			parked += c.Parked
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t\n", name, st.Outbox.Pending, st.Outbox.InBackoff, age(st.Outbox.OldestPendingAge()),
			st.Outbox.DeadLetters, parked, st.Scheduled.Due, len(s.Failed))
	}
}
