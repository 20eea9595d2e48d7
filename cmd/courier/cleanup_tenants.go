package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/courier-go/courier/internal/escape"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/cleanup"
	"github.com/courier-go/courier/store/dburl"
)

// tenantCleaned is one tenant's line of `courier cleanup` over tenants.
type tenantCleaned struct {
	Tenant string          `json:"tenant"`
	Report *cleanup.Report `json:"report,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// cleanTenants runs the cleanup on every tenant's database in turn. A
// tenant that fails is reported and the others are cleaned; the command
// then fails.
func (c *cleanupCmd) cleanTenants(e *env, keep map[store.Table]time.Duration) error {
	ts, _, err := c.allTenants(e.ctx, e.log) // a rejected entry is logged
	if err != nil {
		return err
	}
	out := make([]tenantCleaned, 0, len(ts))
	failed := 0
	for _, t := range ts {
		tc := tenantCleaned{Tenant: t.Name}
		rep, err := c.cleanTenant(e, t.URL, tenantOptions(t, false), keep)
		if err != nil {
			failed++
			tc.Error = err.Error()
		} else {
			tc.Report = &rep
		}
		out = append(out, tc)
	}
	if c.JSON {
		if err := writeJSON(e, out); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TENANT\tdeleted\t")
		for _, tc := range out {
			switch {
			case tc.Report == nil:
				fmt.Fprintf(tw, "%s\terror: %s\t\n", escape.Line(tc.Tenant), escape.Line(tc.Error))
			case tc.Report.Locked:
				fmt.Fprintf(tw, "%s\t(another cleanup is running)\t\n", escape.Line(tc.Tenant))
			default:
				var n int64
				for _, d := range tc.Report.Deleted {
					n += d
				}
				fmt.Fprintf(tw, "%s\t%d\t\n", escape.Line(tc.Tenant), n)
			}
		}
		_ = tw.Flush()
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d tenants not cleaned up (above)", failed, len(ts))
	}
	return nil
}

// cleanTenant runs the cleanup once on one tenant's database.
func (c *cleanupCmd) cleanTenant(e *env, url string, opts dburl.Options, keep map[store.Table]time.Duration) (cleanup.Report, error) {
	d, err := dburl.Open(e.ctx, url, opts)
	if err != nil {
		return cleanup.Report{}, err
	}
	defer d.Close()
	if err := d.CheckSchema(e.ctx); err != nil {
		return cleanup.Report{}, err
	}
	return c.cleaner(e, d.Operations(), keep).RunOnce(e.ctx)
}
