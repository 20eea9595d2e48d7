package tenant

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/courier-go/courier/store/dburl"
)

// errUnknown is the error of lookup for a name Source does not list.
var errUnknown = errors.New("not among the tenants Source lists")

// databases opens the tenants' databases on demand and keeps at most
// maxOpen open: to open another, it closes the one used least recently
// among those no one is using, or waits for one to be free. It reads
// Source when a name it has not read arrives, and again once the tenants
// it read are older than refresh.
type databases struct {
	src            Source
	open           func(ctx context.Context, t Tenant, opts dburl.Options) (*dburl.DB, error)
	maxOpen        int
	maxConns       int
	connectTimeout time.Duration
	refresh        time.Duration
	reread         time.Duration
	log            *slog.Logger

	mu sync.Mutex
	// The tenants as Source last gave them, and when that read started.
	tenants map[string]Tenant
	names   []string // sorted
	readAt  time.Time
	readErr error // of the last read
	// The read under way: closed when it ends; nil when none is.
	reading chan struct{}
	// The databases open or opening, by tenant name.
	entries map[string]*entry
	tick    int64         // counts uses, for least recently used
	freed   chan struct{} // closed, and replaced, when an entry is released or removed
	closing []*dburl.DB   // to close once d.mu is unlocked
}

// entry is one tenant's database, open or opening.
type entry struct {
	t     Tenant
	db    *dburl.DB
	err   error         // why it did not open
	ready chan struct{} // closed once db or err is set
	refs  int           // users, the one opening it included
	used  int64         // the tick of its last use; lowest is closed first
	gone  bool          // removed from entries: closed once refs is 0
}

// newDatabases returns the databases of cfg's tenants, none open yet.
func newDatabases(cfg ConsumerConfig, log *slog.Logger) *databases {
	return &databases{src: cfg.Source, open: cfg.Open, maxOpen: cfg.MaxOpen, maxConns: cfg.MaxConns,
		connectTimeout: cfg.ConnectTimeout, refresh: cfg.Refresh, reread: cfg.Reread, log: log,
		entries: map[string]*entry{}, freed: make(chan struct{})}
}

// lookup returns the tenant named name. A name it has not read waits for a
// read of Source that starts after the call (reads start reread apart at
// least); errUnknown (wrapped) says that read does not list it either.
// Tenants read longer than refresh ago are read again first, and kept when
// Source fails.
func (d *databases) lookup(ctx context.Context, name string) (Tenant, error) {
	asked := time.Now()
	_ = d.read(ctx, asked.Add(-d.refresh)) // a failure keeps the tenants read before
	d.mu.Lock()
	t, ok := d.tenants[name]
	d.mu.Unlock()
	if ok {
		return t, nil
	}
	if err := d.read(ctx, asked); err != nil {
		return Tenant{}, fmt.Errorf("tenant %q is not among those read, and the tenants could not be read again: %w", name, err)
	}
	d.mu.Lock()
	t, ok = d.tenants[name]
	d.mu.Unlock()
	if !ok {
		return Tenant{}, fmt.Errorf("tenant %q: %w", name, errUnknown)
	}
	return t, nil
}

// list returns the tenants, read again first when they were read longer
// than refresh ago (those read before are kept when Source fails).
func (d *databases) list(ctx context.Context) ([]Tenant, error) {
	err := d.read(ctx, time.Now().Add(-d.refresh))
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tenants == nil {
		return nil, fmt.Errorf("tenants not read: %w", err)
	}
	ts := make([]Tenant, len(d.names))
	for i, n := range d.names {
		ts[i] = d.tenants[n]
	}
	return ts, nil
}

// read makes sure a read of Source that started at since or later has
// ended, and returns its error. Reads start reread apart at least; callers
// that need one at once share it. A read closes the databases of the
// tenants it no longer lists, or lists with another URL, once no one uses
// them. A read that fails keeps the tenants read before, and is logged
// when a read worked before it.
func (d *databases) read(ctx context.Context, since time.Time) error {
	d.mu.Lock()
	for {
		if !d.readAt.IsZero() && !d.readAt.Before(since) {
			err := d.readErr
			d.mu.Unlock()
			return err
		}
		if ch := d.reading; ch != nil {
			d.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
			d.mu.Lock()
			continue
		}
		if wait := time.Until(d.readAt.Add(d.reread)); wait > 0 && !d.readAt.IsZero() {
			d.mu.Unlock()
			if !sleep(ctx, wait) {
				return ctx.Err()
			}
			d.mu.Lock()
			continue
		}
		break
	}
	start, done := time.Now(), make(chan struct{})
	d.reading = done
	d.mu.Unlock()

	ts, err := d.src.Tenants(ctx)

	d.mu.Lock()
	defer d.unlock()
	d.reading = nil
	close(done)
	if err != nil && ctx.Err() != nil {
		return err // cut short by the caller: not a read of Source
	}
	if err == nil {
		d.tenants = make(map[string]Tenant, len(ts))
		d.names = d.names[:0]
		for _, t := range ts {
			d.tenants[t.Name] = t
			d.names = append(d.names, t.Name)
		}
		slices.Sort(d.names)
		for name, e := range d.entries { // a tenant removed, or given a new URL
			if t, ok := d.tenants[name]; !ok || t.URL != e.t.URL {
				d.remove(e)
			}
		}
	} else if d.readErr == nil && d.tenants != nil {
		d.log.Warn("tenants not read again; using the last ones read", "error", err)
	}
	d.readAt, d.readErr = start, err
	return err
}

