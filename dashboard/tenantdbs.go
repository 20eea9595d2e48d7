package dashboard

import (
	"context"
	"errors"
	"sync"
)

// errClosed is the error of a tenant's database asked for after
// Tenants.Close.
var errClosed = errors.New("the dashboard is closed")

// openDBs opens the tenants' databases on demand and keeps at most max of
// them open (or opening) at once: to open another, it closes the one used
// least recently among those no request is using, or waits for one to be
// done with.
type openDBs struct {
	open func(ctx context.Context, name string) (TenantDatabase, error)
	max  int

	mu      sync.Mutex
	entries map[string]*dbEntry // by tenant name
	live    int                 // databases open or opening, removed ones in use included
	tick    int64               // counts uses, for least recently used
	freed   chan struct{}       // closed, and replaced, when a place may have come free or an entry is no longer used
	closed  bool                // by Tenants.Close
	closing []func()            // Close functions to call once mu is unlocked
}

// dbEntry is one tenant's database, open or opening.
type dbEntry struct {
	name  string
	db    TenantDatabase
	err   error         // why it did not open
	ready chan struct{} // closed once db or err is set
	refs  int           // requests using it, the one opening it included
	used  int64         // the tick of its last use; lowest is closed first
	gone  bool          // removed from entries: closed once refs is 0
	held  bool          // counted in live: its database is open or opening

	viewOnce sync.Once
	view     *Handler
	viewErr  error
}

func newOpenDBs(open func(ctx context.Context, name string) (TenantDatabase, error), max int) *openDBs {
	return &openDBs{open: open, max: max, entries: map[string]*dbEntry{}, freed: make(chan struct{})}
}

// acquire returns the entry of the tenant named name, its database open,
// with a reference the caller releases. A scan (the tenant list reading
// each tenant's figures) does not count as a use: the database it opens
// is the first one closed for another, so that reading the list keeps
// the tenants whose pages are being looked at open.
func (d *openDBs) acquire(ctx context.Context, name string, scan bool) (*dbEntry, error) {
	d.mu.Lock()
	for {
		if d.closed {
			d.unlock()
			return nil, errClosed
		}
		if e := d.entries[name]; e != nil {
			e.refs++
			d.touch(e, scan)
			d.unlock()
			select {
			case <-e.ready:
			case <-ctx.Done():
				d.release(e)
				return nil, ctx.Err()
			}
			if e.err != nil {
				d.release(e)
				return nil, e.err
			}
			return e, nil
		}
		if d.live >= d.max {
			d.remove(d.idlest())
		}
		if d.live < d.max {
			break
		}
		freed := d.freed
		d.unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		d.mu.Lock()
	}
	e := &dbEntry{name: name, ready: make(chan struct{}), refs: 1, held: true}
	d.live++
	d.touch(e, scan)
	d.entries[name] = e
	d.unlock()

	db, err := d.open(ctx, name)
	if err == nil && db.Database == nil {
		if db.Close != nil {
			db.Close()
		}
		err = errors.New("TenantsConfig.Open returned no Database")
	}
	d.mu.Lock()
	e.db, e.err = db, err
	if err != nil {
		d.remove(e)
	}
	close(e.ready)
	d.unlock()
	if err != nil {
		d.release(e)
		return nil, err
	}
	return e, nil
}

// release drops a reference acquire took. Those waiting for a place are
// woken once no request uses e: it may be closed for another.
func (d *openDBs) release(e *dbEntry) {
	d.mu.Lock()
	e.refs--
	d.closeIfDone(e)
	if e.refs == 0 {
		d.notify()
	}
	d.unlock()
}

// retain closes the databases of the tenants listed does not name, once
// no request uses them.
func (d *openDBs) retain(listed map[string]bool) {
	d.mu.Lock()
	for name, e := range d.entries {
		if !listed[name] {
			d.remove(e)
		}
	}
	d.unlock()
}

// closeAll closes every database, each once no request uses it, and
// refuses to open any more.
func (d *openDBs) closeAll() {
	d.mu.Lock()
	d.closed = true
	for _, e := range d.entries {
		d.remove(e)
	}
	d.notify()
	d.unlock()
}

// touch records a use of e, unless it is a scan's. d.mu is held.
func (d *openDBs) touch(e *dbEntry, scan bool) {
	if !scan {
		d.tick++
		e.used = d.tick
	}
}

// idlest returns the entry no request uses that was used least recently,
// nil when every entry is in use. d.mu is held.
func (d *openDBs) idlest() *dbEntry {
	var idlest *dbEntry
	for _, e := range d.entries {
		if e.refs == 0 && (idlest == nil || e.used < idlest.used) {
			idlest = e
		}
	}
	return idlest
}

// remove takes e (nil: none) out of the entries; its database is closed
// now when no request uses it, or else when the last one releases it.
// d.mu is held.
func (d *openDBs) remove(e *dbEntry) {
	if e == nil || e.gone {
		return
	}
	e.gone = true
	if d.entries[e.name] == e {
		delete(d.entries, e.name)
	}
	d.closeIfDone(e)
}

// closeIfDone gives e's place up, and has its database closed once d.mu
// is unlocked, when e is removed and no request uses it. d.mu is held.
func (d *openDBs) closeIfDone(e *dbEntry) {
	if !e.gone || e.refs > 0 || !e.held {
		return
	}
	e.held = false
	d.live--
	if e.err == nil && e.db.Close != nil {
		d.closing = append(d.closing, e.db.Close)
	}
	d.notify()
}

// notify wakes those waiting for a place. d.mu is held.
func (d *openDBs) notify() {
	close(d.freed)
	d.freed = make(chan struct{})
}

// unlock unlocks d.mu, then closes the databases given up meanwhile.
func (d *openDBs) unlock() {
	closing := d.closing
	d.closing = nil
	d.mu.Unlock()
	for _, c := range closing {
		c()
	}
}
