package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/courier-go/courier/internal/openset"
	"github.com/courier-go/courier/store"
)

// TenantDatabase is one tenant's database, as [TenantsConfig.Open] opens
// it.
type TenantDatabase struct {
	// Database is the tenant's database. Required.
	Database store.Database
	// Sagas, when set, lets the tenant's pages show a saga's timeline, as
	// [Config.Sagas] does. Optional.
	Sagas SagaHistory
	// Close, when set, closes the database. The dashboard calls it once,
	// after the last request using the database is done, when it closes
	// the database for another tenant's, when List no longer names the
	// tenant, or on [Tenants.Close]. Optional.
	Close func()
}

// DefaultMaxOpen is how many tenants' databases a dashboard of tenants
// keeps open at once unless told ([TenantsConfig.MaxOpen]).
const DefaultMaxOpen = 8

// DefaultReads is how many tenants' databases the tenant list reads at
// once unless told ([TenantsConfig.Reads]).
const DefaultReads = 4

// TenantsConfig configures a dashboard of many tenants, each with a
// database of its own: see [NewTenants].
type TenantsConfig struct {
	// Config is what the tenants' pages share: one Token and one login
	// for all of them, SessionTTL, Clock, Prefix, AllowedHosts, PageSize
	// (of the tenant list too), Limit, Logger, SampleEvery and History.
	// Its Database and Sagas must be nil: Open gives each tenant's. No
	// reading is taken in the background (there is no Run, as it would
	// keep every tenant's database open): a tenant's trend charts hold
	// the readings of the views of its overview, while its database
	// stays open.
	Config
	// List returns the tenants' names. The dashboard calls it on each
	// view of the tenant list and of a tenant's page, so that tenants
	// come and go without a restart: keep it cheap, such as a file read
	// or one query. Required.
	List func(ctx context.Context) ([]string, error)
	// Open opens the database of the tenant named name, one List
	// returned. The dashboard calls it when a request needs the database
	// and it is not open; it then keeps the database open until it closes
	// it for another tenant's (see MaxOpen), until List no longer names
	// the tenant, or until [Tenants.Close]. An error is shown on the
	// tenant's page and on its line of the list, and Open is called again
	// on the next request. Required.
	Open func(ctx context.Context, name string) (TenantDatabase, error)
	// MaxOpen bounds the tenants' databases open (or opening) at once. To
	// open another, the dashboard closes the one used least recently
	// among those no request is using, or waits for one to be done with.
	// The tenant list's reads are not uses: a database opened for the
	// list is the first closed. Default DefaultMaxOpen (8).
	MaxOpen int
	// Reads bounds how many tenants' databases the tenant list reads at
	// once (each one's counts, by store.Operations' Status); it reads
	// those of one page of the list, PageSize tenants. Default
	// DefaultReads (4), and never more than MaxOpen.
	Reads int
}

func (c *TenantsConfig) setDefaults() {
	c.Config.setDefaults()
	if c.MaxOpen == 0 {
		c.MaxOpen = DefaultMaxOpen
	}
	if c.Reads == 0 {
		c.Reads = DefaultReads
	}
	c.Reads = min(c.Reads, c.MaxOpen)
}

func (c *TenantsConfig) validate() error {
	switch {
	case c.Database != nil || c.Sagas != nil:
		return errors.New("dashboard: TenantsConfig.Database or Sagas is set: leave them nil, TenantsConfig.Open gives each tenant's database")
	case c.List == nil:
		return errors.New("dashboard: TenantsConfig.List is nil: pass the function that returns the tenants' names")
	case c.Open == nil:
		return errors.New("dashboard: TenantsConfig.Open is nil: pass the function that opens a tenant's database")
	case c.MaxOpen < 1:
		return fmt.Errorf("dashboard: TenantsConfig.MaxOpen is %d: use 1 or more (0 means %d)", c.MaxOpen, DefaultMaxOpen)
	case c.Reads < 1:
		return fmt.Errorf("dashboard: TenantsConfig.Reads is %d: use 1 or more (0 means %d)", c.Reads, DefaultReads)
	}
	return c.validateShared()
}

// Validate reports whether NewTenants would accept c: nil, or an error
// naming the field and the fix. Zero fields take their defaults first, as
// in NewTenants.
func (c TenantsConfig) Validate() error {
	c.setDefaults()
	return c.validate()
}

// Tenants is the dashboard of many tenants. Under its prefix it serves
// the tenant list at /, and each tenant's pages, the very pages a
// dashboard of one database serves, under /t/NAME/: /t/acme/dead-letters
// lists tenant acme's dead letters. A name is written in the URL as
// url.PathEscape writes it, and a name a browser would take for a step of
// the path ("." or ".."), or that starts with '~', as '~' and the name in
// base64url, so that it never breaks a URL. The login, the style sheet and the cookies are
// shared, so that one login covers every tenant; every request passes the
// checks of [Handler] (Host header, origin, token, CSRF token) before its
// tenant is looked at. Build it with [NewTenants]; call Close once its
// server has stopped.
type Tenants struct {
	cfg   TenantsConfig
	top   *Handler                      // the tenant list, the login, the logout, the errors
	dbs   *openset.Set[string, *openDB] // the tenants' databases, by name
	serve http.Handler
}

