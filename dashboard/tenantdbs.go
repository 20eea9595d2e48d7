package dashboard

import (
	"context"
	"errors"
	"sync"

	"github.com/courier-go/courier/internal/openset"
)

// errClosed is the error of a tenant's database asked for after
// Tenants.Close.
var errClosed = errors.New("the dashboard is closed")

// openDB is one tenant's database, open, and its pages, made the first
// time they are asked for.
type openDB struct {
	name string
	db   TenantDatabase

	viewOnce sync.Once
	view     *Handler
	viewErr  error
}

// newOpenDBs returns the set of the tenants' databases, opened with open
// on demand, at most max of them open (or opening) at once: to open
// another, the set closes the one used least recently among those no
// request is using, or waits for one to be done with. A scan (the tenant
// list reading each tenant's figures) does not count as a use: the
// database it opens is the first one closed for another, so that reading
// the list keeps the tenants whose pages are being looked at open.
func newOpenDBs(open func(ctx context.Context, name string) (TenantDatabase, error), max int) *openset.Set[string, *openDB] {
	return openset.New(openset.Config[string, *openDB]{
		Open: func(ctx context.Context, name string) (*openDB, error) {
			db, err := open(ctx, name)
			if err != nil {
				return nil, err
			}
			if db.Database == nil {
				if db.Close != nil {
					db.Close()
				}
				return nil, errors.New("TenantsConfig.Open returned no Database")
			}
			return &openDB{name: name, db: db}, nil
		},
		Close: func(o *openDB) {
			if o.db.Close != nil {
				o.db.Close()
			}
		},
		MaxOpen: max,
	})
}

// acquireDB returns the open database of the tenant named name, held
// until the caller releases it (see newOpenDBs for scan). After
// Tenants.Close it fails with errClosed.
func (t *Tenants) acquireDB(ctx context.Context, name string, scan bool) (*openset.Handle[string, *openDB], error) {
	h, err := t.dbs.Acquire(ctx, name, scan)
	if errors.Is(err, openset.ErrClosed) {
		err = errClosed
	}
	return h, err
}