// use runs fn with t's database, which it opens unless it is open. A scan
// (a pass over every tenant) does not count as a use: the database it
// opens is the first one closed for another, so that a pass over many
// tenants keeps the others open.
func (d *databases) use(ctx context.Context, t Tenant, scan bool, fn func(db *dburl.DB) error) error {
	e, err := d.acquire(ctx, t, scan)
	if err != nil {
		return err
	}
	defer d.release(e)
	return fn(e.db)
}

// acquire returns t's entry, open, with a reference the caller releases.
func (d *databases) acquire(ctx context.Context, t Tenant, scan bool) (*entry, error) {
	d.mu.Lock()
	for {
		e := d.entries[t.Name]
		if e != nil && e.t.URL != t.URL { // Source gave the tenant a new URL
			d.remove(e)
			e = nil
		}
		if e != nil {
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
		if len(d.entries) >= d.maxOpen {
			d.remove(d.idlest())
		}
		if len(d.entries) < d.maxOpen {
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
	e := &entry{t: t, ready: make(chan struct{}), refs: 1}
	d.touch(e, scan)
	d.entries[t.Name] = e
	d.unlock()

	db, err := d.open(ctx, t, dburl.Options{Flag: "tenant " + t.Name + "'s URL", MaxConns: d.maxConns,
		ConnectTimeout: d.connectTimeout})
	d.mu.Lock()
	e.db = db
	if err != nil {
		e.err = fmt.Errorf("tenant %s: %w", t.Name, err)
		d.remove(e)
	}
	close(e.ready)
	d.unlock()
	if err != nil {
		d.release(e)
		return nil, e.err
	}
	return e, nil
}

// touch records a use of e, unless it is a scan's. d.mu is held.
func (d *databases) touch(e *entry, scan bool) {
	if !scan {
		d.tick++
		e.used = d.tick
	}
}

// idlest returns the entry no one uses that was used least recently, nil
// when every entry is in use. d.mu is held.
func (d *databases) idlest() *entry {
	var idlest *entry
	for _, e := range d.entries {
		if e.refs == 0 && (idlest == nil || e.used < idlest.used) {
			idlest = e
		}
	}
	return idlest
}

// remove takes e (nil: none) out of the entries; its database is closed
// now when no one uses it, or else when the last user releases it. d.mu
// is held.
func (d *databases) remove(e *entry) {
	if e == nil || e.gone {
		return
	}
	e.gone = true
	if d.entries[e.t.Name] == e {
		delete(d.entries, e.t.Name)
	}
	d.closeIfDone(e)
	d.notify()
}

// release drops a reference to e taken by acquire.
func (d *databases) release(e *entry) {
	d.mu.Lock()
	e.refs--
	d.closeIfDone(e)
	d.notify()
	d.unlock()
}

// closeIfDone has e's database closed, once d.mu is unlocked, when e is
// removed and no one uses it. d.mu is held.
func (d *databases) closeIfDone(e *entry) {
	if e.gone && e.refs == 0 && e.db != nil {
		d.closing = append(d.closing, e.db)
		e.db = nil
	}
}

// notify wakes those waiting for a free place. d.mu is held.
func (d *databases) notify() {
	close(d.freed)
	d.freed = make(chan struct{})
}

// unlock unlocks d.mu and closes the databases left to close.
func (d *databases) unlock() {
	closing := d.closing
	d.closing = nil
	d.mu.Unlock()
	for _, db := range closing {
		db.Close()
	}
}

// close closes every database no one uses, and the others once released.
// Later uses open them again.
func (d *databases) close() {
	d.mu.Lock()
	for _, e := range d.entries {
		d.remove(e)
	}
	d.unlock()
}

// isOpen reports whether t's database is open or opening.
func (d *databases) isOpen(t Tenant) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.entries[t.Name]
	return e != nil && e.t.URL == t.URL
}

// openCount is how many databases are open or opening.
func (d *databases) openCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.entries)
}