// NewTenants returns the dashboard of cfg's tenants, none of their
// databases open yet. It fails when cfg is invalid.
func NewTenants(cfg TenantsConfig) (*Tenants, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	top, err := newHandler(cfg.Config, true)
	if err != nil {
		return nil, err
	}
	t := &Tenants{cfg: cfg, top: top, dbs: newOpenDBs(cfg.Open, cfg.MaxOpen)}
	mux := http.NewServeMux()
	top.sharedRoutes(mux)
	mux.HandleFunc("GET /{$}", t.list)
	mux.HandleFunc("/t/", t.page)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		top.fail(w, r, http.StatusNotFound, "There is no such page.")
	})
	t.serve = top.guard(mux)
	return t, nil
}

// ServeHTTP serves the tenant list and the tenants' pages and actions.
func (t *Tenants) ServeHTTP(w http.ResponseWriter, r *http.Request) { t.serve.ServeHTTP(w, r) }

// Close closes the tenants' databases, each once the requests using it
// are done; requests that need one afterwards fail. Call it once the
// server has stopped.
func (t *Tenants) Close() { t.dbs.CloseAll() }

// names returns the tenants' names, sorted, each once, and closes the
// databases of tenants no longer named.
func (t *Tenants) names(ctx context.Context) ([]string, error) {
	names, err := t.cfg.List(ctx)
	if err != nil {
		return nil, err
	}
	names = slices.Clone(names)
	slices.Sort(names)
	names = slices.Compact(names)
	listed := make(map[string]bool, len(names))
	for _, n := range names {
		listed[n] = true
	}
	t.dbs.RemoveFunc(func(name string) bool { return !listed[name] })
	return names, nil
}

// page serves a request for a tenant's page, /t/NAME/…: it checks that
// List names the tenant, opens its database unless it is open, and hands
// the request, its path made the rest after the name, to the tenant's
// pages.
func (t *Tenants) page(w http.ResponseWriter, r *http.Request) {
	seg, rest, ok := strings.Cut(strings.TrimPrefix(r.URL.EscapedPath(), "/t/"), "/")
	name, named := tenantName(seg)
	if !named {
		t.top.fail(w, r, http.StatusNotFound, "There is no such page: a tenant's pages are under /t/NAME/. The tenant list links to each.")
		return
	}
	names, err := t.names(r.Context())
	if err != nil {
		t.failList(w, r, err)
		return
	}
	if _, found := slices.BinarySearch(names, name); !found {
		t.top.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no tenant %q: it is not among the %d tenants this dashboard lists. The tenant list shows them.", name, len(names)))
		return
	}
	if !ok {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			t.top.fail(w, r, http.StatusNotFound, "There is no such page.")
			return
		}
		http.Redirect(w, r, t.cfg.Prefix+tenantLink(name), http.StatusSeeOther)
		return
	}
	h, err := t.acquireDB(r.Context(), name, false)
	if err != nil {
		t.top.cfg.Logger.Error("dashboard: open a tenant's database", "tenant", name, "err", err)
		t.top.fail(w, r, http.StatusServiceUnavailable, fmt.Sprintf("The database of tenant %q could not be opened, so its pages cannot be shown: %v. The other tenants are not affected: the tenant list shows how each one is.", name, err))
		return
	}
	defer h.Release()
	v, err := h.Value().viewOf(t.top)
	if err != nil {
		t.top.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	r2 := new(http.Request)
	*r2 = *r
	r2.URL = new(url.URL)
	*r2.URL = *r.URL
	r2.URL.RawPath = "/" + rest
	if r2.URL.Path, err = url.PathUnescape(r2.URL.RawPath); err != nil {
		t.top.fail(w, r, http.StatusNotFound, "There is no such page.")
		return
	}
	v.serve.ServeHTTP(w, r2)
}

// failList writes the error page of a List that failed.
func (t *Tenants) failList(w http.ResponseWriter, r *http.Request, err error) {
	t.top.cfg.Logger.Error("dashboard: list the tenants", "err", err)
	t.top.fail(w, r, http.StatusServiceUnavailable, "The tenants could not be listed: "+err.Error())
}

// viewOf returns the pages of o's tenant, made the first time they are
// asked for: a Handler of its database that shares top's key, sessions,
// Host check and templates' shared paths, and serves its pages (not the
// login, which is top's) under top's prefix and /t/NAME. Nothing runs its
// Run: its trend charts hold the readings of its overview's views, for as
// long as its database stays open.
func (o *openDB) viewOf(top *Handler) (*Handler, error) {
	o.viewOnce.Do(func() {
		cfg := top.cfg
		cfg.Database, cfg.Sagas = o.db.Database, o.db.Sagas
		cfg.Prefix = top.cfg.Prefix + "/t/" + segment(o.name)
		cfg.Logger = top.cfg.Logger.With("tenant", o.name)
		v := &Handler{cfg: cfg, admin: cfg.Database.Admin(), ops: cfg.Database.Operations(), key: top.key, hosts: top.hosts,
			sess: top.sess, logins: top.logins, root: top.root, tenant: o.name, multi: true, trend: newRing(cfg.SampleEvery, cfg.History)}
		if err := v.parse(); err != nil {
			o.viewErr = err
			return
		}
		mux := http.NewServeMux()
		v.pageRoutes(mux)
		v.serve = mux
		o.view = v
	})
	return o.view, o.viewErr
}
