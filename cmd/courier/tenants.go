package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/tenant"
)

// tenantFlags give a set of tenants (package tenant), each with a database
// or a PostgreSQL schema of its own, and with --tenant the one a command
// works on.
type tenantFlags struct {
	Tenants      []string `name:"tenants" sep:"," placeholder:"NAME=URL" help:"Tenants, each NAME=URL (a database URL of its own, or postgres://…?search_path=SCHEMA for a schema of its own), separated by commas." env:"COURIER_TENANTS"`
	TenantsFile  string   `name:"tenants-file" type:"path" help:"File of the tenants, one 'NAME URL' per line (# starts a comment); the relay reads it again every --tenants-refresh. A line that is not a valid tenant is logged and skipped, the others served." env:"COURIER_TENANTS_FILE"`
	TenantsQuery string   `name:"tenants-query" help:"SQL query on --database-url (the catalogue) whose rows are the tenants, (name, url), such as \"SELECT name, database_url FROM customers WHERE active\"; the relay runs it again every --tenants-refresh. A row that is not a valid tenant is logged and skipped, the others served." env:"COURIER_TENANTS_QUERY"`
	Tenant       string   `name:"tenant" help:"With --tenants, --tenants-file or --tenants-query: the tenant whose database the command works on." env:"COURIER_TENANT"`
}

// tenanted reports whether the flags give tenants.
func (f tenantFlags) tenanted() bool {
	return len(f.Tenants) > 0 || f.TenantsFile != "" || f.TenantsQuery != ""
}

// tenantsFlag names the flag that gave the tenants.
func (f tenantFlags) tenantsFlag() string {
	switch {
	case f.TenantsFile != "":
		return "--tenants-file"
	case f.TenantsQuery != "":
		return "--tenants-query"
	}
	return "--tenants"
}

// checkTenants validates the tenant flags before anything is opened.
func (f dbFlags) checkTenants() error {
	n := 0
	for _, set := range []bool{len(f.Tenants) > 0, f.TenantsFile != "", f.TenantsQuery != ""} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return fmt.Errorf("--tenants, --tenants-file and --tenants-query each give the tenants: pass one of them")
	case n == 0 && f.Tenant != "":
		return fmt.Errorf("--tenant %q: give the tenants too (--tenants, --tenants-file or --tenants-query)", f.Tenant)
	case f.TenantsQuery != "" && f.DatabaseURL == "":
		return fmt.Errorf("--tenants-query runs on the catalogue database: give its URL with --database-url")
	}
	if len(f.Tenants) > 0 {
		_, err := f.tenantList()
		return err
	}
	return nil
}

// tenantList reads --tenants.
func (f tenantFlags) tenantList() ([]tenant.Tenant, error) {
	ts := make([]tenant.Tenant, 0, len(f.Tenants))
	for _, s := range f.Tenants {
		name, u, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("--tenants: %q is not NAME=URL", dburl.Redact(s))
		}
		ts = append(ts, tenant.Tenant{Name: name, URL: u})
	}
	return ts, tenant.Check(ts, "--tenants")
}

// tenantSource returns where the tenants come from; done closes what it
// opened (the catalogue database of --tenants-query).
func (f dbFlags) tenantSource(ctx context.Context) (src tenant.Source, done func(), err error) {
	switch {
	case f.TenantsFile != "":
		return tenant.File(f.TenantsFile), func() {}, nil
	case f.TenantsQuery != "":
		d, err := dburl.Open(ctx, f.DatabaseURL, urlOptions)
		if err != nil {
			return nil, nil, err
		}
		return tenant.Query(d.SQL(), f.TenantsQuery), d.Close, nil
	}
	ts, err := f.tenantList()
	if err != nil {
		return nil, nil, err
	}
	return tenant.List(ts...), func() {}, nil
}

// allTenants reads the tenants once: the valid ones, and the entries
// that are not, each logged to log (see tenant.Sieve; nil: not logged)
// and left out.
func (f dbFlags) allTenants(ctx context.Context, log *slog.Logger) ([]tenant.Tenant, []tenant.Rejected, error) {
	src, done, err := f.tenantSource(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	s := tenant.NewSieve(src, log)
	ts, err := s.Tenants(ctx)
	return ts, s.Rejected(), err
}

// chosenTenant returns the tenant --tenant names.
func (f dbFlags) chosenTenant(ctx context.Context) (tenant.Tenant, error) {
	if f.Tenant == "" {
		return tenant.Tenant{}, fmt.Errorf("%s gives several tenants: pick the one to work on with --tenant NAME", f.tenantsFlag())
	}
	ts, rejected, err := f.allTenants(ctx, nil)
	if err != nil {
		return tenant.Tenant{}, err
	}
	i := slices.IndexFunc(ts, func(t tenant.Tenant) bool { return t.Name == f.Tenant })
	if j := slices.IndexFunc(rejected, func(r tenant.Rejected) bool { return r.Name == f.Tenant }); i < 0 && j >= 0 {
		return tenant.Tenant{}, fmt.Errorf("--tenant %q: %s rejects its entry: %s", f.Tenant, f.tenantsFlag(), rejected[j].Reason)
	}
	if i < 0 {
		names := make([]string, 0, min(len(ts), 10))
		for _, t := range ts[:min(len(ts), 10)] {
			names = append(names, t.Name)
		}
		more := ""
		if len(ts) > 10 {
			more = fmt.Sprintf(" and %d more", len(ts)-10)
		}
		return tenant.Tenant{}, fmt.Errorf("--tenant %q is not one of the %d tenants %s gives (%s%s)", f.Tenant, len(ts), f.tenantsFlag(), strings.Join(names, ", "), more)
	}
	return ts[i], nil
}

// tenantOptions are how a tenant's URL is opened: PostgreSQL schemas
// are created when create (courier migrate), never dropped.
func tenantOptions(t tenant.Tenant, create bool) dburl.Options {
	return dburl.Options{Flag: "tenant " + t.Name + "'s URL", Create: create, CreateSchema: create}
}
