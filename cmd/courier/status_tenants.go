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
	// Status is the tenant's store.Status; nil when Error or Rejected
	// says why not.
	Status *store.Status `json:"status,omitempty"`
	Error  string        `json:"error,omitempty"`
	// Rejected says why the entry that names the tenant is not one (see
	// tenant.Sift): it is not served, and counts as a failed check.
	Rejected string   `json:"rejected,omitempty"`
	Failed   []string `json:"failed_checks,omitempty"`
}

// statusQueries is how many tenants' databases status reads at once.
const statusQueries = 8

// tenantsStatus reads the status of every tenant, a few at a time, and
// prints a line per tenant: a tenant whose database fails is shown with
// its error and counts as a failed check, the others are read all the
// same. The --fail-if checks apply to each tenant. An entry of the
// tenants that is not a valid tenant is shown with why, and counts as a
// failed check.
func (c *statusCmd) tenantsStatus(e *env) error {
	ts, rejected, err := c.allTenants(e.ctx, e.log)
	if err != nil {
		return err
	}
	out := make([]tenantStatus, len(ts), len(ts)+len(rejected))
	var g errgroup.Group
	g.SetLimit(statusQueries)
	for i, t := range ts {
		g.Go(func() error {
			out[i] = c.oneTenant(e, t)
			return nil
		})
	}
	_ = g.Wait()
	for _, r := range rejected {
		out = append(out, tenantStatus{Tenant: r.Name, Rejected: r.Reason, Failed: []string{"rejected by " + c.tenantsFlag() + ": " + r.Reason}})
	}
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
		printTenants(e, out, c.tenantsFlag())
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
	holds, err := c.holds(e.ctx, d.Admin(), st)
	if err != nil {
		return fail(err)
	}
	ts.Status, ts.Failed = &st, append(c.check(st), c.heldChecks(st.Now, holds)...)
	return ts
}

// printTenants prints a line per tenant: its outbox, dead letters, held
// keys, parked messages, late scheduled messages, or its error, or why its
// entry is rejected.
func printTenants(e *env, out []tenantStatus, from string) {
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	var rejected []tenantStatus
	fmt.Fprintln(tw, "TENANT\tpending\tin backoff\toldest\tdead letters\theld keys\tparked\tscheduled due\tfailed checks\t")
	for _, s := range out {
		if s.Rejected != "" {
			rejected = append(rejected, s)
			continue
		}
		name := escape.Line(s.Tenant)
		if s.Status == nil {
			fmt.Fprintf(tw, "%s\terror: %s\t\t\t\t\t\t\t%d\t\n", name, escape.Line(s.Error), len(s.Failed))
			continue
		}
		st := s.Status
		var parked int64
		for _, c := range st.Consumers {
			parked += c.Parked
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t\n", name, st.Outbox.Pending, st.Outbox.InBackoff, age(st.Outbox.OldestPendingAge()),
			st.Outbox.DeadLetters, st.Outbox.HeldKeys, parked, st.Scheduled.Due, len(s.Failed))
	}
	_ = tw.Flush()
	if len(rejected) > 0 {
		fmt.Fprintf(e.stdout, "\n%d entries of %s rejected, not served (each a failed check):\n", len(rejected), from)
		for _, s := range rejected {
			fmt.Fprintf(e.stdout, "  \"%s\": %s\n", escape.Line(s.Tenant), escape.Line(s.Rejected))
		}
	}
}
